"""cache_reconcile against the real cluster: a declared definition is planned before it is applied."""

import time
import uuid

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_FINALIZER
from tests.helpers import job_pod_stages as stages
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, AuditWrites, run_module
from tests.helpers.roles import run_role
from tests.helpers.webhook import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GROUP, VERSION = "gkm.io", "v1alpha1"
NODE = "gkm-gpu-worker-1"


@pytest.fixture(scope="module")
def images(registry):
    spec = kcache_images.CacheSpec(backend="hip", compiled=True)
    return (kcache_images.build_image(registry.host, "reconcile/vector-add", "v1", spec),
            kcache_images.build_image(registry.host, "reconcile/vector-add", "v2",
                                      kcache_images.CacheSpec(backend="hip", seed=3, compiled=True)))


def manifest(name, namespace, image):
    # One named node keeps the plan small: other sessions may add hundreds of nodes to the shared cluster.
    template = {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchFields": [
                                 {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}}}
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": image, "podTemplate": template}}


def reconcile(sim, name, namespace, check=False, **args):
    return run_module("cache_reconcile", sim.kubeconfig, check=check, kind="GKMCache", name=name,
                      namespace=namespace, registry_plain_http=True, extract_image="gkm-cluster-tools:test",
                      host_path_root=NODE_DISK, wait=False, **args)


def test_check_mode_plans_the_declared_image_and_writes_nothing(sim, crds, namespace, images):
    v1, v2 = images
    name = "rec-%s" % uuid.uuid4().hex[:5]
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", manifest(name, namespace, v1.ref))
    first = reconcile(sim, name, namespace)
    assert first["changed"] and not first.get("failed"), first.get("msg")
    assert first["cache"]["digest"] == v1.digest

    audit = AuditWrites()
    planned = reconcile(sim, name, namespace, check=True, definition=manifest(name, namespace, v2.ref))
    assert not planned.get("failed"), planned.get("msg")
    assert planned["changed"]
    assert planned["cache"]["digest"] == v2.digest
    created = {(a["kind"], a["action"]) for a in planned["plan"]["actions"]}
    assert ("PersistentVolumeClaim", "create") in created and ("Job", "create") in created, planned["plan"]
    # Check mode writes nothing: every write request the API server saw was a dry run.
    writes = audit.since("/namespaces/%s/" % namespace)
    assert writes and all("dryRun=All" in write for write in writes), [w for w in writes if "dryRun" not in w]
    live = crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name)
    assert live["spec"]["image"] == v1.ref
    assert live["status"]["resolvedDigest"] == v1.digest


def test_check_mode_plans_a_cache_not_applied_yet(sim, crds, namespace, images):
    name = "rec-new-%s" % uuid.uuid4().hex[:5]
    planned = reconcile(sim, name, namespace, check=True, definition=manifest(name, namespace, images[0].ref))
    assert not planned.get("failed"), planned.get("msg")
    assert planned["changed"] and planned["resource"]["found"] is False
    assert set(planned["plan"]["summary"]["create"]) >= {"PersistentVolumeClaim", "Job"}, planned["plan"]


def test_a_definition_of_another_resource_is_refused(sim, crds, namespace, images):
    other = manifest("rec-other", namespace, images[0].ref)
    result = reconcile(sim, "rec-one", namespace, check=True, definition=other)
    assert result.get("failed")
    assert "definition is GKMCache %s/rec-other" % namespace in result["msg"]
    assert "pass the manifest of the resource being reconciled" in result["msg"]


