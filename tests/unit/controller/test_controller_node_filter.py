"""The in-process Node filter (controller/gkm_controller/node_filter.py): heartbeats and status-only updates start
nothing; a change the facts read starts something only on a GPU node or one holding a cache's objects; and the index
fed by the watch (feed.py) holds what the facts stage reads."""


import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    GPU_BACKEND_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import INDEXED_KINDS, ClusterIndex
from controller.gkm_controller.feed import (
    MANAGED_SELECTOR,
    OWN_WATCHES,
    feed,
    kopf_kinds,
    own_watches,
    watched_kinds,
)
from controller.gkm_controller.node_filter import on_node_event


def node(name="gpu-1", beat=1, gpu=True, **labels):
    labels = dict(labels)
    if gpu:
        labels[GPU_BACKEND_LABEL] = "hip"
    return {"kind": "Node", "metadata": {"name": name, "labels": labels, "resourceVersion": str(beat)},
            "spec": {}, "status": {"capacity": {"amd.com/gpu": "8"}, "conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-27T10:%02d:00Z" % beat}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.%d" % beat}]}}


def slot_pvc(node_name):
    return {"kind": "PersistentVolumeClaim", "metadata": {
        "name": "vector-add-abc-%s" % node_name, "namespace": "team-a",
        "labels": {MANAGED_BY_LABEL: MANAGER, CACHE_LABEL: "vector-add", NODE_LABEL: node_name}}}


def test_two_hundred_heartbeats_start_nothing():
    index = ClusterIndex()
    assert on_node_event(index, None, node()).starts is False  # the initial listing
    decisions = [on_node_event(index, "MODIFIED", node(beat=beat % 60)) for beat in range(2, 202)]
    assert not any(d.changed or d.starts for d in decisions)
    assert index.version == 1


@pytest.mark.parametrize("change", ["label", "taint", "cordon", "capacity"])
def test_a_change_the_facts_read_on_a_gpu_node_starts_a_reconcile(change):
    index = ClusterIndex()
    on_node_event(index, None, node())
    changed = node(beat=2)
    if change == "label":
        changed["metadata"]["labels"]["team"] = "ml"
    elif change == "taint":
        changed["spec"]["taints"] = [{"key": "team", "value": "ml", "effect": "NoSchedule"}]
    elif change == "cordon":
        changed["spec"]["unschedulable"] = True
    else:
        changed["status"]["capacity"]["amd.com/gpu"] = "4"
    decision = on_node_event(index, "MODIFIED", changed)
    assert decision.changed and decision.starts, decision


def test_a_node_without_gpus_starts_something_only_when_it_holds_a_caches_objects():
    index = ClusterIndex()
    on_node_event(index, None, node("cpu-1", gpu=False))
    relabelled = node("cpu-1", beat=2, gpu=False, team="ml")
    decision = on_node_event(index, "MODIFIED", relabelled)
    assert decision.changed and not decision.starts
    index.apply("ADDED", slot_pvc("cpu-1"))
    relabelled["metadata"]["labels"]["team"] = "infra"
    assert on_node_event(index, "MODIFIED", relabelled).starts


def test_a_node_that_loses_its_gpu_label_or_is_deleted_starts_a_reconcile():
    index = ClusterIndex()
    on_node_event(index, None, node())
    assert on_node_event(index, "MODIFIED", node(beat=2, gpu=False)).starts  # it was a GPU node
    on_node_event(index, "MODIFIED", node(beat=3))
    decision = on_node_event(index, "DELETED", node(beat=4))
    assert decision.changed and decision.starts and index.count("Node") == 0


def test_a_joining_gpu_node_starts_a_reconcile():
    index = ClusterIndex()
    assert on_node_event(index, "ADDED", node("gpu-9")).starts


def test_the_feed_applies_watch_events_to_the_index():
    index = ClusterIndex()
    pvc = slot_pvc("gpu-1")
    assert feed(index, {"type": None, "object": pvc}) is True
    assert feed(index, {"type": "MODIFIED", "object": dict(pvc, kind=None)}, kind="PersistentVolumeClaim") is False
    assert feed(index, {"type": "DELETED", "object": pvc}) is True
    with pytest.raises(ValueError, match="BOOKMARK"):
        feed(index, {"type": "BOOKMARK", "object": pvc})


def test_every_indexed_kind_is_watched_and_only_ours_are_filtered_on_the_server():
    kinds = watched_kinds()
    assert set(kinds) == set(INDEXED_KINDS)
    filtered = sorted(kind for kind, (_g, _v, _p, selector) in kinds.items() if selector)
    assert filtered == ["Job", "PersistentVolume", "Secret"]
    assert {kinds[kind][3] for kind in filtered} == {MANAGED_SELECTOR}
    assert kinds["Job"][:3] == ("batch", "v1", "jobs") and kinds["Node"][:3] == ("", "v1", "nodes")
    # the kinds that grow with the nodes and the pods through the controller's own watches, the rest through kopf
    assert set(kopf_kinds()) == {"GKMCache", "ClusterGKMCache", "Namespace", "StorageClass"}
    assert not [kind for kind in kopf_kinds() if kinds[kind][3]]  # kopf is given no selector
    assert set(OWN_WATCHES) == set(kinds) - set(kopf_kinds()) and OWN_WATCHES[0] == "Node"
    paths = own_watches()
    assert paths["Node"] == ("/api/v1/nodes", None) and paths["Job"] == ("/apis/batch/v1/jobs", MANAGED_SELECTOR)
    assert paths["GKMCacheNode"] == ("/apis/gkm.io/v1alpha1/gkmcachenodes", None)
    assert paths["Secret"] == ("/api/v1/secrets", MANAGED_SELECTOR)
    # every registry Secret of ours in the system namespace: watched there alone, the rest unchanged
    narrowed = own_watches("gkm-system")
    assert narrowed["Secret"] == ("/api/v1/namespaces/gkm-system/secrets", MANAGED_SELECTOR)
    assert {kind: value for kind, value in narrowed.items() if kind != "Secret"} == {
        kind: value for kind, value in paths.items() if kind != "Secret"}
