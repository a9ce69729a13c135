"""Per-node status objects: created once, patched only where a cache's state changed, shared by caches, removed."""

import copy
import json

from ansible_collections.gkm.cluster.plugins.module_utils.common.merge_patch import merge_patch
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    node_object_path,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    MANAGED_BY_LABEL,
    MANAGER,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import CacheSpec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import scheduling
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_objects, node_status
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from tests.helpers.distribute import T0, T1, T2, NodeObjectServer, apply_merge_patch, large_cluster_result

DIGEST = "sha256:" + "c" * 64
NODES = gpu_nodes.render_nodes([{"name": "gpu", "count": 3, "vendor": "amd", "gpus": 2}])
NAMES = [n["metadata"]["name"] for n in NODES]


def state(kind="Extracted", pods=0, namespaces=("a", "b", "c"), cache="llm"):
    entry = {"state": kind, "compatibleGPUs": [0, 1], "pvcStatus": {
        ns: {"pvcName": "%s-gpu-1-0123456789" % cache, "jobName": "%s-gpu-1-9876543210" % cache,
             "pvName": "gkm-%s-gpu-1-0123456789" % cache, "pvcOwner": "Agent",
             "conditions": [{"type": kind, "status": "True", "reason": kind}]} for ns in namespaces}}
    if pods:
        entry["pods"] = [{"podNamespace": "a", "podName": "app-%d" % i} for i in range(pods)]
    return {DIGEST: entry}


def plan(server, cache, states, now, kind="ClusterGKMCache"):
    return node_objects.plan_node_objects(kind, None, cache, states, NODES, server.list(), now)


def test_merge_patch_is_minimal_and_deletes_with_null():
    before = {"a": {"x": 1, "y": [1, 2]}, "b": 2, "c": {"keep": True}}
    after = {"a": {"x": 1, "y": [1, 3]}, "c": {"keep": True}, "d": {}}
    patch = merge_patch(before, after)
    assert patch == {"a": {"y": [1, 3]}, "b": None, "d": {}}
    assert apply_merge_patch(before, patch) == after
    assert merge_patch(after, copy.deepcopy(after)) == {}


def test_first_run_creates_each_object_then_a_rerun_writes_nothing():
    server = NodeObjectServer()
    states = {name: state() for name in NAMES}
    writes = plan(server, "llm", states, T0)
    assert [(w.verb, w.name) for w in writes] == [(verb, name) for name in NAMES for verb in ("create", "patch_status")]
    server.write(writes)
    obj = server.objects[NAMES[0]]
    assert obj["kind"] == "ClusterGKMCacheNode" and "namespace" not in obj["metadata"]
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gkm.cluster",
                                         "kubernetes.io/hostname": NAMES[0]}
    assert obj["status"]["nodeName"] == NAMES[0] and obj["status"]["gpus"] == [{"gpuType": "hip gfx90a", "ids": [0, 1]}]
    assert obj["status"]["counts"] == {"nodeCnt": 1, "nodeInUseCnt": 0, "nodeNotInUseCnt": 1, "nodeErrorCnt": 0,
                                       "podRunningCnt": 0, "podDeletingCnt": 0, "podOutdatedCnt": 0}
    entry = obj["status"]["caches"]["llm"][DIGEST]
    assert entry["lastUpdated"] == T0 and entry["pvcStatus"]["a"]["conditions"][0]["lastTransitionTime"] == T0

    # The same states an hour later: no write at all (timestamps alone never justify one).
    assert plan(server, "llm", copy.deepcopy(states), T1) == []


def test_a_change_on_one_node_patches_that_node_only_and_keeps_unchanged_transition_times():
    server = NodeObjectServer()
    states = {name: state() for name in NAMES}
    server.write(plan(server, "llm", states, T0))
    version = server.objects[NAMES[1]]["metadata"]["resourceVersion"]
    changed = copy.deepcopy(states)
    changed[NAMES[1]][DIGEST]["pvcStatus"]["b"]["conditions"] = [
        {"type": "Error", "status": "True", "reason": "ToolsImageNotPullable", "message": "m"}]
    changed[NAMES[1]][DIGEST]["state"] = "Error"
    writes = plan(server, "llm", changed, T1)
    assert [(w.verb, w.name, w.resource_version) for w in writes] == [("patch_status", NAMES[1], version)]
    patch = writes[0].body["status"]
    assert set(patch) == {"caches", "counts"} and patch["counts"] == {"nodeNotInUseCnt": 0, "nodeErrorCnt": 1}
    assert set(patch["caches"]["llm"][DIGEST]) == {"state", "pvcStatus", "lastUpdated"}
    server.write(writes)
    entry = server.objects[NAMES[1]]["status"]["caches"]["llm"][DIGEST]
    assert entry["lastUpdated"] == T1
    assert entry["pvcStatus"]["a"]["conditions"][0]["lastTransitionTime"] == T0
    assert entry["pvcStatus"]["b"]["conditions"][0]["lastTransitionTime"] == T1


def test_caches_share_a_node_object_without_touching_each_other():
    server = NodeObjectServer()
    server.write(plan(server, "llm", {name: state(pods=2) for name in NAMES}, T0))
    writes = plan(server, "vision", {NAMES[0]: state(cache="vision")}, T1)
    assert [(w.verb, w.name) for w in writes] == [("patch_status", NAMES[0])]
    assert set(writes[0].body["status"]["caches"]) == {"vision"}
    server.write(writes)
    status = server.objects[NAMES[0]]["status"]
    assert sorted(status["caches"]) == ["llm", "vision"]
    assert status["counts"]["nodeInUseCnt"] == 0 and status["counts"]["podRunningCnt"] == 2

    # The cache goes away: its entry leaves the shared object, the objects it alone used are deleted.
    writes = plan(server, "llm", {}, T2)
    assert sorted((w.verb, w.name) for w in writes) == [("delete", NAMES[1]), ("delete", NAMES[2]),
                                                        ("patch_status", NAMES[0])]
    assert next(w for w in writes if w.verb == "patch_status").body["status"]["caches"] == {"llm": None}
    server.write(writes)
    assert sorted(server.objects) == [NAMES[0]] and list(server.objects[NAMES[0]]["status"]["caches"]) == ["vision"]


