"""Which caches a Node event re-reconciles (module_utils/operator/node_events.py), pure."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_status import node_gpus
from ansible_collections.gkm.cluster.plugins.module_utils.operator.node_events import affected_caches

GPU_LABELS = {"gkm.io/gpu-backend": "hip", "gkm.io/gpu-arch": "gfx90a", "gkm.io/gpu-warp-size": "64"}


def node(name="gpu-1", labels=None, taints=None, unschedulable=False):
    return {"metadata": {"name": name, "labels": dict(GPU_LABELS) if labels is None else labels},
            "spec": {"taints": taints or [], "unschedulable": unschedulable}}


def cache(name="vector-add", namespace="team-a", pod_spec=None):
    return {"kind": "GKMCache", "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": "registry.example/vector-add:v1", "podTemplate": {"spec": pod_spec or {}}}}


def node_status(state, kind="GKMCacheNode", namespace="team-a", cache_name="vector-add"):
    """The per-node status object of gpu-1 with one cache's state on it."""
    return {"kind": kind, "metadata": {"name": "gpu-1", "namespace": namespace},
            "status": {"caches": {cache_name: {"sha256:" + "a" * 64: {"state": state}}}}}


def pvc_on_node(cache_name="vector-add", cache_namespace="team-a"):
    return {"metadata": {"labels": {"gkm.io/cache": cache_name, "gkm.io/cache-namespace": cache_namespace,
                                    "gkm.io/node": "gpu-1"}}}


def names(resources):
    return [r["metadata"]["name"] for r in resources]


def test_a_joining_gpu_node_affects_the_caches_it_is_placed_for_and_no_other():
    caches = [cache("anywhere"), cache("elsewhere", pod_spec={"nodeSelector": {"pool": "b"}})]
    assert names(affected_caches(node(), caches, [])) == ["anywhere"]


def test_a_node_that_holds_the_cache_and_is_still_placed_affects_nothing():
    # A heartbeat of a node already served must not start a reconcile.
    assert affected_caches(node(), [cache()], [pvc_on_node()]) == []


def test_a_node_whose_taint_or_cordon_puts_it_out_of_placement_affects_the_caches_it_holds():
    tainted = node(taints=[{"key": "maintenance", "effect": "NoSchedule"}])
    assert names(affected_caches(tainted, [cache()], [pvc_on_node()])) == ["vector-add"]
    assert names(affected_caches(node(unschedulable=True), [cache()], [pvc_on_node()])) == ["vector-add"]


