#!/usr/bin/env python3
"""Run the local simulated GPU cluster: a real control plane with kwok nodes, and a real OCI registry.

    sim.py up            start whatever is not running (etcd, kube-apiserver, kube-controller-manager,
                         kube-scheduler, kwok, docker-registry, real nodes' containerd and kubelet), create the
                         simulated nodes, wait until ready
    sim.py registry-up   start only the registry (enough for extraction tests)
    sim.py down          stop exactly the processes recorded in the state file and remove the state
    sim.py status        processes, ports, nodes and the guard routes
    sim.py nodes         the GPU nodes (kwok and real) with capacity, labels and taints
    sim.py apply-nodes   create/remove simulated nodes so the cluster matches the node list
    sim.py webhook-up    run the collection's webhook server as a local process (url endpoint mode)
    sim.py webhook-down  stop it
    sim.py tools-image   build (or reuse) the tools image, push it to the registry, record it as "tools_image"
    sim.py operator-image the same for the operator image (the in-cluster operator), recorded as "operator_image"
    sim.py operator-up   build (or reuse) ansible-operator and run the collection's operator here (out of cluster,
                         operator_plan.py), after applying the GKM CRDs; one at a time on a machine (the
                         engine's ports are fixed): it waits while another run's operator runs
    sim.py operator-down stop it
    sim.py kyverno-up    build (or reuse) Kyverno, apply its CRDs and run its admission controller here (out of
                         cluster, kyverno_plan.py); prints its version and webhook address as JSON
    sim.py kyverno-down  stop it (its webhook configurations stay: with failurePolicy Fail, writes they match fail);
                         --purge also removes its webhook configurations, CRDs and namespace

State lives in $GKM_SIM_DIR (default .sim/ in the checkout): state.json (pids, ports), pki/, logs/,
kubeconfig. Ports are picked free at start, so two checkouts never collide.
Nodes: $GKM_SIM_NODES names a YAML file with a list of node groups (see gpu_nodes.py); without it,
one control-plane node and $GKM_SIM_GPU_NODES (default 3) GPU workers of $GKM_SIM_GPU_VENDOR
(amd|nvidia, default amd) and $GKM_SIM_GPU_ARCH.

Real nodes (root only): a group with `real: true`, or $GKM_SIM_REAL_NODES=N (default 0) for N more, AMD and
NVIDIA in turn (gkm-real-amd-1, gkm-real-nvidia-1, ...): a kubelet with its own containerd 2.x (built by
tools/containerd/build.sh) and CNI bridge each, labelled gkm.io/real-node=true (real_nodes.py). The API server and
the kubelets run with the ImageVolume feature gate. With real nodes the registry and the API server bind
the run's own host address (state.json "host_address") instead of 127.0.0.1, so pods reach them too.

Guard routes (root only; guard.py, guard_plan.py): while any run is up, the cluster's fake ranges (service range,
kwok's pod range, kwok's node address) are routed `unreachable` on this machine, so a packet to them (the API
server dialing a webhook Service's endpoints or a kwok node) fails at once instead of leaving by the default route.
`up` refuses to start when the machine itself uses part of a range; the last run's `down` removes the routes runs
added, never one the machine had.
"""

import argparse
import concurrent.futures
import contextlib
import fcntl
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, ".cache", "collections"))
sys.path.insert(0, HERE)

from simcluster import guard, guard_plan, kyverno_plan, operator_plan, real_nodes, real_nodes_plan  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes  # noqa: E402

SIM_DIR = os.path.abspath(os.environ.get("GKM_SIM_DIR", os.path.join(ROOT, ".sim")))
STATE_FILE = os.path.join(SIM_DIR, "state.json")
LOG_DIR = os.path.join(SIM_DIR, "logs")
PKI_DIR = os.path.join(SIM_DIR, "pki")
KUBECONFIG = os.path.join(SIM_DIR, "kubeconfig")
# Order matters: each component needs the ones before it.
# Simulated nodes report every 60-90 s instead of kwok's 20-45 s: with 500 nodes the heartbeats alone
# kept the API server a third busy and skewed every benchmark. The node lifecycle controller's grace
# period is raised to match, so no node is marked NotReady between two heartbeats. kwok starts a stage's delay
# again whenever the node changes, so a node whose labels a test writes every few seconds reports only when the
# controller marks it Unknown at the grace period, and is tainted unreachable for a moment: the planner does not
# count such condition taints (scheduling.py), as on a real cluster where a heartbeat can be late.
# $GKM_SIM_HEARTBEAT_SECONDS stretches the interval further for thousands of nodes (jitter and grace scale with it).
HEARTBEAT_SECONDS = int(os.environ.get("GKM_SIM_HEARTBEAT_SECONDS", "60"))
HEARTBEAT_DELAY = {"durationMilliseconds": HEARTBEAT_SECONDS * 1000,
                   "jitterDurationMilliseconds": HEARTBEAT_SECONDS * 1500}
