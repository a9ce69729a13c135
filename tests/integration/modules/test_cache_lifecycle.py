"""Caches that end leave nothing, and two caches never own one object: the caches role and cache_reconcile against
the real API server (kwok nodes; the garbage collector of the simulated control plane)."""

import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.roles import caches_role_vars as role_vars
from tests.helpers.roles import pinned_gkmcache as gkmcache
from tests.helpers.roles import pinned_template, run_role
from tests.helpers.webhook import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GROUP, VERSION = "gkm.io", "v1alpha1"
OURS = "app.kubernetes.io/managed-by=gkm.cluster"


@pytest.fixture(scope="module")
def image(registry):
    spec = kcache_images.CacheSpec(backend="hip", compiled=True)
    return kcache_images.build_image(registry.host, "lifecycle/vector-add", "v1", spec)


def ours(kube, cache):
    """Every object labelled as the collection's for `cache` (any namespace): kind -> sorted names, each namespaced
    one as namespace/name."""
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    selector = "%s,gkm.io/cache=%s" % (OURS, cache)
    listings = {
        "PersistentVolumeClaim": core.list_persistent_volume_claim_for_all_namespaces(label_selector=selector).items,
        "PersistentVolume": core.list_persistent_volume(label_selector=selector).items,
        "Job": batch.list_job_for_all_namespaces(label_selector=selector).items,
        "Secret": core.list_secret_for_all_namespaces(label_selector=selector).items,
    }
    return {kind: sorted("/".join(filter(None, (item.metadata.namespace, item.metadata.name))) for item in items)
            for kind, items in listings.items() if items}


def test_deleted_and_undeclared_caches_leave_nothing_and_kubectl_caches_stay(
        sim, kube, crds, namespace, image, tmp_path):
    suffix = uuid.uuid4().hex[:5]
    deleted, kept, declared = ("life-del-%s" % suffix, "life-kept-%s" % suffix, "life-decl-%s" % suffix)
    for name in (deleted, kept):
        crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches",
                                             gkmcache(name, namespace, image.ref))
    declared_cache = gkmcache(declared, namespace, image.ref)
    try:
        run = run_role("caches", tmp_path, role_vars(sim, [declared_cache]))
        assert run.ok, run.failures()
        for name in (deleted, kept, declared):
            assert set(ours(kube, name)) == {"PersistentVolumeClaim", "PersistentVolume", "Job"}, (name, ours(
                kube, name))
        live = crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", declared)
        assert live["metadata"]["labels"]["gkm.io/declared-by"] == "inventory"
        assert "labels" not in crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches",
                                                                 kept)["metadata"]
        pvc = client.CoreV1Api(kube).list_namespaced_persistent_volume_claim(
            namespace, label_selector="gkm.io/cache=%s" % deleted).items[0]
        owner = crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", deleted)["metadata"]["uid"]
        assert [(ref.kind, ref.name, ref.uid) for ref in pvc.metadata.owner_references] == [
            ("GKMCache", deleted, owner)]
        pv = client.CoreV1Api(kube).list_persistent_volume(label_selector="gkm.io/cache=%s" % deleted).items[0]
        assert not pv.metadata.owner_references and pv.metadata.labels["gkm.io/cache-kind"] == "GKMCache"

        # The opt-out keeps an undeclared cache.
        run = run_role("caches", tmp_path, role_vars(sim, [], caches_remove_undeclared=False))
        assert run.ok, run.failures()
        assert ours(kube, declared)

        crds.delete_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", deleted)
        # The garbage collector takes what the resource owns, in its namespace; the PVs, and the Job filling the
        # node's store with the PVC it writes through in the system namespace, which it cannot own, wait for the next
        # run.

        def only_what_it_cannot_own_left():
            found = ours(kube, deleted)
            claims_and_jobs = found.get("PersistentVolumeClaim", []) + found.get("Job", [])
            return found if namespace not in {name.split("/")[0] for name in claims_and_jobs} else None

        left = wait_until("the garbage collector to remove the PVCs of %s" % deleted, only_what_it_cannot_own_left,
                          timeout=60)
        assert {name.split("/")[0] for name in left["PersistentVolumeClaim"] + left["Job"]} == {"gkm-system"}, left
        # The node's slot PV, the serving PV (docs/modes/serving-pvc.md) and the PV the Job writes the store through.
        assert len(left["PersistentVolume"]) == 3, left
        run = run_role("caches", tmp_path, role_vars(sim, []))
        assert run.ok, run.failures()
        wait_until("the objects of %s and %s gone" % (deleted, declared),
                   lambda: not ours(kube, deleted) and not ours(kube, declared), timeout=60)
        with pytest.raises(client.ApiException) as gone:
            crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", declared)
        assert gone.value.status == 404
        # Created with kubectl, never declared: kept (its Job goes once a run has marked its slot extracted).
        assert {"PersistentVolumeClaim", "PersistentVolume"} <= set(ours(kube, kept))
        assert crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", kept)
    finally:
        for name in (deleted, kept, declared):
            result = run_module("cache_distribute", sim.kubeconfig, name=name, namespace=namespace, state="absent",
                                force=True, host_path_root=NODE_DISK, extract_image="gkm-cluster-tools:test")
            assert not result.get("failed"), result


