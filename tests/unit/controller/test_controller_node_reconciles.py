"""Which caches a Node event that passed the filter reconciles (controller/gkm_controller/node_reconciles.py), decided
over the index with today's rule, never a cache being deleted; a deleted node, the caches holding objects on it."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    GPU_ARCH_LABEL,
    GPU_BACKEND_LABEL,
    GPU_WARP_SIZE_LABEL,
    NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex
from controller.gkm_controller.node_filter import on_node_event
from controller.gkm_controller.node_reconciles import NodeReconciles, caches_for_node

GPU_LABELS = {GPU_BACKEND_LABEL: "hip", GPU_ARCH_LABEL: "gfx90a", GPU_WARP_SIZE_LABEL: "64"}


def node(name="gpu-1", taints=()):
    return {"kind": "Node", "metadata": {"name": name, "labels": dict(GPU_LABELS)},
            "spec": {"taints": list(taints)}, "status": {}}


def cache(name="vector-add", namespace="team-a", deleting=False, pod_spec=None):
    metadata = {"name": name, "namespace": namespace}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"kind": "GKMCache", "metadata": metadata,
            "spec": {"image": "registry.example/vector-add:v1", "podTemplate": {"spec": pod_spec or {}}}}


def pvc_on(node_name, cache_name="vector-add"):
    return {"kind": "PersistentVolumeClaim", "metadata": {
        "name": "%s-%s" % (cache_name, node_name), "namespace": "team-a",
        "labels": {CACHE_LABEL: cache_name, CACHE_NAMESPACE_LABEL: "team-a", NODE_LABEL: node_name}}}


def index_of(*objects):
    index = ClusterIndex()
    for obj in objects:
        index.apply(None, obj)
    return index


def names(resources):
    return [resource["metadata"]["name"] for resource in resources]


def test_a_joining_gpu_node_reconciles_the_caches_placed_on_it_but_not_one_being_deleted():
    index = index_of(cache("anywhere"), cache("elsewhere", pod_spec={"nodeSelector": {"pool": "b"}}),
                     cache("going", deleting=True))
    submitted = []
    decision = on_node_event(index, "ADDED", node())
    assert decision.starts
    assert names(NodeReconciles(index, lambda kind, resource: submitted.append((kind, resource)))(decision)) == [
        "anywhere"]
    assert [(kind, resource["metadata"]["name"]) for kind, resource in submitted] == [("GKMCache", "anywhere")]


def test_a_node_already_served_reconciles_nothing_and_one_tainted_away_the_caches_it_holds():
    index = index_of(cache(), node(), pvc_on("gpu-1"))
    assert caches_for_node(index, "gpu-1") == []
    index.apply("MODIFIED", node(taints=[{"key": "maintenance", "effect": "NoSchedule"}]))
    assert names(caches_for_node(index, "gpu-1")) == ["vector-add"]


def test_a_deleted_node_reconciles_the_caches_holding_objects_on_it():
    index = index_of(cache(), cache("other"), node(), pvc_on("gpu-1"))
    index.apply("DELETED", node())
    assert names(caches_for_node(index, "gpu-1")) == ["vector-add"]
