"""The admin's registry credentials and signature key stay out of a tenant's namespace (docs/security.md, classes 3
and 4): a tenant with edit reads every Secret of its namespace and may overwrite one before a Job's pod mounts it,
so neither the Jobs' Docker config nor their `cosign.pub` may be there, nor a Job of ours that mounts them. The
tenant creates its GKMCache and reads its namespace through its own token (kwok nodes: the Jobs need not run);
the reconcile runs as the collection runs it, with the admin's credentials and key."""

import uuid

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import cache_selector
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    API_VERSION,
    MANAGED_BY_LABEL,
    MANAGER,
    STORE_LABEL,
    SYSTEM_NAMESPACE,
)
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.integration.tenants.test_tenant_rbac import refusal

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def keys():
    return kcache_images.key_pair()


@pytest.fixture(scope="module")
def signed_image(registry, keys):
    image = kcache_images.build_image(registry.host, "tenant-secrets/%s" % uuid.uuid4().hex[:6], "v1",
                                      kcache_images.CacheSpec(backend="hip", seed=51))
    kcache_images.sign_cosign_v3(image, keys[0])
    return image


@pytest.fixture
def cache(kube, tenant, signed_image):
    """The tenant's GKMCache; afterwards every object of it the namespace's deletion leaves (its hostPath PVs, and
    whatever it has in other namespaces)."""
    tenant.kube.request("POST", tenant.gkmcaches_path(), body={
        "apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": "private"},
        "spec": {"image": signed_image.ref, "podTemplate": {"spec": {"tolerations": [GPU_TOLERATION]}}}})
    yield "private"
    admin = Kube(kube)
    for kind in ("Job", "Secret", "PersistentVolumeClaim", "PersistentVolume"):
        for obj in admin.list(kind, label_selector=cache_selector("private", tenant.namespace)):
            admin.delete(kind, obj["metadata"]["name"], obj["metadata"].get("namespace"))


def test_no_registry_credentials_signature_key_or_job_of_ours_in_the_tenant_s_namespace(
        sim, kube, crds, tenant, cache, keys):
    result = run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=cache, namespace=tenant.namespace,
                        registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK,
                        registry_username="admin", registry_password="admins-secret", registry_host=sim.registry,
                        signature_public_key=keys[1], signature_required=True, system_namespace_jobs=True,
                        wait=False)
    assert not result.get("failed"), result.get("msg")
    created = result["plan"]["summary"].get("create") or {}
    assert created.get("Job") and created.get("Secret"), result["plan"]["summary"]
    secrets = tenant.kube.request("GET", "/api/v1/namespaces/%s/secrets" % tenant.namespace)[1]["items"]
    holding = [(s["metadata"]["name"], sorted(set(s.get("data") or {}) & {"config.json", "cosign.pub"}))
               for s in secrets]
    assert [held for held in holding if held[1]] == []
    ours = tenant.kube.request("GET", "/apis/batch/v1/namespaces/%s/jobs" % tenant.namespace,
                               query=[("labelSelector", "%s=%s" % (MANAGED_BY_LABEL, MANAGER))])[1]["items"]
    assert [job["metadata"]["name"] for job in ours] == []
    # Where they are: the system namespace, which the tenant cannot read.
    admin = Kube(kube)
    selector = cache_selector(cache, tenant.namespace)
    moved = {kind: admin.list(kind, namespace=SYSTEM_NAMESPACE, label_selector=selector) for kind in ("Job", "Secret")}
    # One Job per node fills the node's store, which the tenant's slots point at.
    assert len(moved["Job"]) == created["Job"] and {
        job["metadata"]["labels"][STORE_LABEL] for job in moved["Job"]} == {"true"}
    assert [sorted(secret["data"]) for secret in moved["Secret"]] == [["config.json", "cosign.pub"]]
    assert refusal(tenant.kube, "GET", "/api/v1/namespaces/%s/secrets" % SYSTEM_NAMESPACE) == 403


def test_pod_labels_are_refused_when_the_jobs_would_run_in_the_system_namespace(sim, kube, crds, tenant, signed_image):
    """A label on a pod there could match the webhook's Service, PodDisruptionBudget or NetworkPolicy, or the
    admin's: the tenant's labelled GKMCache is refused with the field named, nothing written."""
    tenant.kube.request("POST", tenant.gkmcaches_path(), body={
        "apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": "labelled"},
        "spec": {"image": signed_image.ref, "podTemplate": {
            "metadata": {"labels": {"app.kubernetes.io/name": "gkm-webhook"}},
            "spec": {"tolerations": [GPU_TOLERATION]}}}})
    result = run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name="labelled",
                        namespace=tenant.namespace, registry_plain_http=True, extract_image="gkm-cluster-tools:test",
                        host_path_root=NODE_DISK, system_namespace_jobs=True, wait=False)
    assert result.get("failed"), result.get("plan")
    status = tenant.kube.request("GET", tenant.gkmcaches_path("labelled"))[1]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert status["phase"] == "Error" and ready["reason"] == "InvalidSpec", status
    assert ready["message"].startswith("spec.podTemplate.metadata.labels is refused"), ready["message"]
    assert Kube(kube).list("Job", namespace=SYSTEM_NAMESPACE, label_selector=cache_selector(
        "labelled", tenant.namespace)) == []