NODE_MONITOR_GRACE_PERIOD = "%ds" % (HEARTBEAT_SECONDS * 3)
# $GKM_SIM_JOB_CONTROLLER=0 runs the controller manager without the Job controller: Jobs stay as created and
# make no pods, so the scale benchmark measures the collection's writes, not 15,000 simulated pod lifecycles
# (it writes each Job's Complete condition itself, as the Job controller would).
JOB_CONTROLLER = os.environ.get("GKM_SIM_JOB_CONTROLLER", "1") != "0"
CONTROL_PLANE = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]


def log(message):
    print("sim: %s" % message, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- state and processes

def load_state():
    try:
        with open(STATE_FILE) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {"processes": {}, "ports": {}}


def save_state(state):
    os.makedirs(SIM_DIR, exist_ok=True)
    tmp = STATE_FILE + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.replace(tmp, STATE_FILE)


def _process_start_time(pid):
    """The kernel's start time of pid (field 22 of /proc/pid/stat), or None if it is gone or a zombie.

    A process started by an earlier sim.py is reaped by init, which may take seconds: it has stopped already.
    """
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] == "Z" else fields[19]


def is_running(record):
    """A recorded process runs when its pid exists and has the start time we recorded (no pid reuse)."""
    return bool(record) and _process_start_time(record["pid"]) == record["start_time"]


def start_process(state, name, argv, environment=None, pass_fds=()):
    os.makedirs(LOG_DIR, exist_ok=True)
    with open(os.path.join(LOG_DIR, name + ".log"), "ab") as log_file:
        process = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=SIM_DIR, env=environment, pass_fds=pass_fds,
        )
    state["processes"][name] = {"pid": process.pid, "start_time": _process_start_time(process.pid), "argv": argv}
    save_state(state)


def stop_process(name, record, timeout=15):
    if not is_running(record):
        return
    pid = record["pid"]
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _process_start_time(pid) is not None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _process_start_time(pid) is not None:
        log("%s did not stop in %ss, killing it" % (name, timeout))
        os.killpg(pid, signal.SIGKILL)


def free_port():
    """A port free on every address now (bound on the wildcard, never listened on): loopback and host address."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return sock.getsockname()[1]


def bind_address(state):
    """Where the registry and the API server listen: the run's host address with real nodes, else loopback."""
    return state.get("host_address", "127.0.0.1")


def port(state, name):
    """A port for name, chosen once and kept for the life of the state."""
    if name not in state["ports"]:
        state["ports"][name] = free_port()
    return state["ports"][name]


def wait_for(what, check, timeout, process_names=(), state=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for name in process_names:
            if not is_running(state["processes"].get(name)):
                raise SystemExit("sim: %s exited while waiting for %s; see %s" % (
                    name, what, os.path.join(LOG_DIR, name + ".log")))
        time.sleep(0.1)
    raise SystemExit("sim: timed out after %ss waiting for %s (logs: %s)" % (timeout, what, LOG_DIR))


# ---------------------------------------------------------------- binaries, certificates, config files

def binary_dir():
    result = subprocess.run([os.path.join(HERE, "build.sh")], check=True, stdout=subprocess.PIPE, text=True)
    return result.stdout.strip().splitlines()[-1]


def _write(path, content, mode=0o600):
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as handle:
        handle.write(content)


def ensure_pki(state):
    """CA, apiserver serving and kubelet-client certs, admin client cert and service-account keys (once per state)."""
    paths = {name: os.path.join(PKI_DIR, name) for name in (
        "ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key", "sa.key", "sa.pub",
        "kubelet-client.crt", "kubelet-client.key")}
    if all(os.path.exists(path) for path in paths.values()):
        return paths
    os.makedirs(PKI_DIR, exist_ok=True)
    ca_cert, ca_key = tls.new_ca("gkm-sim-ca")
    server_cert, server_key = tls.new_signed_cert(
        ca_cert, ca_key, "kube-apiserver",
        dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                   "kubernetes.default.svc.cluster.local"],
        ip_addresses=sorted({"127.0.0.1", real_nodes_plan.SERVICE_IP, bind_address(state)}),
    )
    admin_cert, admin_key = tls.new_signed_cert(
        ca_cert, ca_key, "gkm-sim-admin", organization="system:masters", server=False, client=True)
    # The API server's identity towards kubelets (logs, exec, port-forward on real nodes).
    kubelet_client_cert, kubelet_client_key = tls.new_signed_cert(
        ca_cert, ca_key, "kube-apiserver-kubelet-client", organization="system:masters", server=False, client=True)
    sa_key = tls.new_private_key("rsa")
    for name, content in (("ca.crt", ca_cert), ("ca.key", ca_key), ("apiserver.crt", server_cert),
                          ("apiserver.key", server_key), ("admin.crt", admin_cert), ("admin.key", admin_key),
                          ("kubelet-client.crt", kubelet_client_cert), ("kubelet-client.key", kubelet_client_key),
                          ("sa.key", tls.key_to_pem(sa_key)), ("sa.pub", tls.public_key_to_pem(sa_key))):
        _write(paths[name], content)
    return paths


