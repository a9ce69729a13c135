"""A tenant's ReadOnlyMany GKMCache on a cluster without a provisioner: the collection would make hostPath PVs,
which hold the cache on the one node that extracts it while pods on every other node mount an empty directory. It
is refused with the field and the fix (docs/security.md, class 13). The tenant writes and reads the cache through
its own token; the reconcile runs as the collection runs it."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "tenant/rox", "v1", kcache_images.CacheSpec(backend="hip"))


def reconcile(sim, tenant, name):
    return run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=tenant.namespace,
                      registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK,
                      wait=False)


def test_read_only_many_on_host_path_pvs_is_refused_with_the_field_and_the_fix(sim, crds, kube, tenant, image):
    tenant.kube.request("POST", tenant.gkmcaches_path(), body={
        "apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": "shared"},
        "spec": {"image": image.ref, "accessModes": ["ReadOnlyMany"],
                 "podTemplate": {"spec": {"tolerations": [GPU_TOLERATION]}}}})
    try:
        result = reconcile(sim, tenant, "shared")
    finally:
        # A hostPath PV, if one was made, is cluster-scoped: the namespace's deletion would leave it.
        admin = Kube(kube)
        for pv in admin.list("PersistentVolume", label_selector="gkm.io/cache=shared"):
            if (pv["spec"].get("claimRef") or {}).get("namespace") == tenant.namespace:
                admin.delete("PersistentVolume", pv["metadata"]["name"])
    assert result.get("failed"), (result.get("plan", {}).get("summary"), result.get("status", {}).get("phase"))
    status = tenant.kube.request("GET", tenant.gkmcaches_path("shared"))[1]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert status["phase"] == "Error" and ready["reason"] == "InvalidSpec", status
    assert "spec.accessModes" in ready["message"] and "ReadWriteOnce" in ready["message"], ready["message"]
    # Nothing was written for it: no PVC, PV or Job in the tenant's namespace.
    for path in ("/api/v1/namespaces/%s/persistentvolumeclaims", "/apis/batch/v1/namespaces/%s/jobs"):
        assert tenant.kube.request("GET", path % tenant.namespace)[1]["items"] == []
