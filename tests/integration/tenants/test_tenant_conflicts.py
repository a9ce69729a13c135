"""Ownership over labels (docs/security.md, class 7): a tenant labels its own PVC as a cache's, naming a cache no
removal can take; the caches role reports it, leaves it alone, and reconciles the caches it was declared. The
tenant writes through its own token; the role runs as the admin runs it."""

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND_LABEL,
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
)
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.roles import caches_role_vars, pinned_gkmcache, run_role

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "tenant/conflicts", "v1", kcache_images.CacheSpec(backend="hip"))


def test_a_tenants_pvc_labelled_as_a_cache_is_reported_and_does_not_stop_the_caches_role(
        sim, kube, crds, namespace, tenant, image, tmp_path):
    forged = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "forged", "labels": {
        MANAGED_BY_LABEL: MANAGER, CACHE_KIND_LABEL: "GKMCache", CACHE_LABEL: "Not_A_Name",
        CACHE_NAMESPACE_LABEL: tenant.namespace}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}
    pvcs = "/api/v1/namespaces/%s/persistentvolumeclaims" % tenant.namespace
    assert tenant.kube.request("POST", pvcs, body=forged)[0] == 201
    declared = pinned_gkmcache("conflicts-declared", namespace, image.ref)
    try:
        run = run_role("caches", tmp_path, caches_role_vars(sim, [declared]))
        assert run.ok, run.failures()
        report = run.result("Report objects labelled as a cache's")
        assert any("PersistentVolumeClaim %s/forged" % tenant.namespace in line and "Not_A_Name" in line
                   for line in report["msg"]), report
        # The tenant's PVC is left as it was; the declared cache was reconciled after it.
        assert tenant.kube.request("GET", pvcs + "/forged")[0] == 200
        assert client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(
            namespace, label_selector="%s=conflicts-declared" % CACHE_LABEL).items
    finally:
        result = run_module("cache_distribute", sim.kubeconfig, name="conflicts-declared", namespace=namespace,
                            state="absent", force=True, host_path_root=NODE_DISK,
                            extract_image="gkm-cluster-tools:test")
        assert not result.get("failed"), result


def reconcile(sim, kind, name, namespace=None):
    return run_module("cache_reconcile", sim.kubeconfig, kind=kind, name=name, namespace=namespace,
                      registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK,
                      wait=False)


def test_a_tenants_pvc_named_as_a_cluster_cache_refuses_it_in_that_namespace_only(
        sim, kube, crds, namespace, tenant, image):
    name = "squatted-%s" % tenant.namespace[-5:]
    squat = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}
    assert tenant.kube.request("POST", "/api/v1/namespaces/%s/persistentvolumeclaims" % tenant.namespace,
                               body=squat)[0] == 201
    cluster_cache(crds, name, image, [tenant.namespace, namespace])
    try:
        core = served_in(sim, kube, name, namespace)
        # Nothing of the cache in the tenant's namespace; the tenant's PVC as it was.
        assert not core.list_namespaced_persistent_volume_claim(
            tenant.namespace, label_selector="%s=%s" % (CACHE_LABEL, name)).items
        assert not core.read_namespaced_persistent_volume_claim(name, tenant.namespace).metadata.labels
        # The status names the refused namespace and the PVC.
        status = crds.get_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", name)["status"]
        problems = [p for p in status.get("problems") or () if p.get("namespace") == tenant.namespace]
        assert problems and problems[0]["reason"] == "Conflict", status
        assert "PVC %s/%s" % (tenant.namespace, name) in problems[0]["message"], problems
    finally:
        crds.delete_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", name)
        result = run_module("cache_distribute", sim.kubeconfig, name=name, scope="cluster",
                            workload_namespaces=[tenant.namespace, namespace], state="absent", force=True,
                            host_path_root=NODE_DISK, extract_image="gkm-cluster-tools:test")
        assert not result.get("failed"), result


def cluster_cache(crds, name, image, namespaces):
    cache = pinned_gkmcache(name, None, image.ref)
    cache["kind"] = "ClusterGKMCache"
    cache["metadata"] = {"name": name}
    cache["spec"]["workloadNamespaces"] = namespaces
    return crds.create_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", cache)


def served_in(sim, kube, name, namespace):
    """Reconcile the ClusterGKMCache; it must be served in the admin's workload namespace (its node slot PVC and its
    serving PVC). The CoreV1Api, for what the test checks next."""
    result = reconcile(sim, "ClusterGKMCache", name)
    assert not result.get("failed"), result.get("msg")
    core = client.CoreV1Api(kube)
    served = core.list_namespaced_persistent_volume_claim(namespace, label_selector="%s=%s" % (CACHE_LABEL, name))
    assert len(served.items) == 2, [pvc.metadata.name for pvc in served.items]
    return core