def write_kubeconfig(state, pki):
    server = "https://%s:%d" % (bind_address(state), port(state, "apiserver"))
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gkm-sim", "cluster": {"server": server, "certificate-authority": pki["ca.crt"]}}],
        "users": [{"name": "gkm-sim-admin", "user": {
            "client-certificate": pki["admin.crt"], "client-key": pki["admin.key"]}}],
        "contexts": [{"name": "gkm-sim", "context": {"cluster": "gkm-sim", "user": "gkm-sim-admin"}}],
        "current-context": "gkm-sim",
    }
    _write(KUBECONFIG, yaml.safe_dump(config, sort_keys=False))
    return server


def write_audit_policy():
    """Audit only writes, at Metadata level: tests count a module's writes from this log."""
    path = os.path.join(SIM_DIR, "audit-policy.yaml")
    _write(path, yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "users": ["system:kube-scheduler", "system:kube-controller-manager"]},
            {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"],
             "userGroups": ["system:masters"]},
            {"level": "None"},
        ],
    }), 0o644)
    return path


def write_registry_config(state):
    path = os.path.join(SIM_DIR, "registry.yml")
    _write(path, yaml.safe_dump({
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": os.path.join(SIM_DIR, "registry")}, "delete": {"enabled": True}},
        "http": {"addr": "%s:%d" % (bind_address(state), port(state, "registry"))},
    }), 0o644)
    return path


def write_kwok_config():
    """kwok reads its stages from Stage objects in the cluster, so tests can add their own."""
    path = os.path.join(SIM_DIR, "kwok.yaml")
    _write(path, yaml.safe_dump({
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {"enableCRDs": ["Stage"]},
    }), 0o644)
    return path


# ---------------------------------------------------------------- components

def component_argv(name, state, binaries, pki):
    cfg = KUBECONFIG
    if name == "etcd":
        client, peer = port(state, "etcd-client"), port(state, "etcd-peer")
        return [os.path.join(binaries, "etcd"), "--name", "gkm-sim", "--data-dir", os.path.join(SIM_DIR, "etcd"),
                "--listen-client-urls", "http://127.0.0.1:%d" % client,
                "--advertise-client-urls", "http://127.0.0.1:%d" % client,
                "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                "--initial-cluster", "gkm-sim=http://127.0.0.1:%d" % peer,
                "--listen-metrics-urls", "http://127.0.0.1:%d" % port(state, "etcd-metrics"),
                # A throwaway test cluster: durability is not worth the fsync latency.
                "--unsafe-no-fsync", "--quota-backend-bytes", str(4 * 1024 ** 3), "--log-level", "warn"]
    if name == "kube-apiserver":
        return [os.path.join(binaries, "kube-apiserver"),
                "--etcd-servers", "http://127.0.0.1:%d" % port(state, "etcd-client"),
                "--bind-address", bind_address(state), "--advertise-address", bind_address(state),
                "--secure-port", str(port(state, "apiserver")),
                "--cert-dir", os.path.join(SIM_DIR, "apiserver-certs"),
                "--tls-cert-file", pki["apiserver.crt"], "--tls-private-key-file", pki["apiserver.key"],
                "--client-ca-file", pki["ca.crt"],
                "--service-account-key-file", pki["sa.pub"],
                "--service-account-signing-key-file", pki["sa.key"],
                "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range", guard_plan.SERVICE_CIDR,
                "--authorization-mode", "RBAC",
                "--enable-admission-plugins", "NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,"
                "PersistentVolumeClaimResize,Priority,DefaultTolerationSeconds,MutatingAdmissionWebhook,"
                "ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,ResourceQuota,PodSecurity",
                "--allow-privileged=true",
                "--feature-gates", real_nodes_plan.feature_gates_flag(),
                # Real nodes: reach kubelets by IP (node names are not in DNS) as a client they trust, and call
                # webhook Services at their pod IPs (no kube-proxy runs).
                "--kubelet-preferred-address-types", "InternalIP,Hostname",
                "--kubelet-client-certificate", pki["kubelet-client.crt"],
                "--kubelet-client-key", pki["kubelet-client.key"],
                "--enable-aggregator-routing=true",
                # Benchmarks push thousands of objects and a 500-pod DaemonSet through one apiserver.
                "--max-requests-inflight", "2000", "--max-mutating-requests-inflight", "1000",
                "--audit-policy-file", write_audit_policy(),
                "--audit-log-path", os.path.join(LOG_DIR, "audit.log"),
                "--audit-log-maxsize", "200", "--audit-log-maxbackup", "1",
                "--profiling=false", "--v", "1"]
    if name == "kube-controller-manager":
        return [os.path.join(binaries, "kube-controller-manager"),
                "--kubeconfig", cfg, "--authentication-kubeconfig", cfg, "--authorization-kubeconfig", cfg,
                "--bind-address", "127.0.0.1", "--secure-port", str(port(state, "controller-manager")),
                "--service-account-private-key-file", pki["sa.key"], "--root-ca-file", pki["ca.crt"],
                "--service-cluster-ip-range", guard_plan.SERVICE_CIDR, "--leader-elect=false",
                "--controllers", "*" if JOB_CONTROLLER else "*,-job-controller",
                "--kube-api-qps", "500", "--kube-api-burst", "1000",
                "--concurrent-job-syncs", "20", "--concurrent-daemonset-syncs", "5",
                "--node-monitor-grace-period", NODE_MONITOR_GRACE_PERIOD, "--v", "1"]
    if name == "kube-scheduler":
        return [os.path.join(binaries, "kube-scheduler"),
                "--kubeconfig", cfg, "--authentication-kubeconfig", cfg, "--authorization-kubeconfig", cfg,
                "--bind-address", "127.0.0.1", "--secure-port", str(port(state, "scheduler")),
                "--leader-elect=false", "--kube-api-qps", "500", "--kube-api-burst", "1000", "--v", "1"]
    if name == "kwok":
        return [os.path.join(binaries, "kwok"), "--kubeconfig", cfg, "--config", write_kwok_config(),
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector", "%s=%s" % (
                    gpu_nodes.KWOK_ANNOTATION, gpu_nodes.KWOK_ANNOTATION_VALUE),
                "--cidr", guard_plan.KWOK_POD_CIDR, "--node-ip", guard_plan.KWOK_NODE_IP,
                "--server-address", "127.0.0.1:%d" % port(state, "kwok")]
    raise ValueError(name)