def test_namespaced_objects_live_in_the_cache_namespace_and_foreign_objects_are_left_alone():
    foreign = {"apiVersion": "gkm.io/v1alpha1", "kind": "GKMCacheNode",
               "metadata": {"name": NAMES[0], "namespace": "team-a", "resourceVersion": "7", "labels": {}},
               "status": {"nodeName": NAMES[0], "caches": {"llm": {}}}}
    writes = node_objects.plan_node_objects("GKMCache", "team-a", "llm", {name: state() for name in NAMES[:2]},
                                            NODES, [foreign], T0)
    assert [(w.verb, w.name) for w in writes] == [("create", NAMES[1]), ("patch_status", NAMES[1])]
    assert writes[0].body["metadata"]["namespace"] == "team-a" and writes[0].body["kind"] == "GKMCacheNode"
    assert node_object_path("GKMCache", "team-a", NAMES[1]) == (
        "/apis/gkm.io/v1alpha1/namespaces/team-a/gkmcachenodes/%s" % NAMES[1])
    assert node_object_path("ClusterGKMCache") == "/apis/gkm.io/v1alpha1/clustergkmcachenodes"


def test_a_node_object_with_twenty_caches_stays_small():
    server = NodeObjectServer()
    for number in range(20):
        cache = "cache-%02d-with-a-realistic-name" % number
        server.write(plan(server, cache, {NAMES[0]: state(pods=3, cache=cache)}, T0))
    obj = server.objects[NAMES[0]]
    size = len(json.dumps(obj, separators=(",", ":")))
    assert len(obj["status"]["caches"]) == 20
    assert size < 48 * 1024, size


def test_5000_nodes_by_3_namespaces_converge_in_one_write_pair_per_node_and_rerun_with_none():
    result = large_cluster_result()
    names = sorted({entry["node"] for entry in result["status"]["entries"] if entry["phase"] != "Incompatible"})
    nodes = [gpu_nodes.render_node(name, {"vendor": "nvidia", "gpus": 8}) for name in names]
    eligibility = scheduling.Eligibility()
    eligibility.eligible = nodes
    spec = CacheSpec(name="llama-70b-kernels", digest=result["cache"]["digest"],
                     targets=[{"backend": "cuda", "arch": "90", "warp_size": 32}])
    states = node_status.node_cache_states(spec, eligibility, result["status"]["entries"], nodes, [])
    server = NodeObjectServer()
    writes = node_objects.plan_node_objects("ClusterGKMCache", None, spec.name, states, nodes, server.list(), T0)
    assert len(writes) == 2 * 5000
    server.write(writes)
    assert max(len(json.dumps(obj, separators=(",", ":"))) for obj in server.objects.values()) < 4096
    assert node_objects.plan_node_objects("ClusterGKMCache", None, spec.name, states, nodes, server.list(), T1) == []


def test_the_diff_shows_the_changed_entries_of_at_most_20_nodes_without_timestamps():
    from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_writer import (
        MAX_DIFF_NODES,
        node_diff,
    )

    names = ["gpu-%02d" % number for number in range(25)]
    before = {name: {DIGEST: {"state": "Pending"}} for name in names}
    existing = [{"metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGER}}, "status": {"caches": {"llama": {
        DIGEST: {"state": "Pending", "lastUpdated": T0}}}}} for name in names]
    after = {name: {DIGEST: {"state": "Extracted"}} for name in names}
    writes = node_objects.plan_node_objects("ClusterGKMCache", None, "llama", after, [], existing, T1)
    diff = node_diff("ClusterGKMCache", "llama", after, existing, writes)
    assert diff["before_header"] == "ClusterGKMCacheNode objects of llama (25 node(s) change, first 20 shown)"
    assert len(diff["before"]) == len(diff["after"]) == MAX_DIFF_NODES
    assert diff["before"]["gpu-00"] == before["gpu-00"] and diff["after"]["gpu-00"] == after["gpu-00"]
    assert node_diff("ClusterGKMCache", "llama", {}, existing, [])["before"] == {}


def test_the_objects_there_are_read_through_the_facts_source_the_index_sending_nothing():
    from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex, IndexSource
    from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_writer import sync_node_objects

    server = NodeObjectServer()
    states = {name: state() for name in NAMES}
    server.write(plan(server, "llm", states, T0))
    index = ClusterIndex()
    for obj in server.list():
        index.apply(None, dict(obj, kind="ClusterGKMCacheNode"))
    # kube None: in check mode nothing but the source may be asked
    converged = sync_node_objects(None, "ClusterGKMCache", None, "llm", states, NODES, check_mode=True,
                                  source=IndexSource(index))
    assert converged == {"created": 0, "patched": 0, "deleted": 0, "conflicts": 0}
    moved = dict(states, **{NAMES[0]: state("Pending")})
    changed = sync_node_objects(None, "ClusterGKMCache", None, "llm", moved, NODES, check_mode=True,
                                source=IndexSource(index))
    assert changed == {"created": 0, "patched": 1, "deleted": 0, "conflicts": 0}
