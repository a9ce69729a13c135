"""Every outcome of a reconcile reaches the cache resource's status, through the real API server (kwok nodes).

Refusals become phase Error with a Ready=False condition naming the field and the fix (also after an
Extracted status: nothing stale stays); the API server validates the whole plan before the first write;
a cache that no node can hold yet is Pending, not a failed run.
"""

import subprocess
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.roles import run_role
from tests.helpers.webhook import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GROUP, VERSION = "gkm.io", "v1alpha1"
NODE = "gkm-gpu-worker-1"
GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "outcomes/vector-add", "v1",
                                     kcache_images.CacheSpec(backend="hip", compiled=True))


def one_node_template(**spec):
    """Tolerates the gpu taint and pins to one node: other sessions may add many nodes to the shared cluster."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}
    return {"spec": dict({"tolerations": [GPU_TOLERATION], "affinity": affinity}, **spec)}


def create(crds, namespace, image_ref, template=None, name=None, access_modes=None):
    name = name or "out-%s" % uuid.uuid4().hex[:5]
    spec = {"image": image_ref}
    if template is not None:
        spec["podTemplate"] = template
    if access_modes:
        spec["accessModes"] = access_modes
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
        "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    return name


def reconcile(sim, name, namespace, **args):
    args.setdefault("wait", False)
    return run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                      registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK,
                      **args)


def live_status(crds, namespace, name):
    return crds.get_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name).get("status") or {}


def ready(status):
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def printed_row(sim, namespace, name):
    """What `kubectl get gkmcache` shows: the CRD's printer columns, as the API server renders them."""
    out = subprocess.run(["kubectl", "--kubeconfig", sim.kubeconfig, "get", "gkmcache", name, "-n", namespace,
                          "-o", "wide", "--no-headers"], check=True, capture_output=True, text=True).stdout
    return out.split()


def written(kube, namespace, name):
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    selector = "gkm.io/cache=%s" % name
    claims = core.list_namespaced_persistent_volume_claim(namespace, label_selector=selector).items
    return {"pvc": [p.metadata.name for p in claims],
            "pv": [p.metadata.name for p in core.list_persistent_volume(label_selector=selector).items
                   if p.spec.claim_ref and p.spec.claim_ref.namespace == namespace],
            # In the system namespace too, where the Jobs of hostPath slots run (system_namespace_jobs).
            "job": [j.metadata.name for j in batch.list_job_for_all_namespaces(label_selector=selector).items]}


def remove(sim, namespace, name):
    result = run_module("cache_distribute", sim.kubeconfig, name=name, namespace=namespace, state="absent", force=True)
    assert not result.get("failed"), result


def test_a_failed_run_replaces_an_extracted_status_with_the_error(sim, kube, crds, namespace, image):
    name = create(crds, namespace, image.ref, one_node_template())
    try:
        first = reconcile(sim, name, namespace, wait=True, wait_timeout=120)
        assert not first.get("failed"), first.get("msg")
        assert live_status(crds, namespace, name)["phase"] == "Extracted"

        missing_tag = image.ref.rsplit(":", 1)[0] + ":no-such-tag"
        crds.patch_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name,
                                            {"spec": {"image": missing_tag}})
        refused = reconcile(sim, name, namespace)
        assert refused["failed"] and "cannot resolve its digest" in refused["msg"]
        status = live_status(crds, namespace, name)
        assert status["phase"] == "Error" and status["resolvedDigest"] == "" and status["problems"] == []
        assert (ready(status)["status"], ready(status)["reason"]) == ("False", "ImageUnresolvable")
        assert missing_tag in ready(status)["message"]
        assert {c["type"] for c in status["conditions"]} == {"Ready", "Error"}
        assert status["nodeCnt"] == 0
        # kubectl shows it: STATUS Error, zero counts, and the message in the wide output.
        row = printed_row(sim, namespace, name)
        assert row[:3] == [name, "Error", "0"], row
        assert "cannot" in row and "resolve" in row, row
        # The same refusal again writes nothing new.
        assert reconcile(sim, name, namespace)["status_changed"] is False
    finally:
        remove(sim, namespace, name)


def test_a_missing_workload_namespace_is_gkms_no_namespace_condition(sim, crds, image):
    name = "out-ns-%s" % uuid.uuid4().hex[:5]
    absent = "t-absent-%s" % uuid.uuid4().hex[:5]
    crds.create_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "ClusterGKMCache", "metadata": {"name": name},
        "spec": {"image": image.ref, "workloadNamespaces": [absent], "podTemplate": one_node_template()}})
    try:
        refused = run_module("cache_reconcile", sim.kubeconfig, kind="ClusterGKMCache", name=name,
                             registry_plain_http=True, extract_image="gkm-cluster-tools:test", wait=False)
        assert refused["failed"] and absent in refused["msg"]
        status = crds.get_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", name)["status"]
        assert status["phase"] == "Error"
        condition = next(c for c in status["conditions"] if c["type"] == "NoNamespace")
        assert condition["status"] == "True" and "create them first" in condition["message"]
    finally:
        crds.delete_cluster_custom_object(GROUP, VERSION, "clustergkmcaches", name)