def _tls_context(pki):
    context = ssl.create_default_context(cafile=pki["ca.crt"])
    context.load_cert_chain(pki["admin.crt"], pki["admin.key"])
    return context


def api_request(state, pki, method, path, body=None, content_type="application/json", timeout=10):
    url = "https://%s:%d%s" % (bind_address(state), port(state, "apiserver"), path)
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, context=_tls_context(pki), timeout=timeout) as response:
        return json.loads(response.read() or b"null") if response.status != 204 else None


def _http_ok(url, context=None):
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def readiness_check(name, state, pki):
    if name == "etcd":
        return lambda: _http_ok("http://127.0.0.1:%d/health" % port(state, "etcd-client"))
    if name == "kube-apiserver":
        return lambda: _http_ok("https://%s:%d/readyz" % (bind_address(state), port(state, "apiserver")),
                                _tls_context(pki))
    if name == "registry":
        return lambda: _http_ok("http://%s:%d/v2/" % (bind_address(state), port(state, "registry")))
    return lambda: True


# ---------------------------------------------------------------- nodes

def node_groups():
    path = os.environ.get("GKM_SIM_NODES")
    if path:
        with open(path) as handle:
            return yaml.safe_load(handle)
    vendor = os.environ.get("GKM_SIM_GPU_VENDOR", "amd")
    workers = {"name": "gkm-gpu-worker", "count": int(os.environ.get("GKM_SIM_GPU_NODES", "3")), "vendor": vendor,
               "arch": os.environ.get("GKM_SIM_GPU_ARCH", gpu_nodes.VENDORS[vendor]["arch"]), "gpus": 2}
    return [gpu_nodes.DEFAULT_NODE_GROUPS[0], workers]


def split_node_groups():
    """(kwok groups, real groups) of the node list and $GKM_SIM_REAL_NODES."""
    return real_nodes_plan.split_groups(node_groups(), int(os.environ.get("GKM_SIM_REAL_NODES", "0")))


def real_nodes_run(state, pki=None):
    """The real nodes' view of this run (pki only where they call the API server)."""
    return real_nodes.Run(
        sim_dir=SIM_DIR, root=ROOT, state=state, save=lambda: save_state(state),
        start_process=lambda name, argv, environment: start_process(state, name, argv, environment),
        stop_process=stop_process, is_running=lambda name: is_running(state["processes"].get(name)),
        api=lambda method, path, body=None, content_type="application/json": api_request(
            state, pki, method, path, body, content_type),
        log=log)


def list_sim_nodes(state, pki):
    result = api_request(state, pki, "GET", "/api/v1/nodes?labelSelector=%s%%3Dtrue" % gpu_nodes.SIM_LABEL)
    return result["items"]


def apply_nodes(state, pki, groups):
    """Create missing simulated nodes and delete those no longer in the list; returns (added, removed)."""
    desired = {node["metadata"]["name"]: node for node in gpu_nodes.render_nodes(groups)}
    existing = {node["metadata"]["name"] for node in list_sim_nodes(state, pki)}
    to_add = [node for name, node in desired.items() if name not in existing]
    to_remove = sorted(existing - set(desired))

    def create(node):
        create_if_missing(state, pki, "/api/v1/nodes", node)

    def delete(name):
        try:
            api_request(state, pki, "DELETE", "/api/v1/nodes/%s" % name)
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise

    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(create, to_add))
        list(pool.map(delete, to_remove))
    return [node["metadata"]["name"] for node in to_add], to_remove


