"""Per-node status objects (ClusterGKMCacheNode) through the API server, on a few hundred kwok nodes.

One ClusterGKMCache over two namespaces is placed on the three GPU workers, a GPU node with a taint it does not
tolerate and a node without a GPU; 200 more GPU nodes are not selected. Every GPU node gets an object saying
the cache's state there or why not; the node without a GPU is counted in the cache's bounded status. A check
run writes nothing, a rerun writes nothing, and removing the cache leaves no object behind.
"""

import json
import time
import uuid

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.node_objects import (
    list_node_objects,
)
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, AuditWrites, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GROUP, VERSION = "gkm.io", "v1alpha1"
PLURAL = "clustergkmcachenodes"
WORKERS = ["gkm-gpu-worker-1", "gkm-gpu-worker-2", "gkm-gpu-worker-3"]
BULK = 200
TAINT = {"key": "team", "value": "ml", "effect": "NoSchedule"}
# The resource's status stays this small whatever the cluster's size (the per-slot status grew ~290 bytes a slot).
STATUS_BOUND = 8 * 1024


@pytest.fixture(scope="module")
def pool(kube):
    """(bulk GPU node names, tainted GPU node, node without a GPU): kwok nodes added for this module."""
    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
    from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

    raw = Kube(kube)
    suffix = uuid.uuid4().hex[:5]
    nodes = gpu_nodes.render_nodes([
        {"name": "pn-%s" % suffix, "count": BULK, "vendor": "amd"},
        {"name": "pn-%s-tainted" % suffix, "count": 1, "vendor": "amd", "taints": [TAINT]},
        {"name": "pn-%s-cpu" % suffix, "count": 1, "vendor": "none"},
    ])
    names = [node["metadata"]["name"] for node in nodes]
    created = raw.map(lambda node: raw.request("POST", "/api/v1/nodes", body=node), nodes)
    assert not [c for c in created if isinstance(c, Exception)], created
    # Only the two selected ones must be Ready: a not-ready taint would join their reasons.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(_ready(raw.get("Node", name)) for name in names[-2:]):
        time.sleep(0.5)
    yield names[:BULK], names[BULK], names[BULK + 1]
    raw.map(lambda name: raw.delete("Node", name), names)


def _ready(node):
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
    return ready and not any(key.startswith("node.kubernetes.io/") for key in taints)


@pytest.fixture
def second_namespace(kube):
    name = "t-pn-b-%s" % uuid.uuid4().hex[:5]
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": name}})
    yield name
    client.CoreV1Api(kube).delete_namespace(name)


def manifest(name, image, namespaces, selected):
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]} for node in selected]
    template = {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": terms}}}}}
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "ClusterGKMCache", "metadata": {"name": name},
            "spec": {"image": image, "podTemplate": template, "workloadNamespaces": namespaces}}


def reconcile(sim, name, check=False, diff=False, **args):
    return run_module("cache_reconcile", sim.kubeconfig, check=check, diff=diff, kind="ClusterGKMCache", name=name,
                      registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK,
                      **args)


def objects_listing(crds, cache):
    listed = crds.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]
    return {obj["metadata"]["name"]: obj["status"]["caches"][cache] for obj in listed
            if cache in ((obj.get("status") or {}).get("caches") or {})}


