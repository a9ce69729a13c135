"""The scrub of a tenant's cache, which mounts the node's whole cache root (docs/security.md, class 2 and 9).

The tenant creates its GKMCache and its PVCs through its own token; the reconcile runs as the collection runs it
(cache_reconcile, state absent for the removal the operator's finalizer runs). On kwok nodes the scrub Job's pod
runs nothing: what matters here is where its objects live, what they bind, and that the removal completes.
"""

import threading
import time

import pytest
from kubernetes import client, watch
from urllib3.exceptions import ProtocolError

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import stable_hash
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scrub import slot_location
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.tenant import POD_SECURITY_LABEL

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
WORKER = "gkm-gpu-worker-1"
SCRUB_SELECTOR = "gkm.io/scrub=true"
# Where the collection runs its own objects when nothing else is said (the gkm role's gkm_namespace).
SYSTEM_NAMESPACE = "gkm-system"


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "tenant/scrub", "v1", kcache_images.CacheSpec(backend="hip"))


def reconcile(sim, tenant, name, state="present"):
    # As uid 1000 (set_volume_owner never) the extractor is restricted-compliant: the namespace stays restricted.
    return run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=tenant.namespace,
                      state=state, registry_plain_http=True, extract_image="gkm-cluster-tools:test",
                      host_path_root=NODE_DISK, set_volume_owner="never", wait=False, wait_timeout=60)


def create_cache(sim, kube, tenant, image, name):
    terms = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [WORKER]}]}]
    tenant.kube.request("POST", tenant.gkmcaches_path(), body={
        "apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": name},
        "spec": {"image": image.ref, "podTemplate": {"spec": {"tolerations": [GPU_TOLERATION], "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}}}})
    created = reconcile(sim, tenant, name)
    assert not created.get("failed"), created.get("msg")
    pvs = [pv for pv in Kube(kube).list("PersistentVolume", label_selector="gkm.io/cache=%s,gkm.io/node" % name)
           if pv["spec"]["claimRef"]["namespace"] == tenant.namespace]
    assert len(pvs) == 1, pvs
    return pvs[0]


def delete_cache(sim, tenant, name):
    tenant.kube.request("DELETE", tenant.gkmcaches_path(name))
    started = time.monotonic()
    removed = reconcile(sim, tenant, name, state="absent")
    return removed, time.monotonic() - started


def scrub_objects(kube, *namespaces):
    """The scrub's PVs, and its PVCs and Jobs in the namespaces given, as (kind, namespace, name)."""
    admin = Kube(kube)
    found = [("PersistentVolume", "", pv["metadata"]["name"])
             for pv in admin.list("PersistentVolume", label_selector=SCRUB_SELECTOR)]
    for namespace in namespaces:
        for kind in ("PersistentVolumeClaim", "Job"):
            found += [(kind, namespace, obj["metadata"]["name"])
                      for obj in admin.list(kind, namespace=namespace, label_selector=SCRUB_SELECTOR)]
    return found


class ClaimPhases:
    """The phases and volumes one PVC of the tenant goes through, watched with the tenant's own token."""

    def __init__(self, tenant, name):
        self.seen = []
        self._core = client.CoreV1Api(tenant.api)
        self._tenant, self._name = tenant, name
        self._stream = watch.Watch()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        try:
            for event in self._stream.stream(self._core.list_namespaced_persistent_volume_claim,
                                             self._tenant.namespace, field_selector="metadata.name=%s" % self._name,
                                             timeout_seconds=120):
                claim = event["object"]
                self.seen.append((event["type"], claim.status.phase, claim.spec.volume_name))
        except ProtocolError:
            pass  # stop() closed the stream under the read

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stream.stop()
        self._thread.join(timeout=10)


def test_a_pvc_the_tenant_names_as_the_scrub_gets_nothing(sim, crds, kube, tenant, image):
    name = "squat"
    # Baseline, so that the scrub's pod could run here as it did before: what the squat gets is the question.
    Kube(kube).request("PATCH", "/api/v1/namespaces/%s" % tenant.namespace, body={"metadata": {"labels": {
        POD_SECURITY_LABEL: "baseline"}}}, content_type="application/merge-patch+json")
    slot_pv = create_cache(sim, kube, tenant, image, name)
    # Every input of the name is the tenant's to know: the node its pod ran on, the default root, its own slot's
    # path (its cache's namespace, name and digest, the digest in the cache's status).
    root, path = slot_location(slot_pv)
    predicted = "gkm-scrub-" + stable_hash(WORKER, root, path)
    claims = client.CoreV1Api(tenant.api)
    claims.create_namespaced_persistent_volume_claim(tenant.namespace, {
        "metadata": {"name": predicted},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Mi"}}}})
    with ClaimPhases(tenant, predicted) as phases:
        removed, _seconds = delete_cache(sim, tenant, name)
        time.sleep(1)  # the watch's last events
    assert not removed.get("failed"), removed.get("msg")
    assert [entry["result"] for entry in removed["scrub"]["nodes"]] == ["removed"], removed["scrub"]
    scrub_namespace, scrub_name = removed["scrub"]["nodes"][0]["job"].split("/")
    assert scrub_namespace == SYSTEM_NAMESPACE and scrub_name != predicted
    # The tenant's claim never bound a volume and is still its own, Pending.
    assert all(volume is None for _type, _phase, volume in phases.seen), phases.seen
    claim = claims.read_namespaced_persistent_volume_claim(predicted, tenant.namespace)
    assert claim.status.phase == "Pending" and not claim.spec.volume_name
    assert scrub_objects(kube, tenant.namespace, SYSTEM_NAMESPACE) == []


def test_deletion_completes_in_a_restricted_namespace_with_a_quota_of_no_jobs(sim, crds, kube, tenant, image):
    name = "capped"
    slot_pv = create_cache(sim, kube, tenant, image, name)
    Kube(kube).request("POST", "/api/v1/namespaces/%s/resourcequotas" % tenant.namespace, body={
        "apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-jobs"},
        "spec": {"hard": {"count/jobs.batch": "0"}}})
    removed, seconds = delete_cache(sim, tenant, name)
    assert not removed.get("failed"), removed.get("msg")
    assert [entry["result"] for entry in removed["scrub"]["nodes"]] == ["removed"], removed["scrub"]
    assert seconds < 30, seconds
    assert Kube(kube).wait_gone([("PersistentVolume", "", slot_pv["metadata"]["name"])], 30) == []
    # Nothing of the scrub is left, in the tenant's namespace or the system's.
    assert scrub_objects(kube, tenant.namespace, SYSTEM_NAMESPACE) == []