def nodes_ready(state, pki, names):
    ready = set()
    for node in list_sim_nodes(state, pki):
        conditions = node.get("status", {}).get("conditions") or []
        if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            ready.add(node["metadata"]["name"])
    return set(names) <= ready


def create_if_missing(state, pki, path, body):
    try:
        api_request(state, pki, "POST", path, body)
    except urllib.error.HTTPError as error:
        if error.code != 409:
            raise


def apply_kwok_stages(state, pki, binaries):
    """The Stage CRD and kwok's fast node and pod stages (Job pods Succeed, others Run)."""
    stage_dir = os.path.join(binaries, "kwok-stages")
    documents = []
    for name in sorted(os.listdir(stage_dir)):
        if name.endswith(".yaml"):
            with open(os.path.join(stage_dir, name)) as handle:
                documents.extend(doc for doc in yaml.safe_load_all(handle) if doc)
    crds = [doc for doc in documents if doc["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        create_if_missing(state, pki, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)

    def established():
        crd = api_request(state, pki, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/%s"
                          % crds[0]["metadata"]["name"])
        return any(c["type"] == "Established" and c["status"] == "True"
                   for c in (crd.get("status") or {}).get("conditions") or [])

    wait_for("the kwok Stage CRD", established, 30)
    for stage in (doc for doc in documents if doc["kind"] == "Stage"):
        if stage["metadata"]["name"] == "node-heartbeat":
            stage["spec"]["delay"] = HEARTBEAT_DELAY
        create_if_missing(state, pki, "/apis/kwok.x-k8s.io/v1alpha1/stages", stage)


def ensure_default_storage_class(state, pki):
    """A storage class without a provisioner, as kind-like clusters without CSI have: PVs are made by hand."""
    body = {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "local-manual", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer",
    }
    create_if_missing(state, pki, "/apis/storage.k8s.io/v1/storageclasses", body)


# ---------------------------------------------------------------- commands

def start_registry(state):
    if is_running(state["processes"].get("registry")):
        return
    config = write_registry_config(state)
    start_process(state, "registry", ["docker-registry", "serve", config])
    wait_for("the registry", readiness_check("registry", state, None), 15, ["registry"], state)
    state["registry"] = "%s:%d" % (bind_address(state), port(state, "registry"))
    save_state(state)


def ensure_host_network(state):
    """With real nodes asked for, the run's host address exists before anything binds it."""
    if split_node_groups()[1] and not state.get("network"):
        real_nodes.network_up(real_nodes_run(state))


def cmd_registry_up(_args):
    os.makedirs(SIM_DIR, exist_ok=True)
    state = load_state()
    ensure_host_network(state)
    start_registry(state)
    print(state["registry"])


def cmd_up(_args):
    started = time.monotonic()
    os.makedirs(SIM_DIR, exist_ok=True)
    binaries = binary_dir()
    state = load_state()
    # Saved first: a run counts as live for the guard routes while its state.json exists.
    save_state(state)
    guard.up(SIM_DIR, log)
    ensure_host_network(state)
    pki = ensure_pki(state)
    state["apiserver"] = write_kubeconfig(state, pki)
    state["kubeconfig"] = KUBECONFIG
    save_state(state)
    start_registry(state)
    started_any = False
    for name in CONTROL_PLANE:
        if is_running(state["processes"].get(name)):
            continue
        if name == "kwok":
            apply_kwok_stages(state, pki, binaries)
        if name == "kube-controller-manager":
            state["job_controller"] = JOB_CONTROLLER
        start_process(state, name, component_argv(name, state, binaries, pki))
        started_any = True
        wait_for(name, readiness_check(name, state, pki), 60, [name], state)
    if started_any:
        # Nodes are only laid out on a fresh start: a running cluster may have been reshaped on purpose
        # (benchmarks, day-2 tests) and `up` must not undo that; `apply-nodes` reconciles explicitly.
        ensure_default_storage_class(state, pki)
        groups, real_groups = split_node_groups()
        apply_nodes(state, pki, groups)
        names = [node["metadata"]["name"] for node in gpu_nodes.render_nodes(groups)]
        wait_for("nodes Ready", lambda: nodes_ready(state, pki, names), 60, CONTROL_PLANE, state)
        if real_groups:
            real_nodes.start(real_nodes_run(state, pki), real_groups, binaries, pki, free_port)
    elif real_nodes.any_stopped(real_nodes_run(state)):
        # A real node's kubelet or containerd was killed (fault tests): start it again, which also advertises
        # its GPUs again (a kubelet starting on an existing node zeroes extended resources nothing manages).
        real_nodes.start(real_nodes_run(state, pki), [], binaries, pki, free_port)
        started_any = True
    log("ready in %.1fs (%s); KUBECONFIG=%s" % (
        time.monotonic() - started, "started" if started_any else "already running", KUBECONFIG))


def cmd_apply_nodes(_args):
    """kwok nodes only: real nodes are started by `up` and stopped by `down`."""
    state = load_state()
    pki = ensure_pki(state)
    groups = split_node_groups()[0]
    added, removed = apply_nodes(state, pki, groups)
    names = [node["metadata"]["name"] for node in gpu_nodes.render_nodes(groups)]
    wait_for("nodes Ready", lambda: nodes_ready(state, pki, names), 120, CONTROL_PLANE, state)
    print(json.dumps({"added": added, "removed": removed}))


WEBHOOK_SERVER_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.webhook.server_main"


def cmd_webhook_up(args):
    """Run the collection's webhook server here (kwok pods run no containers); print its url and CA as JSON.

    The API server reaches it through clientConfig.url, so its certificate names 127.0.0.1.
    """
    state = load_state()
    directory = os.path.join(SIM_DIR, "webhook")
    os.makedirs(directory, exist_ok=True)
    paths = {name: os.path.join(directory, name) for name in ("ca.crt", "tls.crt", "tls.key")}
    if not all(os.path.exists(path) for path in paths.values()):
        ca_cert, ca_key = tls.new_ca("gkm-sim-webhook-ca")
        cert, key = tls.new_signed_cert(ca_cert, ca_key, "127.0.0.1", ip_addresses=["127.0.0.1"])
        for name, content in (("ca.crt", ca_cert), ("tls.crt", cert), ("tls.key", key)):
            _write(paths[name], content)
    with open(paths["ca.crt"]) as handle:
        ca_bundle = handle.read()
    url = "https://127.0.0.1:%d/mutate" % port(state, "webhook")
    running = is_running(state["processes"].get("webhook"))
    if args.dry_run:
        print(json.dumps({"changed": not running, "url": url, "ca_bundle": ca_bundle}))
        return
    if not running:
        environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".cache", "collections"))
        argv = [sys.executable, "-m", WEBHOOK_SERVER_MODULE, "--cert-file", paths["tls.crt"],
                "--key-file", paths["tls.key"], "--listen", "127.0.0.1:%d" % port(state, "webhook"),
                "--kubeconfig", KUBECONFIG]
        start_process(state, "webhook", argv, environment)
    context = ssl.create_default_context(cafile=paths["ca.crt"])
    wait_for("the webhook server", lambda: _http_ok("https://127.0.0.1:%d/readyz" % port(state, "webhook"),
                                                     context), 30, ["webhook"], state)
    print(json.dumps({"changed": not running, "url": url, "ca_bundle": ca_bundle}))


