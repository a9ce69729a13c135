"""Smoke tests proving the simulated cluster is a real one: real controllers, scheduler and admission."""

import base64
import contextlib
import errno
import glob
import http.server
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest
from kubernetes import client, config

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    REAL_NODE_LABEL,
    SIM_NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from tests.helpers.paths import ROOT
from tests.helpers.sim import SIM_SCRIPT, sim_control
from tests.helpers.webhook import wait_until

GPU_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
CONTAINER = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
# Pods of this image only "run" on kwok nodes: real nodes would try to pull it (and may pull only locally).
ON_KWOK = {SIM_NODE_LABEL: "true"}


def gpu_node_names(core):
    nodes = core.list_node(label_selector="hardware-type=gpu,%s=true" % SIM_NODE_LABEL).items
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
            "restartPolicy": "Never", "nodeSelector": ON_KWOK, "tolerations": [GPU_TOLERATION],
            "containers": [CONTAINER]}}},
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
            "spec": {"nodeSelector": ON_KWOK, "tolerations": [GPU_TOLERATION], "containers": [CONTAINER]}}},
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
    gpu_nodes_all = core.list_node(label_selector="hardware-type=gpu").items  # kwok and real
    tainted = [node.metadata.name for node in gpu_nodes_all
               if any(t.key == "gpu" and t.effect == "NoSchedule" for t in node.spec.taints or [])]
    assert tainted == [node.metadata.name for node in gpu_nodes_all]
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
                "spec": {"nodeSelector": ON_KWOK, "tolerations": [GPU_TOLERATION], "containers": [CONTAINER]},
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


# ---------------------------------------------------------------- guard routes

def test_the_fake_ranges_are_unreachable_here_and_a_connect_to_them_fails_at_once(kube, namespace):
    """kwok pods' IPs, ClusterIPs and kwok nodes' address are fake: while the cluster runs, sim.py routes their
    ranges `unreachable` on this machine, so whatever dials them (the API server, for a webhook Service's endpoints
    or a kwok node's kubelet) fails at once instead of sending a packet off the machine by its default route."""
    guard_plan = sim_control.guard_plan
    for guarded in guard_plan.GUARD_RANGES:
        assert _lines("ip", "-4", "route", "show", "table", "main", "exact", guarded) == ["unreachable %s " % guarded]
    status = subprocess.run([sys.executable, SIM_SCRIPT, "status"], check=True, capture_output=True, text=True).stdout
    for guarded in guard_plan.GUARD_RANGES:
        assert "guard route %s: unreachable" % guarded in status

    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, {"metadata": {"name": "fake-ip"}, "spec": {
        "nodeSelector": ON_KWOK, "tolerations": [GPU_TOLERATION], "containers": [CONTAINER]}})

    def with_ip():
        pod = core.read_namespaced_pod("fake-ip", namespace)
        return pod if pod.status.pod_ip else None

    pod = wait_until("the kwok pod's IP", with_ip)
    service = core.create_namespaced_service(namespace, {"metadata": {"name": "fake-ip"}, "spec": {
        "ports": [{"port": 443}]}})
    assert pod.status.host_ip == guard_plan.KWOK_NODE_IP
    for address in (pod.status.pod_ip, service.spec.cluster_ip, pod.status.host_ip):
        # Checked before any packet is sent: the kernel's answer for this very address is "no route".
        route = subprocess.run(["ip", "route", "get", address], check=False, capture_output=True, text=True)
        assert route.returncode != 0 and "No route to host" in route.stderr, (address, route.stdout)
        started = time.monotonic()
        with pytest.raises(OSError) as refused:
            socket.create_connection((address, 443), timeout=5).close()
        assert refused.value.errno == errno.EHOSTUNREACH, (address, refused.value)
        assert time.monotonic() - started < 0.5


# ---------------------------------------------------------------- real nodes

