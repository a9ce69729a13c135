"""Smoke tests proving the simulated cluster is a real one: real controllers, scheduler and admission."""

import base64
import http.server
import json
import ssl
import threading
import time
import uuid

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

GPU_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CONTAINER = {"name": "main", "image": "registry.k8s.io/pause:3.10"}


def wait_until(what, check, timeout=60, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))


def gpu_node_names(core):
    nodes = core.list_node(label_selector="hardware-type=gpu,%s=true" % gpu_nodes.SIM_LABEL).items
    return sorted(node.metadata.name for node in nodes)


def test_gpu_nodes_have_capacity_labels_and_taint(kube):
    core = client.CoreV1Api(kube)
    nodes = core.list_node(label_selector="hardware-type=gpu").items
    assert len(nodes) >= 3
    for node in nodes:
        labels = node.metadata.labels
        assert labels["gkm.io/gpu-backend"] in ("hip", "cuda")
        assert labels["gkm.io/gpu-arch"] and labels["gkm.io/gpu-warp-size"] in ("32", "64")
        assert "node-role.kubernetes.io/worker" in labels
        resource = "amd.com/gpu" if labels["gkm.io/gpu-backend"] == "hip" else "nvidia.com/gpu"
        assert node.status.capacity[resource] == "2" and node.status.allocatable[resource] == "2"
        assert any(t.key == "gpu" and t.value == "true" and t.effect == "NoSchedule" for t in node.spec.taints)
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_job_completes_through_job_controller_and_kwok(kube, namespace):
    batch = client.BatchV1Api(kube)
    batch.create_namespaced_job(namespace, {
        "metadata": {"name": "smoke"},
        "spec": {"backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "tolerations": [GPU_TOLERATION], "containers": [CONTAINER]}}},
    })

    def complete():
        job = batch.read_namespaced_job_status("smoke", namespace)
        return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or [])

    wait_until("Job Complete", complete)
    pods = client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector="job-name=smoke").items
    assert [pod.status.phase for pod in pods] == ["Succeeded"]
    assert pods[0].spec.node_name in gpu_node_names(client.CoreV1Api(kube))


def test_daemonset_gets_one_pod_per_gpu_node_with_node_affinity(kube, namespace):
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    labels = {"app": "smoke-ds"}
    apps.create_namespaced_daemon_set(namespace, {
        "metadata": {"name": "smoke-ds"},
        "spec": {"selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"tolerations": [GPU_TOLERATION], "containers": [CONTAINER]}}},
    })
    expected = gpu_node_names(core)

    def pods_running():
        pods = core.list_namespaced_pod(namespace, label_selector="app=smoke-ds").items
        if len(pods) == len(expected) and all(pod.status.phase == "Running" for pod in pods):
            return pods
        return None

    pods = wait_until("one Running pod per GPU node", pods_running)
    assert sorted(pod.spec.node_name for pod in pods) == expected
    for pod in pods:
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        fields = [(f.key, f.operator, f.values) for term in terms for f in term.match_fields or []]
        assert fields == [("metadata.name", "In", [pod.spec.node_name])]


def test_pod_without_toleration_stays_pending_for_the_gpu_taint(kube, namespace):
    core = client.CoreV1Api(kube)
    # Tolerating the control-plane taint leaves the GPU taint as the only taint in the scheduler's message.
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "untolerated"},
        "spec": {"nodeSelector": {"hardware-type": "gpu"}, "containers": [CONTAINER], "tolerations": [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]},
    })

    def failed_scheduling():
        events = core.list_namespaced_event(
            namespace, field_selector="involvedObject.name=untolerated,reason=FailedScheduling").items
        return events[0] if events else None

    event = wait_until("a FailedScheduling event", failed_scheduling)
    # Kubernetes 1.34's scheduler no longer names the taint in its message ("untolerated taint(s)"): the count
    # of GPU nodes refused for a taint, with the control-plane node refused by the selector, pins it down.
    tainted = [node.metadata.name for node in core.list_node(label_selector="hardware-type=gpu").items
               if any(t.key == "gpu" and t.effect == "NoSchedule" for t in node.spec.taints or [])]
    assert tainted == gpu_node_names(core)
    assert "%d node(s) had untolerated taint(s)" % len(tainted) in event.message
    pod = core.read_namespaced_pod("untolerated", namespace)
    assert pod.status.phase == "Pending" and not pod.spec.node_name


class _AddLabelWebhook(http.server.BaseHTTPRequestHandler):
    """Answers every AdmissionReview with a JSONPatch adding one label; records the requests it saw."""

    seen = []

    def do_POST(self):
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(review["request"]["object"]["metadata"].get("name")
                         or review["request"]["object"]["metadata"].get("generateName"))
        patch = [{"op": "add", "path": "/metadata/labels/mutated-by", "value": "smoke-webhook"}]
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": review["request"]["uid"], "allowed": True, "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture
def smoke_webhook_server(tmp_path):
    ca_cert, ca_key = tls.new_ca("smoke-webhook-ca")
    cert, key = tls.new_signed_cert(ca_cert, ca_key, "smoke-webhook", ip_addresses=["127.0.0.1"])
    (tmp_path / "tls.crt").write_text(cert)
    (tmp_path / "tls.key").write_text(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AddLabelWebhook)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], ca_cert
    server.shutdown()


def test_mutating_webhook_url_is_called_and_its_patch_applied(kube, namespace, smoke_webhook_server):
    port, ca_cert = smoke_webhook_server
    admission = client.AdmissionregistrationV1Api(kube)
    core = client.CoreV1Api(kube)
    name = "smoke-%s" % uuid.uuid4().hex[:8]
    selector = {"matchLabels": {"smoke-webhook": name}}
    admission.create_mutating_webhook_configuration({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "smoke.gkm.io",
            "clientConfig": {"url": "https://127.0.0.1:%d/mutate" % port,
                             "caBundle": base64.b64encode(ca_cert.encode()).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
            "objectSelector": selector,
            "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "timeoutSeconds": 5,
        }],
    })
    try:
        # The configuration takes effect asynchronously: retry the create until the webhook has seen it.
        def created_and_mutated():
            pod_name = "mutated-%s" % uuid.uuid4().hex[:6]
            core.create_namespaced_pod(namespace, {
                "metadata": {"name": pod_name, "labels": {"smoke-webhook": name}},
                "spec": {"tolerations": [GPU_TOLERATION], "containers": [CONTAINER]},
            })
            pod = core.read_namespaced_pod(pod_name, namespace)
            return pod if pod.metadata.labels.get("mutated-by") == "smoke-webhook" else None

        pod = wait_until("the webhook's patch on a created pod", created_and_mutated, timeout=30, interval=0.5)
        assert pod.metadata.name in _AddLabelWebhook.seen
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": "not-selected"}, "spec": {"containers": [CONTAINER]}})
        assert "mutated-by" not in (core.read_namespaced_pod("not-selected", namespace).metadata.labels or {})
        assert "not-selected" not in _AddLabelWebhook.seen
    finally:
        admission.delete_mutating_webhook_configuration(name)