def push_image(name):
    """Build (or reuse) the image NAME from this checkout, push it to the run's registry, record it as NAME_image and
    print it.

    Cheap when nothing changed (the image cache under ~/.cache); after a code change only the code layer is
    rebuilt, so tests and the demo always run the checkout's code on the real nodes.
    """
    state = load_state()
    result = subprocess.run([os.path.join(ROOT, "tools", "images", "build.sh"), name, "--push", state["registry"]],
                            check=True, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    state = load_state()
    state["%s_image" % name] = result.stdout.strip().splitlines()[-1]
    save_state(state)
    print(state["%s_image" % name])


def cmd_tools_image(_args):
    push_image("tools")


def cmd_operator_image(_args):
    push_image("operator")


def stop_recorded(name):
    """Stop the process recorded under name and forget it; returns (state, whether it was running)."""
    state = load_state()
    record = state["processes"].pop(name, None)
    running = is_running(record)
    stop_process(name, record)
    save_state(state)
    return state, running


def cmd_webhook_down(_args):
    print(json.dumps({"changed": stop_recorded("webhook")[1]}))


def operator_dir():
    result = subprocess.run([os.path.join(ROOT, "tools", "ansible-operator", "build.sh")], check=True,
                            stdout=subprocess.PIPE, text=True)
    return result.stdout.strip().splitlines()[-1]


def lock_operator_slot():
    """The machine's one local operator slot (operator_plan.HOST_LOCK), locked: waits while another run's operator
    holds it. The returned descriptor is passed to the operator, which keeps the lock for as long as it runs."""
    os.makedirs(os.path.dirname(operator_plan.HOST_LOCK), exist_ok=True)
    descriptor = os.open(operator_plan.HOST_LOCK, os.O_WRONLY | os.O_CREAT, 0o644)
    deadline = time.monotonic() + operator_plan.HOST_LOCK_WAIT_SECONDS
    waiting = False
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return descriptor
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise SystemExit("sim: another run's operator still holds %s after %ss: `sim.py operator-down` in "
                                 "that run" % (operator_plan.HOST_LOCK, operator_plan.HOST_LOCK_WAIT_SECONDS)) from None
            if not waiting:
                log("another run's operator runs on this machine (one at a time: fixed ports and runner directory); "
                    "waiting for it to stop")
                waiting = True
            time.sleep(1)


def cmd_operator_up(args):
    """Run ansible-operator with the collection's watches here; print the process name and health address as JSON."""
    state = load_state()
    pki = ensure_pki(state)
    ports = {kind: port(state, "operator-" + kind) for kind in ("metrics", "health")}
    running = is_running(state["processes"].get("operator"))
    if not running:
        binary = os.path.join(operator_dir(), "bin", "ansible-operator")
        slot = lock_operator_slot()
        subprocess.run(["rm", "-rf", "--one-file-system", operator_plan.RUNNER_DIR], check=True)
        apply_crds(state, pki, os.path.join(ROOT, "roles", "gkm", "files", "crds"))
        create_if_missing(state, pki, "/api/v1/namespaces",
                          {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator_plan.NAMESPACE}})
        directory = os.path.join(SIM_DIR, "operator")
        os.makedirs(directory, exist_ok=True)
        vars_file = os.path.join(directory, "vars.json")
        tools_image = args.tools_image or state.get("tools_image") or "%s/gkm-cluster/tools:sim" % state["registry"]
        with open(vars_file, "w") as handle:
            options = json.loads(args.run_vars or "{}")
            json.dump(operator_plan.extra_vars(tools_image, KUBECONFIG, options), handle)
        start_process(state, "operator", operator_plan.argv(binary, ROOT, vars_file, ports),
                      operator_plan.environment(os.environ, ROOT, os.path.dirname(sys.executable), KUBECONFIG),
                      pass_fds=(slot,))
    wait_for("the operator", lambda: _http_ok("http://127.0.0.1:%d/readyz" % ports["health"]), 60, ["operator"], state)
    print(json.dumps({"changed": not running, "health": "127.0.0.1:%d" % ports["health"]}))


