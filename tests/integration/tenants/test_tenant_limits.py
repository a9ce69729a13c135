"""What one cache may cost a node is the admin's (docs/security.md, class 10): `extract_limits` (the caches role's
`caches_extract_limits`). A tenant's GKMCache whose image declares more bytes than the limit is refused before
anything is written; under the limits, its extraction Jobs carry them, so an image that declares less than it holds
stops there. The tenant writes and reads its cache through its own token; the reconcile runs as the collection
runs it."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
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


def test_under_the_limits_the_extraction_jobs_carry_them(sim, crds, tenant, cache, image, declared_bytes):
    result = reconcile(sim, tenant, cache, {"max_bytes": declared_bytes, "max_files": 500})
    assert not result.get("failed"), result.get("msg")
    jobs = listed(tenant, "/apis/batch/v1/namespaces/%s/jobs")
    assert jobs, result.get("plan", {}).get("summary")
    for job in jobs:
        extractor = job["spec"]["template"]["spec"]["containers"][0]
        argv = extractor.get("command", []) + extractor.get("args", [])
        assert argv[argv.index("--max-bytes") + 1] == str(declared_bytes), argv
        assert argv[argv.index("--max-files") + 1] == "500" and "--max-expansion-ratio" not in argv, argv