def test_real_nodes_look_like_gpu_nodes_without_the_kwok_marks(kube, real_nodes):
    core = client.CoreV1Api(kube)
    nodes = {node.metadata.name: node for node in core.list_node(
        label_selector="%s=true" % REAL_NODE_LABEL).items}
    assert sorted(nodes) == sorted(node["name"] for node in real_nodes)
    assert {node.metadata.labels["gkm.io/gpu-backend"] for node in nodes.values()} == {"hip", "cuda"}
    for node in nodes.values():
        labels = node.metadata.labels
        assert SIM_NODE_LABEL not in labels and labels.get("type") != "kwok"
        assert gpu_nodes.KWOK_ANNOTATION not in (node.metadata.annotations or {})
        vendor = "amd" if labels["gkm.io/gpu-backend"] == "hip" else "nvidia"
        facts = gpu_nodes.VENDORS[vendor]
        assert labels["gkm.io/gpu-arch"] == facts["arch"] and labels["gkm.io/gpu-warp-size"] == str(facts["warp_size"])
        assert labels["hardware-type"] == "gpu" and "node-role.kubernetes.io/worker" in labels
        assert node.status.capacity[facts["resource"]] == "2" == node.status.allocatable[facts["resource"]]
        assert any(t.key == "gpu" and t.value == "true" and t.effect == "NoSchedule" for t in node.spec.taints)
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        assert node.status.node_info.kubelet_version == "v1.34.4"
        # containerd 2.x (tools/containerd): ImageVolume needs >= 2.1.
        assert node.status.node_info.container_runtime_version.startswith("containerd://2.")


def test_a_real_pod_runs_and_the_api_server_reads_its_log_through_the_kubelet(kube, sim, real_nodes, namespace):
    """The API server reaches the kubelet by InternalIP with its client certificate; the kubelet asks the API
    server (webhook authentication and authorization) before answering."""
    core = client.CoreV1Api(kube)
    node = real_nodes[0]["name"]
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "real"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [GPU_TOLERATION],
                 "containers": [{"name": "main", "image": sim.state["pause_image"]}]}})

    def running():
        pod = core.read_namespaced_pod("real", namespace)
        return pod if pod.status.phase == "Running" else None

    pod = wait_until("the pod Running on %s" % node, running, timeout=90, interval=0.5)
    assert pod.spec.node_name == node
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(real_nodes[0]["subnet"])
    assert core.read_namespaced_pod_log("real", namespace) == ""


HOST_DIRS = ["/run/containerd", "/opt/containerd", "/run/netns", "/var/lib/cni", "/var/log/containers",
             "/var/log/pods", "/run/gkm-sim"]


def _lines(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.splitlines()


def _other_runs(own_dir):
    """Marks of the other live runs with real nodes (their run id, 10.X. range, state directory)."""
    marks = []
    for path in glob.glob("/run/gkm-sim/runs/*"):
        with open(path) as handle:
            sim_dir = handle.read().strip()
        if sim_dir == own_dir:
            continue
        marks += [os.path.basename(path), sim_dir]
        with contextlib.suppress(FileNotFoundError, KeyError), open(os.path.join(sim_dir, "state.json")) as handle:
            marks.append("10.%d." % json.load(handle)["network"]["octet"])
        # Their pods' network namespaces, named by libcni's cached results of their networks.
        for cached in glob.glob("/var/lib/cni/results/gkm-%s-n*" % os.path.basename(path)):
            with contextlib.suppress(FileNotFoundError), open(cached) as handle:
                marks += [os.path.basename(interface["sandbox"])
                          for interface in json.load(handle)["result"]["interfaces"] if interface.get("sandbox")]
    return marks


def machine_snapshot(own_dir):
    """What a run with real nodes may change on this machine, less what other live runs own (by their marks)."""
    others = _other_runs(own_dir)

    def mine(lines):
        return sorted(line for line in lines if not any(mark in line for mark in others))

    with open("/proc/self/mountinfo") as handle:
        mounts = [line.split()[4] for line in handle]
    masters = {line.split(":")[1].strip().split("@")[0]: line.split(" master ")[1].split()[0]
               for line in _lines("ip", "-o", "link") if " master " in line}

    def with_master(line, device):
        """A pod's veth names its bridge (and so its run) only as its master."""
        return "%s master %s" % (line, masters.get(device.split("@")[0], "-"))

    def device(line):
        words = line.split()
        return words[words.index("dev") + 1] if "dev" in words else "-"

    snapshot = {
        "links": mine(with_master(line.split(":")[1].strip(), line.split(":")[1].strip())
                      for line in _lines("ip", "-o", "link")),
        "addresses": mine(with_master(line, line.split()[1]) for line in _lines("ip", "-o", "addr")),
        # `table all` lists both families.
        "routes": mine(with_master(line, device(line)) for line in _lines("ip", "route", "show", "table", "all")),
        "iptables": mine(line for line in _lines("iptables-save") if not line.startswith("#")),
        "ip6tables": mine(line for line in _lines("ip6tables-save") if not line.startswith("#")),
        "mounts": mine(point for point in mounts if point.startswith((own_dir, *HOST_DIRS))),
        "cgroups": mine(path for path in glob.glob("/sys/fs/cgroup/*/gkm-*")),
        "log links": [link for link in glob.glob("/var/log/containers/*") if os.readlink(link).startswith(own_dir)],
    }
    if not others:
        # Shared by every run: compared only when no other run holds them.
        with open("/proc/sys/net/ipv4/ip_forward") as handle:
            snapshot["ip_forward"] = handle.read()
        snapshot["host dirs"] = [(d, sorted(os.listdir(d)) if os.path.isdir(d) else None) for d in HOST_DIRS]
        snapshot["nft tables"] = _lines("nft", "list", "tables")
    return snapshot


def snapshot_changes(before, after):
    """{what: {"gone": [...], "new": [...]}} for every part of the snapshot that differs."""
    changes = {}
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key), after.get(key)
        if old != new:
            changes[key] = {"gone": [item for item in old or [] if item not in (new or [])],
                            "new": [item for item in new or [] if item not in (old or [])]}
    return changes