def cmd_operator_down(_args):
    print(json.dumps({"changed": stop_recorded("operator")[1]}))


def apply_crds(state, pki, directory):
    """Server-side apply of every CRD in directory (a newer Kyverno's CRDs replace older ones); wait until served."""
    names = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".yaml"):
            with open(os.path.join(directory, name)) as handle:
                for crd in (doc for doc in yaml.safe_load_all(handle) if doc):
                    api_request(state, pki, "PATCH", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/%s"
                                "?fieldManager=gkm-sim&force=true" % crd["metadata"]["name"], crd,
                                "application/apply-patch+yaml", timeout=30)
                    names.append(crd["metadata"]["name"])

    def established():
        for name in names:
            crd = api_request(state, pki, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + name)
            if not any(c["type"] == "Established" and c["status"] == "True"
                       for c in (crd.get("status") or {}).get("conditions") or []):
                return False
        return True

    wait_for("the CRDs in %s" % directory, established, 60)


def kyverno_dir():
    result = subprocess.run([os.path.join(ROOT, "tools", "kyverno", "build.sh")], check=True, stdout=subprocess.PIPE,
                            text=True)
    return result.stdout.strip().splitlines()[-1]


def cmd_kyverno_up(_args):
    state = load_state()
    pki = ensure_pki(state)
    directory = kyverno_dir()
    address = "%s:%d" % (bind_address(state), port(state, "kyverno"))
    running = is_running(state["processes"].get("kyverno"))
    if not running:
        apply_crds(state, pki, os.path.join(directory, "crds"))
        create_if_missing(state, pki, "/api/v1/namespaces", kyverno_plan.namespace())
        for config_map in kyverno_plan.config_maps():
            create_if_missing(state, pki, "/api/v1/namespaces/%s/configmaps" % kyverno_plan.NAMESPACE, config_map)
        start_process(state, "kyverno", kyverno_plan.argv(os.path.join(directory, "bin", "kyverno"), KUBECONFIG,
                                                          bind_address(state), port(state, "kyverno"),
                                                          port(state, "kyverno-metrics")),
                      dict(os.environ, **kyverno_plan.environment()))
    # Kyverno's certificate comes from its own CA (a Secret it writes); only liveness is asked here.
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    wait_for("Kyverno", lambda: _http_ok("https://%s/health/readiness" % address, context), 120, ["kyverno"], state)
    print(json.dumps({"changed": not running, "address": address,
                      "version": os.path.basename(directory).split("_")[0].split("-", 1)[1]}))


def cmd_kyverno_down(args):
    state, running = stop_recorded("kyverno")
    if args.purge:
        pki = ensure_pki(state)
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            api_request(state, pki, "DELETE", "/apis/admissionregistration.k8s.io/v1/%s?labelSelector=%s" % (
                kind, kyverno_plan.WEBHOOK_SELECTOR))
        crds = os.path.join(kyverno_dir(), "crds")
        paths = []
        for name in sorted(os.listdir(crds)):
            if name.endswith(".yaml"):
                with open(os.path.join(crds, name)) as handle:
                    paths.extend("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + crd["metadata"]["name"]
                                 for crd in yaml.safe_load_all(handle) if crd)
        for path in paths:
            delete_if_present(state, pki, path)
        delete_if_present(state, pki, "/api/v1/namespaces/" + kyverno_plan.NAMESPACE)
        # Gone, not only going: whoever comes next may install a Kyverno of its own.
        wait_for("Kyverno's CRDs to go", lambda: not any(exists(state, pki, path) for path in paths), 60)
    print(json.dumps({"changed": running or args.purge}))