def test_caches_role_mirrors_the_extraction_image_and_fails_at_once_when_it_cannot_be_pulled(
        sim, kube, crds, namespace, images, tmp_path):
    """The role as deploy.yml runs it: gkm_registry_mirror reaches the Jobs' image, and a tools image no node can
    pull stops the deploy with the kubelet's words instead of after caches_wait_timeout."""
    name = "rec-pull-%s" % uuid.uuid4().hex[:5]
    cache = manifest(name, namespace, images[0].ref)
    cache["spec"]["podTemplate"]["metadata"] = {"labels": {stages.PULL_FAILURE_LABEL: "true"}}
    role_vars = {"caches_kubeconfig": sim.kubeconfig, "caches_declared": [cache], "caches_registry_plain_http": True,
                 "gkm_tools_image": "quay.io/gkm-cluster/tools:0.1.0", "gkm_registry_mirror": "mirror.example.com/gkm",
                 "caches_wait_timeout": 300,
                 # The kwok stage selects the Jobs' pods by a pod template label, which the system namespace refuses:
                 # the Jobs in the cache's namespace (the layout caches_system_namespace_jobs=false keeps).
                 "caches_system_namespace_jobs": False}
    mirrored = "mirror.example.com/gkm/gkm-cluster/tools:0.1.0"
    try:
        with stages.stage(kube, stages.PULL_FAILURE):
            started = time.monotonic()
            run = run_role("caches", tmp_path, role_vars)
            elapsed = time.monotonic() - started
        assert not run.ok
        assert run.failures() == [
            "cannot pull the tools image %s on node %s: %s; build and push it (make images REGISTRY=...) or set "
            "gkm_tools_image / gkm_registry_mirror" % (mirrored, NODE, stages.PULL_MESSAGE)]
        assert elapsed < 120, elapsed
        job = client.BatchV1Api(kube).list_namespaced_job(namespace, label_selector="gkm.io/cache=%s" % name).items[0]
        assert {c.image for c in job.spec.template.spec.containers} == {mirrored}
        assert job.spec.template.spec.init_containers is None
        live = crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name)
        assert live["status"]["phase"] == "Error"
        assert live["status"]["problems"][0]["reason"] == "ToolsImageNotPullable"
        assert live["status"]["problemCnt"] == 1
    finally:
        result = run_module("cache_distribute", sim.kubeconfig, name=name, namespace=namespace, state="absent",
                            force=True)
        assert not result.get("failed"), result


def test_a_labelled_cache_nothing_verified_says_so_in_its_status_and_the_run(sim, crds, namespace, images):
    """No Kyverno here: the label asks for a signature check that nobody made, and the run and status say it."""
    name = "rec-%s" % uuid.uuid4().hex[:5]
    body = manifest(name, namespace, images[0].ref)
    body["metadata"]["labels"] = {"gkm.io/signature-format": "cosign-v2"}
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", body)
    result = reconcile(sim, name, namespace)
    assert not result.get("failed"), result.get("msg")
    assert any("nothing checked the signature of %s" % images[0].ref in warning for warning in result["warnings"])
    status = crds.get_namespaced_custom_object_status(GROUP, VERSION, namespace, "gkmcaches", name)["status"]
    condition = next(c for c in status["conditions"] if c["type"] == "SignatureVerified")
    assert (condition["status"], condition["reason"]) == ("False", "NotVerified")


def test_a_cache_being_deleted_is_removed_and_its_terminating_namespace_goes(sim, kube, crds, images):
    """Deletion is final: a GKMCache still held by the operator's finalizer (the operator gone) in a namespace being
    deleted is removed by the next run, which then takes the finalizer off, instead of being distributed into the
    terminating namespace (its per-node objects refused there: the run failed, and the namespace stayed)."""
    core = client.CoreV1Api(kube)
    namespace = "t-rec-deleting-%s" % uuid.uuid4().hex[:5]
    core.create_namespace({"metadata": {"name": namespace, "labels": {"gkm.io/test": "true"}}})
    name = "rec-del-%s" % uuid.uuid4().hex[:5]
    body = manifest(name, namespace, images[0].ref)
    body["metadata"]["finalizers"] = [CACHE_FINALIZER]
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", body)
    first = reconcile(sim, name, namespace)
    assert first["changed"] and not first.get("failed"), first.get("msg")
    core.delete_namespace(namespace)
    wait_until("the cache's deletion timestamp", lambda: crds.get_namespaced_custom_object(
        GROUP, VERSION, namespace, "gkmcaches", name)["metadata"].get("deletionTimestamp"), timeout=60)

    removed = reconcile(sim, name, namespace)
    assert not removed.get("failed"), removed.get("msg")
    assert removed["resource"]["deleting"] and removed["resource"]["finalizer_released"], removed["resource"]
    assert "create" not in removed["plan"]["summary"], removed["plan"]
    wait_until("the namespace gone", lambda: not core.list_namespace(
        field_selector="metadata.name=%s" % namespace).items, timeout=90)
    wait_until("the cache's PVs gone", lambda: not core.list_persistent_volume(
        label_selector="gkm.io/cache=%s" % name).items, timeout=60)
