"""The hardware role against the real local cluster: every finding produced from objects set up here.

Mixed GPU nodes (NVIDIA feature-discovery labels, an AMD device id, an NFD PCI label only), storage classes
without a provisioner / with a provisioner and a pre-made PV / with a provisioner that never answers, an
untolerated taint, a kube-apiserver pod behind a proxy without .svc in no_proxy, and OpenShift's
security.openshift.io API group (a CRD standing in for OpenShift's own API).
"""

import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube as kube_access
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import sim_nodes
from tests.helpers.roles import run_role

pytestmark = pytest.mark.cluster

SCOPE = "roles-hardware"
FAKE_PROVISIONER = "gkmt.example.com/never-answers"


@pytest.fixture
def hardware_cluster(kube, namespace):
    """The objects the preflight should find; all removed afterwards."""
    suffix = uuid.uuid4().hex[:5]
    raw = kube_access.Kube(kube)
    core, storage = client.CoreV1Api(kube), client.StorageV1Api(kube)
    sim_nodes.reconcile(raw, [
        {"name": "hw-gfd-%s" % suffix, "vendor": "none", "labels": {
            "nvidia.com/gpu.present": "true", "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0"},
         "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        {"name": "hw-amd-%s" % suffix, "vendor": "none", "labels": {"amd.com/gpu.device-id": "74a1"}},
        {"name": "hw-nfd-%s" % suffix, "vendor": "none",
         "labels": {"feature.node.kubernetes.io/pci-0302_10de.present": "true"}},
        {"name": "hw-cpu-%s" % suffix, "vendor": "none"},
    ], scope=SCOPE)
    classes = {"noprov": "gkmt-noprov-%s" % suffix, "bound": "gkmt-bound-%s" % suffix,
               "unbound": "gkmt-unbound-%s" % suffix}
    storage.create_storage_class({"metadata": {"name": classes["noprov"]},
                                  "provisioner": "kubernetes.io/no-provisioner"})
    for key in ("bound", "unbound"):
        storage.create_storage_class({"metadata": {"name": classes[key]}, "provisioner": FAKE_PROVISIONER,
                                      "volumeBindingMode": "Immediate"})
    # A PV waiting for the probe's claim: the PV controller binds them, as if the provisioner had made it.
    pv_name = "gkmt-rox-%s" % suffix
    core.create_persistent_volume({"metadata": {"name": pv_name}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"], "storageClassName": classes["bound"],
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/tmp/gkmt-rox"},
        "claimRef": {"namespace": namespace, "name": "gkm-rox-probe-" + classes["bound"]}}})
    apiserver = "kube-apiserver-gkmt-%s" % suffix
    container = {"name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver",
                 "env": [{"name": "https_proxy", "value": "http://proxy.example:3128"},
                         {"name": "no_proxy", "value": "127.0.0.1,localhost"}]}
    core.create_namespaced_pod("kube-system", {
        "metadata": {"name": apiserver, "labels": {"component": "kube-apiserver"}},
        "spec": {"nodeName": "hw-cpu-%s-1" % suffix, "containers": [container]}})
    crd_name = "securitycontextconstraints.security.openshift.io"
    client.ApiextensionsV1Api(kube).create_custom_resource_definition({
        "metadata": {"name": crd_name, "labels": {"gkm.io/test-standin": "true"}},
        "spec": {"group": "security.openshift.io", "scope": "Cluster",
                 "names": {"plural": "securitycontextconstraints", "kind": "SecurityContextConstraints"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    yield {"suffix": suffix, "classes": classes, "namespace": namespace}
    sim_nodes.reconcile(raw, [], scope=SCOPE)
    cleanups = [lambda: client.ApiextensionsV1Api(kube).delete_custom_resource_definition(crd_name),
                lambda: core.delete_namespaced_pod(apiserver, "kube-system", grace_period_seconds=0),
                lambda: core.delete_persistent_volume(pv_name),
                lambda: client.RbacAuthorizationV1Api(kube).delete_cluster_role("gkm-extraction-scc-nonroot-v2")]
    cleanups += [lambda name=name: storage.delete_storage_class(name) for name in classes.values()]
    for cleanup in cleanups:
        try:
            cleanup()
        except ApiException as error:
            assert error.status == 404


def gpu(facts, prefix):
    (found,) = [node for node in facts["gpu_nodes"] if node["name"].startswith(prefix)]
    return found


def test_preflight_finds_what_was_set_up_and_labels_gpu_nodes(sim, kube, hardware_cluster, tmp_path):
    suffix, classes, namespace = hardware_cluster["suffix"], hardware_cluster["classes"], hardware_cluster["namespace"]
    probed = [classes["noprov"], classes["unbound"]]
    role_vars = {"hardware_kubeconfig": sim.kubeconfig, "hardware_rox_probe_storage_classes": probed,
                 "hardware_rox_probe_namespace": namespace, "hardware_rox_probe_timeout": 4,
                 "hardware_extraction_tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                 "hardware_extraction_namespace": namespace}

    rehearsal = run_role("hardware", tmp_path, dict(role_vars, hardware_label_gpu_nodes=True), check=True)
    assert rehearsal.ok, rehearsal.failures()
    facts = rehearsal.facts["hardware_facts"]
    assert facts["rox_probe"][classes["unbound"]]["result"] == "not probed"
    assert "gkm.io/gpu-arch" not in client.CoreV1Api(kube).read_node("hw-gfd-%s-1" % suffix).metadata.labels

    run = run_role("hardware", tmp_path, dict(role_vars, hardware_label_gpu_nodes=True))
    assert run.ok, run.failures()
    facts = run.facts["hardware_facts"]
    assert facts["kubernetes_version"].startswith("v1.34")
    assert facts["openshift"] is True and "security.openshift.io" in facts["openshift_groups"]

    rows = {row["name"]: row for row in facts["storage_classes"]}
    assert rows[classes["noprov"]]["dynamic"] is False
    assert rows[classes["unbound"]]["driver_installed"] is False   # no CSIDriver registered for it
    assert facts["rox_probe"][classes["unbound"]]["result"] == "unbound"
    assert "external provisioner" in facts["rox_probe"][classes["unbound"]]["detail"]
    assert facts["rox_probe"][classes["noprov"]]["result"] == "unbound"
    with pytest.raises(ApiException) as gone:
        client.CoreV1Api(kube).read_namespaced_persistent_volume_claim("gkm-rox-probe-" + classes["unbound"], namespace)
    assert gone.value.status == 404

    nvidia = gpu(facts, "hw-gfd-%s" % suffix)
    assert (nvidia["vendor"], nvidia["arch"]) == ("nvidia", "90")
    amd = gpu(facts, "hw-amd-%s" % suffix)
    assert (amd["vendor"], amd["arch"]) == ("amd", "gfx942")
    nfd = gpu(facts, "hw-nfd-%s" % suffix)
    assert nfd["vendor"] == "nvidia" and nfd["arch"] is None and nfd["sources"] == ["nfd pci"]
    assert not [node for node in facts["gpu_nodes"] if node["name"].startswith("hw-cpu-")]
    assert set(facts["labelled"]) >= {"hw-gfd-%s-1" % suffix, "hw-amd-%s-1" % suffix}
    labels = client.CoreV1Api(kube).read_node("hw-gfd-%s-1" % suffix).metadata.labels
    assert (labels["gkm.io/gpu-backend"], labels["gkm.io/gpu-arch"], labels["gkm.io/gpu-warp-size"]) == (
        "cuda", "90", "32")
    labels = client.CoreV1Api(kube).read_node("hw-amd-%s-1" % suffix).metadata.labels
    assert (labels["gkm.io/gpu-backend"], labels["gkm.io/gpu-arch"], labels["gkm.io/gpu-warp-size"]) == (
        "hip", "gfx942", "64")

    taints = {taint["taint"]: taint for taint in facts["taints"]}
    assert taints["nvidia.com/gpu=present:NoSchedule"]["tolerated"] is False
    assert taints["nvidia.com/gpu=present:NoSchedule"]["nodes"] == ["hw-gfd-%s-1" % suffix]
    assert taints["gpu=true:NoSchedule"]["tolerated"] is True
    assert {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"} in \
        facts["pod_template"]["spec"]["tolerations"]

    messages = [finding["message"] for finding in facts["findings"]]
    assert any("no provisioner" in message and classes["noprov"] in message for message in messages)
    assert any("not registered" in message and classes["unbound"] in message for message in messages)
    assert any("ReadOnlyMany PVC did not bind" in message and classes["unbound"] in message for message in messages)
    assert any("nvidia.com/gpu=present:NoSchedule" in message and "not tolerated" in message for message in messages)
    assert any("architecture unknown" in message and "hw-nfd-%s-1" % suffix in message for message in messages)
    assert any("no_proxy lacks .svc" in message and "kube-apiserver-gkmt-%s" % suffix in message
               for message in messages)
    report = "\n".join(facts["report"])
    assert "(OpenShift)" in report and "Findings:" in report
    assert "nvidia.com/gpu=present:NoSchedule on 1 node(s): NOT tolerated" in report

    binding = client.RbacAuthorizationV1Api(kube).read_namespaced_role_binding("gkm-extraction-scc", namespace)
    assert binding.role_ref.name == "gkm-extraction-scc-nonroot-v2"
    assert binding.subjects[0].name == "gkm-extract"

    # The PV controller may take its resync period to bind a claim to a pre-made PV, hence the longer timeout.
    again = run_role("hardware", tmp_path, dict(role_vars, hardware_label_gpu_nodes=True,
                                                hardware_rox_probe_storage_classes=[classes["bound"]],
                                                hardware_rox_probe_timeout=90))
    assert again.ok, again.failures()
    assert not [name for name in again.facts["hardware_facts"]["labelled"] if suffix in name]
    assert again.facts["hardware_facts"]["rox_probe"][classes["bound"]]["result"] == "bound"
    assert "ReadOnlyMany probe: bound" in "\n".join(again.facts["hardware_facts"]["report"])

    strict = run_role("hardware", tmp_path, dict(role_vars, hardware_rox_probe=False, hardware_fail_on_errors=True))
    assert not strict.ok
    assert "no_proxy lacks .svc" in " ".join(strict.failures())


def test_argument_spec_rejects_bad_input(sim, tmp_path):
    run = run_role("hardware", tmp_path, {"hardware_rox_probe_timeout": "soon", "hardware_kubeconfig": sim.kubeconfig})
    assert not run.ok
    assert "hardware_rox_probe_timeout" in " ".join(run.failures())
