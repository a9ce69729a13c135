"""What one cache may cost a node is the admin's (docs/security.md, class 10): `extract_limits` (the caches role's
`caches_extract_limits`). A tenant's GKMCache whose image declares more bytes than the limit is refused before
anything is written; under the limits, its extraction Jobs carry them, so an image that declares less than it holds
stops there. The tenant writes and reads its cache through its own token; the reconcile runs as the collection
runs it."""

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    API_VERSION,
    CACHE_NAMESPACE_LABEL,
    DIGEST_LABEL,
    NODE_LABEL,
)
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
KWOK_NODE = "gkm-gpu-worker-1"
CACHE_SPEC = kcache_images.CacheSpec(backend="hip", seed=41)


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "tenant/limits", "v1", CACHE_SPEC)


@pytest.fixture(scope="module")
def declared_bytes():
    return int(kcache_images.cache_entries(CACHE_SPEC)[1]["cache.triton.image/cache-size-bytes"])


@pytest.fixture
def cache(kube, tenant, image):
    """The tenant's GKMCache; afterwards its hostPath PVs, cluster-scoped, which the namespace's deletion leaves."""
    tenant.kube.request("POST", tenant.gkmcaches_path(), body={
        "apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": "big"},
        "spec": {"image": image.ref, "podTemplate": {"spec": {"tolerations": [GPU_TOLERATION]}}}})
    yield "big"
    admin = Kube(kube)
    for pv in admin.list("PersistentVolume", label_selector="gkm.io/cache=big"):
        if (pv["spec"].get("claimRef") or {}).get("namespace") == tenant.namespace:
            admin.delete("PersistentVolume", pv["metadata"]["name"])


def reconcile(sim, tenant, name, extract_limits):
    return run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=tenant.namespace,
                      registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK,
                      extract_limits=extract_limits, wait=False)


def listed(tenant, path):
    return tenant.kube.request("GET", path % tenant.namespace)[1]["items"]


def test_an_image_declared_over_the_admin_s_max_bytes_is_refused_before_anything_is_written(
        sim, crds, tenant, cache, image, declared_bytes):
    result = reconcile(sim, tenant, cache, {"max_bytes": declared_bytes - 1})
    assert result.get("failed"), result.get("status", {}).get("phase")
    status = tenant.kube.request("GET", tenant.gkmcaches_path(cache))[1]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert status["phase"] == "Error" and ready["reason"] == "InvalidSpec", status
    assert "declares %d bytes" % declared_bytes in ready["message"], ready["message"]
    assert "extract_limits.max_bytes" in ready["message"], ready["message"]
    assert "caches_extract_limits" in ready["message"], ready["message"]
    for path in ("/api/v1/namespaces/%s/persistentvolumeclaims", "/apis/batch/v1/namespaces/%s/jobs"):
        assert listed(tenant, path) == []


def test_under_the_limits_the_extraction_jobs_carry_them(sim, kube, crds, tenant, cache, image, declared_bytes):
    result = reconcile(sim, tenant, cache, {"max_bytes": declared_bytes, "max_files": 500})
    assert not result.get("failed"), result.get("msg")
    # The Jobs run in the system namespace (system_namespace_jobs), where the tenant may read nothing: as the admin.
    assert listed(tenant, "/apis/batch/v1/namespaces/%s/jobs") == []
    jobs = client.BatchV1Api(kube).list_namespaced_job("gkm-system", label_selector="gkm.io/cache=%s,%s=%s" % (
        cache, CACHE_NAMESPACE_LABEL, tenant.namespace)).items
    assert jobs, result.get("plan", {}).get("summary")
    for job in jobs:
        extractor = job.spec.template.spec.containers[0]
        argv = (extractor.command or []) + (extractor.args or [])
        assert argv[argv.index("--max-bytes") + 1] == str(declared_bytes), argv
        assert argv[argv.index("--max-files") + 1] == "500" and "--max-expansion-ratio" not in argv, argv


@pytest.fixture(scope="module")
def newer_images(registry):
    """Two more digests of the tenant's cache."""
    return [kcache_images.build_image(registry.host, "tenant/limits", tag,
                                      kcache_images.CacheSpec(backend="hip", seed=seed))
            for tag, seed in (("v2", 42), ("v3", 43))]


def node_pvcs(tenant, digest):
    """{node: PVC name} of the tenant's per-node PVCs at a digest."""
    return {pvc["metadata"]["labels"][NODE_LABEL]: pvc["metadata"]["name"]
            for pvc in listed(tenant, "/api/v1/namespaces/%s/persistentvolumeclaims")
            if pvc["metadata"]["labels"].get(NODE_LABEL)
            and pvc["metadata"]["labels"][DIGEST_LABEL] == short_digest(digest)}


def hold(tenant, claim, node):
    """The tenant's pod on the node reading the PVC (Pod Security restricted); it counts as the digest's user."""
    name = "holds-" + claim[-10:]
    tenant.kube.request("POST", "/api/v1/namespaces/%s/pods" % tenant.namespace, body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"nodeName": node, "tolerations": [GPU_TOLERATION],
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "app", "image": "app:1", "securityContext": {
                     "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                     "volumeMounts": [{"name": "k", "mountPath": "/cache", "readOnly": True}]}],
                 "volumes": [{"name": "k", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}]}})
    return "%s/%s" % (tenant.namespace, name)


def test_a_node_whose_pods_hold_max_digests_minus_one_previous_digests_gets_no_new_one(
        sim, crds, tenant, cache, image, newer_images):
    limits = {"max_digests": 2}
    held = []
    # On one kwok node: nothing is pruned under the pods, so no scrub runs and the test stays short.
    tenant.kube.request("PATCH", tenant.gkmcaches_path(cache), None, {"spec": {"podTemplate": {"spec": {
        "nodeSelector": {"kubernetes.io/hostname": KWOK_NODE}}}}}, "application/merge-patch+json")
    for image_now, image_next in ((image, newer_images[0]), (newer_images[0], newer_images[1])):
        result = reconcile(sim, tenant, cache, limits)
        assert not result.get("failed"), result.get("msg")
        pvcs = node_pvcs(tenant, image_now.digest)
        node = sorted(pvcs)[0]
        held.append(hold(tenant, pvcs[node], node))
        tenant.kube.request("PATCH", tenant.gkmcaches_path(cache), None, {"spec": {"image": image_next.ref}},
                            "application/merge-patch+json")
    result = reconcile(sim, tenant, cache, limits)
    assert not result.get("failed"), result.get("msg")
    assert node == KWOK_NODE and node_pvcs(tenant, newer_images[1].digest) == {}
    # Nothing deleted under the pods: both previous digests are still on the node.
    assert node in node_pvcs(tenant, image.digest) and node in node_pvcs(tenant, newer_images[0].digest)
    status = tenant.kube.request("GET", tenant.gkmcaches_path(cache))[1]["status"]
    [problem] = [p for p in status["problems"] if p["reason"] == "DigestLimit"]
    assert problem["node"] == node and problem["phase"] == "Pending", problem
    assert "extract_limits.max_digests is 2" in problem["message"], problem["message"]
    assert all(pod in problem["message"] for pod in held), (held, problem["message"])