def exists(state, pki, path):
    try:
        api_request(state, pki, "GET", path)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return False
        raise
    return True


def delete_if_present(state, pki, path):
    try:
        api_request(state, pki, "DELETE", path)
    except urllib.error.HTTPError as error:
        if error.code != 404:
            raise


def cmd_down(_args):
    started = time.monotonic()
    state = load_state()
    if state.get("network"):
        pki = ensure_pki(state)
        run = real_nodes_run(state, pki)
        # Controllers first, so the real nodes' pods, once deleted, are not made again.
        for name in ("kube-controller-manager", "kube-scheduler"):
            stop_process(name, state["processes"].get(name))
        # An API server that runs but cannot be reached (its host interface gone) has no pods to give: stopping the
        # kubelets and containerds then takes the pods down with them.
        if readiness_check("kube-apiserver", state, pki)():
            real_nodes.drain(run)
        real_nodes.stop(run)
    for name in ["operator", "kyverno", "webhook", *reversed([*CONTROL_PLANE, "registry"])]:
        # The API server's shutdown can hang for good with nothing left to serve; its data is about to go.
        stop_process(name, state["processes"].get(name), 5 if name == "kube-apiserver" else 15)
    if os.path.isdir(SIM_DIR):
        real_nodes.unmount_all(SIM_DIR)
        subprocess.run(["rm", "-rf", "--one-file-system", SIM_DIR], check=True)
    # After every process that could dial a fake address has stopped.
    guard.down(SIM_DIR, log)
    log("stopped in %.1fs; removed %s" % (time.monotonic() - started, SIM_DIR))


def cmd_status(_args):
    state = load_state()
    real = [prefix + node["name"] for node in state.get("real_nodes") or [] for prefix in ("containerd-", "kubelet-")]
    for name in [*CONTROL_PLANE, "registry", "webhook", "kyverno", "operator", *real]:
        record = state["processes"].get(name)
        print("%-24s %s" % (name, "running pid %d" % record["pid"] if is_running(record) else "stopped"))
    print("ports: %s" % json.dumps(state.get("ports", {}), sort_keys=True))
    if state.get("network"):
        print("host address: %s on %s" % (state["host_address"], state["network"]["host_interface"]))
    for node in state.get("real_nodes") or []:
        print("real node %s: bridge %s subnet %s kubelet port %d" % (
            node["name"], node["bridge"], node["subnet"], node["kubelet_port"]))
    for line in guard.status_lines():
        print(line)
    print("kubeconfig: %s" % state.get("kubeconfig", "-"))


def cmd_nodes(_args):
    state = load_state()
    pki = ensure_pki(state)
    real = api_request(state, pki, "GET", "/api/v1/nodes?labelSelector=%s%%3Dtrue" % gpu_nodes.REAL_NODE_LABEL)
    rows = [dict(gpu_nodes.node_summary(node), kind=kind) for kind, nodes in (
        ("kwok", list_sim_nodes(state, pki)), ("real", real["items"])) for node in nodes]
    print("Simulated cluster: %s (KUBECONFIG=%s), registry %s" % (state["apiserver"], KUBECONFIG, state["registry"]))
    columns = ["name", "kind", "gpus", "backend", "arch", "warp_size", "taints"]
    widths = {column: max([len(column)] + [len(row[column]) for row in rows]) for column in columns}
    print("  ".join(column.upper().ljust(widths[column]) for column in columns))
    for row in rows:
        print("  ".join(row[column].ljust(widths[column]) for column in columns))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = {"up": cmd_up, "registry-up": cmd_registry_up, "down": cmd_down, "status": cmd_status,
                "nodes": cmd_nodes, "apply-nodes": cmd_apply_nodes,
                "webhook-up": cmd_webhook_up, "webhook-down": cmd_webhook_down, "tools-image": cmd_tools_image,
                "operator-image": cmd_operator_image,
                "kyverno-up": cmd_kyverno_up, "kyverno-down": cmd_kyverno_down,
                "operator-up": cmd_operator_up, "operator-down": cmd_operator_down}
    parser.add_argument("command", choices=sorted(commands))
    parser.add_argument("--dry-run", action="store_true", help="webhook-up: say what would be started, start nothing")
    parser.add_argument("--purge", action="store_true", help="kyverno-down: also remove Kyverno's webhook "
                        "configurations, CRDs (and with them all policies) and namespace")
    parser.add_argument("--run-vars", help="operator-up: its runs' variables (caches_*, operator_events_*), JSON")
    parser.add_argument("--tools-image", help="operator-up: the extraction Jobs' image (default: sim.py tools-image's)")
    args = parser.parse_args()
    commands[args.command](args)


if __name__ == "__main__":
    main()