def test_a_node_marked_unreachable_for_a_missed_heartbeat_affects_nothing():
    late = node(taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    assert affected_caches(late, [cache()], [pvc_on_node()]) == []


def test_a_toleration_keeps_a_tainted_node_placed():
    tainted = node(taints=[{"key": "gpu", "value": "amd", "effect": "NoSchedule"}])
    tolerant = cache(pod_spec={"tolerations": [{"key": "gpu", "operator": "Exists"}]})
    assert names(affected_caches(tainted, [tolerant], [])) == ["vector-add"]


def test_a_node_that_lost_its_gpu_labels_affects_the_caches_it_holds_unless_compatibility_is_ignore():
    plain = node(labels={})
    assert names(affected_caches(plain, [cache()], [pvc_on_node()])) == ["vector-add"]
    assert affected_caches(plain, [cache()], [pvc_on_node()], compatibility="ignore") == []


def test_a_node_its_per_node_object_says_the_cache_left_out_is_not_reconciled_again():
    # A GPU node whose GPUs the image cannot run: placed, holds nothing, and its per-node object says why.
    assert affected_caches(node(), [cache()], [], node_statuses=[node_status("Incompatible")]) == []
    assert affected_caches(node(), [cache()], [], node_statuses=[node_status("Excluded")]) == []


def test_another_namespace_or_kind_leaving_the_node_out_does_not_hide_a_joining_node():
    others = [node_status("Incompatible", namespace="team-b"),
              node_status("Excluded", kind="ClusterGKMCacheNode", namespace="")]
    assert names(affected_caches(node(), [cache()], [], node_statuses=others)) == ["vector-add"]
    assert names(affected_caches(node(), [cache()], [], node_statuses=[node_status("Extracting")])) == ["vector-add"]


def test_objects_of_a_cache_of_another_namespace_or_kind_do_not_count_as_held():
    cluster_cache = {"kind": "ClusterGKMCache", "metadata": {"name": "vector-add"},
                     "spec": {"image": "registry.example/vector-add:v1", "workloadNamespaces": ["team-a"]}}
    held = [pvc_on_node(cache_namespace="team-a")]
    assert names(affected_caches(node(), [cache(namespace="team-b"), cluster_cache], held)) == [
        "vector-add", "vector-add"]


NVIDIA_LABELS = {"gkm.io/gpu-backend": "cuda", "gkm.io/gpu-arch": "90", "gkm.io/gpu-warp-size": "32"}


def judged_on(gpu_node, state):
    """gpu-1's per-node status object as the cache's last reconcile wrote it, GPUs included, for gpu_node."""
    status_object = node_status(state)
    status_object["status"]["gpus"] = node_gpus(gpu_node)
    return status_object


def test_a_node_whose_gpus_changed_since_the_last_reconcile_affects_the_caches_placed_or_held_there():
    recorded = [judged_on(node(), "Extracted")]
    # A heartbeat: the GPUs the reconcile judged are still there.
    assert affected_caches(node(), [cache()], [pvc_on_node()], node_statuses=recorded) == []
    # The node now has other GPUs: whether the image still runs there is the reconcile's to judge.
    regpu = node(labels=dict(NVIDIA_LABELS))
    assert names(affected_caches(regpu, [cache()], [pvc_on_node()], node_statuses=recorded)) == ["vector-add"]
    # Left out as Incompatible on its old GPUs, the node may fit now.
    left_out = [judged_on(regpu, "Incompatible")]
    assert affected_caches(regpu, [cache()], [], node_statuses=left_out) == []
    assert names(affected_caches(node(), [cache()], [], node_statuses=left_out)) == ["vector-add"]


def test_a_gpu_change_affects_only_the_caches_whose_per_node_object_judged_the_node():
    regpu = node(labels=dict(NVIDIA_LABELS))
    recorded = [judged_on(node(), "Extracted")]
    elsewhere = cache("elsewhere", pod_spec={"nodeSelector": {"pool": "b"}})
    other_namespace = cache(namespace="team-b")
    assert affected_caches(regpu, [elsewhere], [], node_statuses=recorded) == []
    # team-b's cache has no per-node object on gpu-1: it joins as any placed node does.
    assert names(affected_caches(regpu, [other_namespace], [], node_statuses=recorded)) == ["vector-add"]


GPU_TAINT = {"key": "gpu", "value": "amd", "effect": "NoSchedule"}
TOLERATE_GPU = [{"key": "gpu", "operator": "Exists"}]
MALFORMED_POD_SPECS = [
    {"tolerations": TOLERATE_GPU, "affinity": {"nodeAffinity": "x"}},
    {"tolerations": TOLERATE_GPU, "affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}},
    {"tolerations": TOLERATE_GPU, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": ["x"]}]}}}},
    {"tolerations": ["x"]},
]


@pytest.mark.parametrize("pod_spec", MALFORMED_POD_SPECS)
def test_a_malformed_cache_among_good_ones_is_reconciled_and_does_not_stop_the_others(pod_spec):
    # One tenant's resource written before the CRD typed these fields: its own reconcile reports the field, and
    # every other cache is judged as if it were not there.
    tainted = node(taints=[GPU_TAINT])
    good = {"tolerations": TOLERATE_GPU}
    caches = [cache("first", pod_spec=good), cache("malformed", pod_spec=pod_spec), cache("last", pod_spec=good)]
    assert names(affected_caches(tainted, caches, [])) == ["first", "malformed", "last"]
    assert names(affected_caches(tainted, caches, [pvc_on_node("first"), pvc_on_node("last")])) == ["malformed"]