def reconcile(sim, kind, name, namespace=None, **args):
    return run_module("cache_reconcile", sim.kubeconfig, kind=kind, name=name, namespace=namespace,
                      registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK,
                      wait=False, **args)


def test_the_second_of_two_caches_wanting_one_pvc_is_refused_and_the_first_is_unaffected(sim, kube, crds, namespace,
                                                                                         image):
    name = "life-rox-%s" % uuid.uuid4().hex[:5]
    cluster_cache = {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "ClusterGKMCache", "metadata": {"name": name},
                     "spec": {"image": image.ref, "accessModes": ["ReadOnlyMany"], "workloadNamespaces": [namespace],
                              "podTemplate": pinned_template()}}
    # ReadOnlyMany on the hostPath PVs of a cluster without a provisioner: allowed explicitly (host_path_read_only_many)
    # for what is checked here, which PVC each cache owns. The cluster cache outranks the GKMCache: it keeps the PVC
    # whatever order the resources were created and the reconciles run in.
    crds.create_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", cluster_cache)
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches",
                                         gkmcache(name, namespace, image.ref, ["ReadOnlyMany"]))
    try:
        second = reconcile(sim, "GKMCache", name, namespace, host_path_read_only_many=True)
        assert second.get("failed")
        assert "PVC %s/%s is wanted by GKMCache %s/%s and by ClusterGKMCache %s, which comes first" % (
            namespace, name, namespace, name, name) in second["msg"], second["msg"]
        assert "GKMCache %s/%s is refused until then" % (namespace, name) in second["msg"]
        assert ours(kube, name) == {}, "the refused cache wrote nothing"
        status = crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name)["status"]
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (status["phase"], ready["status"], ready["reason"]) == ("Error", "False", "Conflict"), status
        assert "a ClusterGKMCache outranks" in ready["message"]

        first = reconcile(sim, "ClusterGKMCache", name, host_path_read_only_many=True)
        assert not first.get("failed"), first.get("msg")
        pvc = client.CoreV1Api(kube).read_namespaced_persistent_volume_claim(name, namespace)
        assert pvc.metadata.labels["gkm.io/cache-kind"] == "ClusterGKMCache"
        assert pvc.metadata.labels["gkm.io/cache-namespace"] == ""

        again = reconcile(sim, "GKMCache", name, namespace, host_path_read_only_many=True)
        assert again.get("failed") and "a ClusterGKMCache outranks" in again["msg"], again
        after = client.CoreV1Api(kube).read_namespaced_persistent_volume_claim(name, namespace)
        assert after.metadata.uid == pvc.metadata.uid and after.metadata.deletion_timestamp is None
        assert after.metadata.labels == pvc.metadata.labels
    finally:
        crds.delete_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", name)
        result = run_module("cache_distribute", sim.kubeconfig, name=name, scope="cluster", state="absent",
                            force=True, host_path_root=NODE_DISK, extract_image="gkm-cluster-tools:test")
        assert not result.get("failed"), result