def test_per_node_objects_say_why_and_a_rerun_writes_nothing(sim, kube, crds, registry, namespace,
                                                             second_namespace, pool):
    bulk, tainted, cpu = pool
    image = kcache_images.build_image(registry.host, "pernode/vector-add", "v1", kcache_images.CacheSpec(backend="hip"))
    name = "pn-%s" % uuid.uuid4().hex[:5]
    crds.create_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", manifest(
        name, image.ref, [namespace, second_namespace], [*WORKERS, tainted, cpu]))
    try:
        audit = AuditWrites()
        planned = reconcile(sim, name, check=True, diff=True, wait=False)
        assert not planned.get("failed"), planned.get("msg")
        gpu_nodes_now = {n.metadata.name for n in client.CoreV1Api(kube).list_node(
            label_selector="gkm.io/gpu-backend").items}
        assert planned["node_objects"]["created"] == len(gpu_nodes_now), planned["node_objects"]
        assert audit.since(PLURAL) == []
        headers = [d["before_header"] for d in planned["diff"] if "ClusterGKMCacheNode" in d["before_header"]]
        assert headers and ("%d node(s) change" % len(gpu_nodes_now)) in headers[0]

        first = reconcile(sim, name, wait=True, wait_timeout=120)
        assert first["changed"] and not first.get("failed"), first.get("msg")
        assert first["node_objects"]["created"] == len(gpu_nodes_now) and first["node_objects"]["conflicts"] == 0
        states = objects_listing(crds, name)
        assert set(states) == gpu_nodes_now and cpu not in states
        # Read in pages of 50, the objects are those of one LIST.
        from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube

        paged = Kube(kube).list_pages("/apis/%s/%s/%s" % (GROUP, VERSION, PLURAL), page_size=50)
        assert len(paged) > 50 and sorted(o["metadata"]["name"] for o in paged) == sorted(
            o["metadata"]["name"] for o in crds.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"])
        for worker in WORKERS:
            state = states[worker][image.digest]
            assert state["state"] == "Extracted" and set(state["pvcStatus"]) == {namespace, second_namespace}
            assert all(pvc["conditions"][0]["type"] == "Extracted" for pvc in state["pvcStatus"].values())
        excluded = states[tainted][image.digest]
        assert (excluded["state"], excluded["reason"]) == ("Excluded", "UntoleratedTaint")
        assert excluded["untoleratedTaints"] == ["team=ml:NoSchedule"]
        assert "spec.podTemplate.spec.tolerations" in excluded["message"]
        assert {states[node][image.digest]["reason"] for node in bulk} == {"NotSelected"}

        resource = crds.get_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", name)
        status = resource["status"]
        assert "nodes" not in status and len(json.dumps(status)) < STATUS_BOUND, len(json.dumps(status))
        assert (status["phase"], status["nodeCnt"]) == ("Extracted", 3)
        reasons = {line["reason"]: line for line in status["excludedReasons"]}
        assert cpu in reasons["NoGPU"]["nodes"] and tainted in reasons["UntoleratedTaint"]["nodes"]
        assert status["nodeExcludedCnt"] >= BULK + 2

        info = run_module("cache_info", sim.kubeconfig, name=name)
        entries = {(e["namespace"], e["node"]): e for e in info["caches"][0]["status"]["entries"]}
        assert entries[("", tainted)]["reason"] == "UntoleratedTaint"
        assert {entries[(ns, worker)]["phase"] for ns in (namespace, second_namespace) for worker in WORKERS} == {
            "Extracted"}

        audit = AuditWrites()
        again = reconcile(sim, name, wait=True, wait_timeout=60)
        assert not again.get("failed"), again.get("msg")
        assert again["changed"] is False and again["api_writes"] == 0, again["node_objects"]
        assert again["node_objects"] == {"created": 0, "patched": 0, "deleted": 0, "conflicts": 0}
        assert audit.since(PLURAL, name) == []
    finally:
        removed = reconcile(sim, name, state="absent", force=True)
        crds.delete_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", name)
    assert not removed.get("failed"), removed.get("msg")
    assert removed["node_objects"]["deleted"] >= BULK
    assert objects_listing(crds, name) == {}


def test_a_write_that_meets_another_caches_change_is_read_and_planned_again(kube, crds):
    """Two caches share a node's object: a write planned from a read that another cache's write overtook gets 409
    from the API server, and only that node is read again and written again, keeping both caches."""
    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
    from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.source import ListSource
    from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_writer

    class Stale(ListSource):
        """The first cache's next run read the objects before the second cache wrote."""

        def node_objects(self, cache_kind, namespace):
            return stale

    raw = Kube(kube)
    nodes = [raw.get("Node", name) for name in WORKERS[:2]]
    first, second = "pn-a-%s" % uuid.uuid4().hex[:5], "pn-b-%s" % uuid.uuid4().hex[:5]

    def states(phase):
        return {name: {"sha256:" + "a" * 64: {"state": phase}} for name in WORKERS[:2]}

    try:
        node_writer.sync_node_objects(raw, "ClusterGKMCache", None, first, states("Pending"), nodes)
        stale = list_node_objects(raw, "ClusterGKMCache", None)
        node_writer.sync_node_objects(raw, "ClusterGKMCache", None, second, states("Extracted"), nodes)
        result = node_writer.sync_node_objects(raw, "ClusterGKMCache", None, first, states("Extracted"), nodes,
                                               source=Stale(raw))
        assert (result["conflicts"], result["patched"]) == (2, 2), result
        for cache in (first, second):
            assert {node: set(digests) for node, digests in objects_listing(crds, cache).items()} == {
                name: {"sha256:" + "a" * 64} for name in WORKERS[:2]}
            assert {d["sha256:" + "a" * 64]["state"] for d in objects_listing(crds, cache).values()} == {"Extracted"}
    finally:
        for cache in (first, second):
            node_writer.sync_node_objects(raw, "ClusterGKMCache", None, cache, {}, nodes)
    assert objects_listing(crds, first) == objects_listing(crds, second) == {}