def _listening():
    """A socket listening on a port (on the wildcard address) that a run's state could have picked."""
    holder = socket.socket()
    holder.bind(("0.0.0.0", sim_control.free_port()))
    holder.listen()
    return holder


def _run_sim(command, environment):
    """`sim.py command` of another checkout; its failure names the command and shows the end of what it printed (CI
    keeps no other trace of it: stop 37's CI failed this test with nothing more to read)."""
    done = subprocess.run([sys.executable, SIM_SCRIPT, command], env=environment, capture_output=True, text=True,
                          check=False)
    printed = (done.stdout + done.stderr)[-4000:]
    assert done.returncode == 0, "sim.py %s: exit %d\n%s" % (command, done.returncode, printed)
    return printed


# Other lanes' clusters start and stop pods the whole time: their half-made namespaces and links are not yet marked
# as theirs (_other_runs) for some seconds on a loaded machine.
SETTLE_SECONDS = 30


def test_a_second_checkout_runs_beside_and_down_leaves_the_machine_as_found(sim, real_nodes):
    """Another state directory with a real node of its own, beside the session's cluster: no shared name, range,
    port or cgroup; after its `down`, the machine is as it was before its `up`.

    The ports its state holds for etcd and the API server are taken by another process before they start, as a
    client's connection can take a port between the pick and the bind: both start again on new ones, and the
    kubeconfig the pod below is created with names the API server's new port."""
    # Short: the kubelet's unix sockets live under it (pytest's tmp_path is too deep for them).
    own_dir = os.path.join(tempfile.mkdtemp(prefix="gkm-"), "sim")
    environment = dict(os.environ, GKM_SIM_DIR=own_dir, GKM_SIM_REAL_NODES="1", GKM_SIM_GPU_NODES="1")
    before = machine_snapshot(own_dir)
    holders = {name: _listening() for name in ("etcd-client", "apiserver")}
    taken = {name: holder.getsockname()[1] for name, holder in holders.items()}
    os.makedirs(own_dir)
    with open(os.path.join(own_dir, "state.json"), "w") as handle:
        json.dump({"processes": {}, "ports": taken}, handle)
    try:
        printed = _run_sim("up", environment)
        assert printed.count("found one of its ports taken") == 2, printed
        with open(os.path.join(own_dir, "state.json")) as handle:
            second = json.load(handle)
        assert not set(taken.values()) & set(second["ports"].values())
        first = sim.state
        assert second["network"]["run"] != first["network"]["run"]
        assert second["network"]["octet"] != first["network"]["octet"]
        assert second["host_address"] != first["host_address"]
        assert not {node["bridge"] for node in second["real_nodes"]} & {node["bridge"] for node in real_nodes}
        assert not {node["cgroup_root"] for node in second["real_nodes"]} & {node["cgroup_root"] for node in real_nodes}
        assert not ({node["kubelet_port"] for node in second["real_nodes"]} | set(second["ports"].values())) & (
            {node["kubelet_port"] for node in real_nodes} | set(first["ports"].values()))
        during = machine_snapshot(own_dir)
        assert during["links"] != before["links"] and during["iptables"] != before["iptables"]
        # A running pod leaves the most behind (netns, veth, mounts, cgroups, log link, CNI cache). Its kubelet
        # is then killed, so `down` cannot have it torn down and must undo all of it on its own.
        node = second["real_nodes"][0]
        core = client.CoreV1Api(config.new_client_from_config(config_file=second["kubeconfig"]))
        core.create_namespaced_pod("default", {
            "metadata": {"name": "left-behind"},
            "spec": {"nodeName": node["name"], "tolerations": [GPU_TOLERATION],
                     "containers": [{"name": "main", "image": second["pause_image"]}]}})
        wait_until("the pod Running", lambda: core.read_namespaced_pod("left-behind", "default").status.phase
                   == "Running", timeout=180, interval=0.5)
        assert machine_snapshot(own_dir)["log links"]
        os.kill(second["processes"]["kubelet-" + node["name"]]["pid"], signal.SIGKILL)
    finally:
        for holder in holders.values():
            holder.close()
        _run_sim("down", environment)
    deadline = time.monotonic() + SETTLE_SECONDS
    while snapshot_changes(before, machine_snapshot(own_dir)) and time.monotonic() < deadline:
        time.sleep(1)
    assert snapshot_changes(before, machine_snapshot(own_dir)) == {}
    assert not os.path.exists(own_dir)
    os.rmdir(os.path.dirname(own_dir))