def remove_cluster_cache(sim, crds, name, namespaces):
    crds.delete_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", name)
    result = run_module("cache_distribute", sim.kubeconfig, name=name, scope="cluster", workload_namespaces=namespaces,
                        state="absent", force=True, host_path_root=NODE_DISK, extract_image="gkm-cluster-tools:test")
    assert not result.get("failed"), result


def owners(pvc):
    return {(ref.kind, ref.uid) for ref in pvc.metadata.owner_references or []}


def test_a_cluster_cache_outranks_a_tenants_earlier_gkmcache_of_its_name(sim, kube, crds, namespace, tenant, image):
    name = "outranked-%s" % tenant.namespace[-5:]
    mine = pinned_gkmcache(name, tenant.namespace, image.ref)
    assert tenant.kube.request("POST", tenant.gkmcaches_path(), body=mine)[0] == 201
    # Its operator's run came first: the tenant's serving PVC is there before the admin's cache exists.
    assert not reconcile(sim, "GKMCache", name, tenant.namespace).get("failed")
    namespaces = [tenant.namespace, namespace]
    created = cluster_cache(crds, name, image, namespaces)
    cluster_owner = {("ClusterGKMCache", created["metadata"]["uid"])}
    core = client.CoreV1Api(kube)
    try:
        result = reconcile(sim, "ClusterGKMCache", name)
        assert not result.get("failed"), result.get("msg")
        assert owners(core.read_namespaced_persistent_volume_claim(name, namespace)) == cluster_owner
        # The tenant's PVC is not overwritten under its pods: that namespace waits, named in the status.
        status = crds.get_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", name)["status"]
        problems = [p for p in status.get("problems") or () if p.get("namespace") == tenant.namespace]
        assert problems and "delete GKMCache %s/%s" % (tenant.namespace, name) in problems[0]["message"], status
        # The tenant's GKMCache is the one refused, naming the cluster cache.
        assert reconcile(sim, "GKMCache", name, tenant.namespace).get("failed")
        status = tenant.kube.request("GET", tenant.gkmcaches_path(name))[1]["status"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "Conflict" and "ClusterGKMCache %s" % name in ready["message"], ready
        # Once the tenant deleted it (its removal run as the operator's finalizer runs it), the next run serves there.
        assert tenant.kube.request("DELETE", tenant.gkmcaches_path(name))[0] == 200
        removed = run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=tenant.namespace,
                             state="absent", force=True, host_path_root=NODE_DISK,
                             extract_image="gkm-cluster-tools:test")
        assert not removed.get("failed"), removed.get("msg")
        assert Kube(kube).wait_gone([("PersistentVolumeClaim", tenant.namespace, name)], 30) == []
        assert not reconcile(sim, "ClusterGKMCache", name).get("failed")
        assert owners(core.read_namespaced_persistent_volume_claim(name, tenant.namespace)) == cluster_owner
    finally:
        remove_cluster_cache(sim, crds, name, namespaces)


def test_a_tenants_pvc_labelled_as_the_cluster_caches_own_is_not_taken_for_it(
        sim, kube, crds, namespace, tenant, image):
    name = "forged-%s" % tenant.namespace[-5:]
    # The labels the cluster cache's own serving PVC carries: only its owner reference (a uid the tenant cannot
    # read) tells them apart.
    forged = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "labels": {
        MANAGED_BY_LABEL: MANAGER, CACHE_KIND_LABEL: "ClusterGKMCache", CACHE_LABEL: name}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}}}
    assert tenant.kube.request("POST", "/api/v1/namespaces/%s/persistentvolumeclaims" % tenant.namespace,
                               body=forged)[0] == 201
    namespaces = [tenant.namespace, namespace]
    cluster_cache(crds, name, image, namespaces)
    try:
        core = served_in(sim, kube, name, namespace)
        # The tenant's PVC is left as the tenant made it, and its namespace is refused, naming it.
        pvc = core.read_namespaced_persistent_volume_claim(name, tenant.namespace)
        assert not owners(pvc) and not pvc.spec.volume_name, pvc
        status = crds.get_cluster_custom_object("gkm.io", "v1alpha1", "clustergkmcaches", name)["status"]
        problems = [p for p in status.get("problems") or () if p.get("namespace") == tenant.namespace]
        assert problems and problems[0]["reason"] == "Conflict", status
        assert "PVC %s/%s" % (tenant.namespace, name) in problems[0]["message"], problems
    finally:
        remove_cluster_cache(sim, crds, name, namespaces)