@pytest.mark.parametrize("template, field, options", [
    # The API server refuses it for Jobs; before, the PVC and PV were written and the Job got HTTP 422.
    (one_node_template(tolerations=[{"key": "gpu", "operator": "Exists", "value": "true", "effect": "NoSchedule"}]),
     "spec.podTemplate.spec.tolerations[0].value must be empty when operator is Exists", {}),
    (one_node_template(tolerations=[{"key": "gpu", "operator": "Exist", "effect": "NoSchedule"}]),
     "spec.podTemplate.spec.tolerations[0].operator 'Exist' is not an operator", {}),
    # Only the API server knows: the whole plan is dry-run before the first write. (With the Jobs in the system
    # namespace, the default, the planner refuses any pod template label before that: test_plan.py.)
    (dict(one_node_template(), metadata={"labels": {"team": "not a label value!"}}),
     "spec.podTemplate.metadata.labels: Invalid value: \"not a label value!\"", {"system_namespace_jobs": False}),
], ids=["exists-with-value", "unknown-operator", "invalid-label"])
def test_an_invalid_pod_template_names_its_field_and_nothing_is_written(
        sim, kube, crds, namespace, image, template, field, options):
    name = create(crds, namespace, image.ref, template)
    refused = reconcile(sim, name, namespace, **options)
    assert refused["failed"] and field in refused["msg"], refused["msg"]
    assert "untolerated" not in refused["msg"]
    assert written(kube, namespace, name) == {"pvc": [], "pv": [], "job": []}
    status = live_status(crds, namespace, name)
    assert status["phase"] == "Error" and field in ready(status)["message"]
    assert ready(status)["reason"] in ("InvalidSpec", "Invalid")


def test_gkms_example_without_pod_template_is_pending_with_the_fix(sim, kube, crds, namespace, image):
    """The GPU workers carry the gpu taint: per node, no node is eligible for the cache yet."""
    name = create(crds, namespace, image.ref)
    result = reconcile(sim, name, namespace, wait=True, wait_timeout=60)
    assert not result.get("failed"), result.get("msg")
    status = live_status(crds, namespace, name)
    assert status["phase"] == "Pending"
    message = ready(status)["message"]
    assert message.startswith("Pending: no node is eligible for the cache yet: ")
    assert "untolerated taint gpu=true:NoSchedule (add a toleration to spec.podTemplate.spec.tolerations)" in message
    assert written(kube, namespace, name) == {"pvc": [], "pv": [], "job": []}


def test_a_read_only_many_extraction_runs_on_an_untainted_cpu_node(sim, kube, crds, namespace, image, sim_nodes):
    """No GPU node is eligible (gpu taint, no toleration), yet the one shared extraction runs on a CPU node."""
    cpu = sim_nodes([{"name": "out-cpu-%s" % uuid.uuid4().hex[:4], "count": 1}])[0]
    name = create(crds, namespace, image.ref, access_modes=["ReadOnlyMany"])
    try:
        started = reconcile(sim, name, namespace, node_details=True, host_path_read_only_many=True)
        assert not started.get("failed"), started.get("msg")
        assert started["eligible_nodes"] == []
        # Seen while it runs: the run that waits deletes the Job, and with it its pod, once the slot is marked.
        pods = wait_until("the extraction pod scheduled", lambda: [
            pod for pod in client.CoreV1Api(kube).list_pod_for_all_namespaces(
                label_selector="gkm.io/cache=%s" % name).items if pod.spec.node_name], timeout=60)
        assert {pod.spec.node_name for pod in pods} == {cpu}
        result = reconcile(sim, name, namespace, wait=True, wait_timeout=120, host_path_read_only_many=True)
        assert not result.get("failed"), result.get("msg")
        status = live_status(crds, namespace, name)
        assert status["phase"] == "Extracted", status
    finally:
        remove(sim, namespace, name)


def test_declared_caches_are_validated_together_and_none_is_applied_unless_all_are_valid(
        sim, crds, namespace, image, tmp_path):
    """Every invalid declared cache is named with the API server's words (not its Status JSON); the valid one waits."""
    def declared(name, **spec):
        return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}

    suffix = uuid.uuid4().hex[:5]
    valid = declared("ok-%s" % suffix, image=image.ref, podTemplate=one_node_template())
    caches = [declared("no-image-%s" % suffix, podTemplate=one_node_template()), valid,
              declared("bad-mode-%s" % suffix, image=image.ref, accessModes=["ReadWriteEverywhere"])]
    run = run_role("caches", tmp_path, {"caches_kubeconfig": sim.kubeconfig, "caches_declared": caches,
                                        "caches_registry_plain_http": True,
                                        "caches_extract_image": "gkm-cluster-tools:test"})
    assert not run.ok
    [failure] = run.failures()
    assert failure.startswith("2 declared cache(s) are invalid, so none was applied: "), failure
    assert "GKMCache %s/no-image-%s: " % (namespace, suffix) in failure and "spec.image: Required value" in failure
    assert "GKMCache %s/bad-mode-%s: " % (namespace, suffix) in failure and "spec.accessModes[0]" in failure
    assert '"kind":"Status"' not in failure and valid["metadata"]["name"] not in failure
    listed = crds.list_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches")["items"]
    assert listed == []