def test_up_restarts_a_killed_kubelet_and_the_node_keeps_its_gpus(kube, sim, real_nodes):
    """What fault tests do: kill a real node's kubelet, then `sim.py up` starts it again."""
    node = real_nodes[-1]["name"]
    state_file = os.path.join(os.path.dirname(sim.kubeconfig), "state.json")
    with open(state_file) as handle:
        killed = json.load(handle)["processes"]["kubelet-" + node]["pid"]
    os.kill(killed, signal.SIGKILL)
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sim-cluster", "sim.py"), "up"], check=True,
                   capture_output=True)
    with open(state_file) as handle:
        restarted = json.load(handle)["processes"]["kubelet-" + node]["pid"]
    assert restarted != killed and os.path.exists("/proc/%d" % restarted)
    core = client.CoreV1Api(kube)
    resource = next(key for key in core.read_node(node).status.capacity if key.endswith("/gpu"))

    def ready_with_gpus():
        status = core.read_node(node).status
        return (any(c.type == "Ready" and c.status == "True" for c in status.conditions)
                and status.capacity[resource] == "2" == status.allocatable[resource])

    wait_until("%s Ready with its GPUs" % node, ready_with_gpus, timeout=60)


def _webhook_up(mode):
    """sim.py webhook-up with a default mount mode: whether it changed anything, and the server's process record."""
    shown = subprocess.run([sys.executable, SIM_SCRIPT, "webhook-up", "--default-mount-mode", mode], check=True,
                           capture_output=True, text=True, timeout=90).stdout
    return json.loads(shown)["changed"], sim_control.load_state()["processes"]["webhook"]


def test_webhook_up_replaces_a_server_started_with_another_default_mount_mode(sim):
    """The gkm role runs webhook-up on every deploy: a changed caches_mount_mode must reach the running server."""
    before = sim_control.load_state()["processes"].get("webhook")
    was_running = sim_control.is_running(before)
    try:
        _webhook_up("PVC")
        changed, pvc_server = _webhook_up("PVC")
        assert not changed
        changed, image_volume_server = _webhook_up("imageVolume")
        assert changed and image_volume_server["pid"] != pvc_server["pid"]
        assert image_volume_server["argv"][-2:] == ["--default-mount-mode", "imageVolume"]
        assert not sim_control.is_running(pvc_server)
    finally:
        if was_running:
            _webhook_up(before["argv"][-1])
        else:
            subprocess.run([sys.executable, SIM_SCRIPT, "webhook-down"], check=True, capture_output=True, timeout=60)
