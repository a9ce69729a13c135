"""Real nodes of the simulated cluster: a kubelet with its own containerd, runc and CNI bridge per node.

containerd (2.x, so pods can mount images with `volumes[].image`) and runc come from tools/containerd/build.sh.

Needs root. Everything the run creates outside its state directory is recorded in state.json (interfaces,
chains, cgroup roots) or recognised by the run id, and `stop` removes exactly that. What the kubelet and
containerd create in fixed host places (/run/containerd, /run/netns, /var/lib/cni, /var/log/containers,
ip_forward) is put back as it was when the last run on this machine stops: runs register in
/run/gkm-sim/runs, and the first one records the machine's baseline there.
"""

import contextlib
import fcntl
import glob
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
from dataclasses import dataclass
from typing import Callable

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from simcluster import real_nodes_plan as plan

NETNS_DIR = "/run/netns"
BASELINE_DIRS = ["/run/containerd", "/opt/containerd", NETNS_DIR, "/var/lib/cni", "/var/log/containers",
                 "/var/log/pods"]
CNI_RESULTS = "/var/lib/cni/results"
IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"


@dataclass
class Run:
    """What the real nodes need from sim.py: the state directory and its helpers."""

    sim_dir: str
    root: str  # the checkout, for the image tools
    state: dict
    save: Callable[[], None]
    start_process: Callable  # (name, argv, environment)
    stop_process: Callable  # (name, record, timeout)
    is_running: Callable  # (name)
    api: Callable  # (method, path, body=None, content_type=...)
    log: Callable

    @property
    def network(self):
        return self.state["network"]


def _ip(*argv, check=True):
    return subprocess.run(["ip", *argv], check=check, capture_output=True, text=True).stdout


def _iptables(*argv, check=True):
    return subprocess.run(["iptables", "-w", *argv], check=check, capture_output=True, text=True)


def _iptables_save(table):
    result = subprocess.run(["iptables-save", "-t", table], check=True, capture_output=True, text=True)
    return result.stdout.splitlines()


def _nft_tables():
    """["ip nat", ...]: the nftables tables now, or [] where iptables is the legacy kind (nft absent)."""
    if not shutil.which("nft"):
        return []
    listing = subprocess.run(["nft", "list", "tables"], check=True, capture_output=True, text=True).stdout
    return [line.split(None, 1)[1] for line in listing.splitlines() if line.startswith("table ")]


def _write(path, content, mode=0o644):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as handle:
        handle.write(content)


# ---------------------------------------------------------------- runs on this machine

@contextlib.contextmanager
def host_lock(host_dir=plan.HOST_RUN_DIR):
    """Runs on this machine that share what is under host_dir take turns: host_dir/lock, host_dir/runs/<run id>."""
    os.makedirs(os.path.join(host_dir, "runs"), exist_ok=True)
    with open(os.path.join(host_dir, "lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def live_runs(host_dir=plan.HOST_RUN_DIR):
    """Run ids registered in host_dir whose state directory still exists (a run that crashed and was wiped no
    longer counts)."""
    live = {}
    for path in glob.glob(os.path.join(host_dir, "runs", "*")):
        with open(path) as handle:
            sim_dir = handle.read().strip()
        if os.path.exists(os.path.join(sim_dir, "state.json")):
            live[os.path.basename(path)] = sim_dir
    return live


def _join_host(run):
    baseline = os.path.join(plan.HOST_RUN_DIR, "baseline.json")
    if not live_runs() or not os.path.exists(baseline):
        with open(IP_FORWARD) as handle:
            forward = handle.read().strip()
        _write(baseline, json.dumps({"ip_forward": forward, "dirs": {d: os.path.lexists(d) for d in BASELINE_DIRS},
                                     "mount_points": [d for d in BASELINE_DIRS if d in _mounts_under(d)],
                                     "nft_tables": _nft_tables()}))
    _share_netns_dir()
    _write(os.path.join(plan.HOST_RUN_DIR, "runs", run.network["run"]), run.sim_dir)


def _share_netns_dir():
    """Make /run/netns a shared mount of itself before any pod starts, as `ip netns add` (the operator replica tests)
    would on its first call. Made later, with pods' network namespaces mounted inside, that bind mount hides theirs:
    containerd then unmounts only the copy, the file stays busy, and the pod never finishes tearing down."""
    os.makedirs(NETNS_DIR, exist_ok=True)
    if NETNS_DIR not in _mounts_under(NETNS_DIR):
        subprocess.run(["mount", "--bind", NETNS_DIR, NETNS_DIR], check=True)
    subprocess.run(["mount", "--make-shared", NETNS_DIR], check=True)


def _leave_host(run):
    """Forget this run; the last one out puts back ip_forward and removes the host dirs the runs created."""
    with host_lock():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(plan.HOST_RUN_DIR, "runs", run.network["run"]))
        if {name for name in live_runs() if name != run.network["run"]}:
            return
        with open(os.path.join(plan.HOST_RUN_DIR, "baseline.json")) as handle:
            baseline = json.load(handle)
        with open(IP_FORWARD, "w") as handle:
            handle.write(baseline["ip_forward"])
        # iptables-nft makes the nftables tables of the chains it touched; the machine may have had none.
        for table in set(_nft_tables()) - set(baseline["nft_tables"]):
            if not [line for line in _iptables_save(table.split()[-1]) if line.startswith("-A")]:
                subprocess.run(["nft", "delete", "table", *table.split()], check=True)
        for directory, existed in baseline["dirs"].items():
            if directory not in baseline["mount_points"]:
                _unmount_self_bind(directory)
            if not existed and os.path.lexists(directory):
                _refuse_mounts_under(directory)
                shutil.rmtree(directory)
        shutil.rmtree(plan.HOST_RUN_DIR)


# ---------------------------------------------------------------- host network

def network_up(run):
    """The run's host interface with its own 10.X.0.1/32: the registry and the API server bind it."""
    if os.geteuid() != 0:
        raise SystemExit("sim: real nodes need root (their own containerd, bridges and iptables chains); "
                         "run as root or set GKM_SIM_REAL_NODES=0")
    bound = [name for name in ("registry", "kube-apiserver") if run.is_running(name)]
    if bound:
        raise SystemExit("sim: %s already run(s) on 127.0.0.1 without real nodes, where pods cannot reach them: "
                         "`sim.py down` first, or set GKM_SIM_REAL_NODES=0" % " and ".join(bound))
    run_id = plan.run_id(run.sim_dir)
    with host_lock():
        used = plan.used_second_octets(_ip("-4", "-o", "addr") + _ip("-4", "route", "show", "table", "all"))
        octet = plan.pick_second_octet(used)
        run.state["network"] = {"run": run_id, "octet": octet, "host_interface": plan.host_interface(run_id),
                                "bridges": [], "chains": []}
        run.state["host_address"] = plan.host_address(octet)
        run.save()
        _join_host(run)
        interface = run.network["host_interface"]
        _ip("link", "add", interface, "type", "bridge")
        _ip("addr", "add", "%s/32" % run.state["host_address"], "dev", interface)
        _ip("link", "set", interface, "up")
    run.log("host address %s on %s" % (run.state["host_address"], interface))


def _install_firewall(run, api_port):
    for table, parent, chain, rules in plan.firewall_rules(
            run.network["run"], run.network["bridges"], run.state["host_address"], api_port):
        if _iptables("-t", table, "-N", chain, check=False).returncode == 0:
            run.network["chains"].append([table, parent, chain])
            run.save()
        _iptables("-t", table, "-F", chain)
        for rule in rules:
            _iptables("-t", table, "-A", chain, *rule)
        if _iptables("-t", table, "-C", parent, "-j", chain, check=False).returncode != 0:
            _iptables("-t", table, "-I", parent, "1", "-j", chain)


def network_down(run):
    network = run.state.get("network")
    if not network:
        return
    for table, parent, chain in network["chains"]:
        while _iptables("-t", table, "-D", parent, "-j", chain, check=False).returncode == 0:
            pass
        _iptables("-t", table, "-F", chain, check=False)
        _iptables("-t", table, "-X", chain, check=False)
    for interface in [*network["bridges"], network["host_interface"]]:
        _ip("link", "del", interface, check=False)
    _leave_host(run)


# ---------------------------------------------------------------- nodes

def _node_record(run, spec, index, ports):
    directory = os.path.join(run.sim_dir, "nodes", spec["name"])
    network = plan.node_network(run.network["run"], run.network["octet"], index)
    kubelet_port, healthz_port = ports
    # The deepest unix socket: the kubelet's device plugin socket under its root dir.
    socket = os.path.join(directory, "kubelet", "device-plugins", "kubelet.sock")
    if len(socket) > plan.MAX_SOCKET_PATH:
        raise SystemExit("sim: %s is too long a path for the real nodes' unix sockets (%d > %d characters): use a "
                         "shorter GKM_SIM_DIR" % (run.sim_dir, len(socket), plan.MAX_SOCKET_PATH))
    return {
        **spec, **network, "index": index, "dir": directory,
        "containerd_socket": os.path.join(directory, "containerd", "containerd.sock"),
        "kubelet_root": os.path.join(directory, "kubelet"),
        "kubelet_port": kubelet_port, "healthz_port": healthz_port,
        "cgroup_root": plan.cgroup_root(run.network["run"], index),
        "serving_cert": os.path.join(directory, "pki", "kubelet.crt"),
        "serving_key": os.path.join(directory, "pki", "kubelet.key"),
    }


def _cgroup_mounts():
    with open("/proc/self/mountinfo") as handle:
        fields = [line.split(" - ")[0].split() + line.split(" - ")[1].split() for line in handle]
    return [entry[4] for entry in fields if entry[-3] in ("cgroup", "cgroup2")]


def _make_cgroup_root(root):
    """The kubelet wants its cgroup root under every hierarchy; a new cpuset starts empty, so copy the parent's."""
    for mount in _cgroup_mounts():
        path = mount + root
        os.makedirs(path, exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if os.path.exists(os.path.join(mount, name)):
                with open(os.path.join(mount, name)) as source:
                    value = source.read().strip()
                with open(os.path.join(path, name), "w") as target:
                    target.write(value)


def _specs(groups):
    """Name, labels, taints and GPU capacity of the real nodes of these node groups."""
    return [plan.real_node_object(node, gpu_nodes.SIM_LABEL, gpu_nodes.REAL_NODE_LABEL)
            for node in gpu_nodes.render_nodes(groups)]


def _sandbox_image(run):
    """The pause image, built (or reused) and pushed to the run's registry by the image tools, once per state."""
    if "pause_image" not in run.state:
        result = subprocess.run([os.path.join(run.root, "tools", "images", "build.sh"), "pause", "--push",
                                 run.state["registry"]], check=True, stdout=subprocess.PIPE, text=True, cwd=run.root)
        run.state["pause_image"] = result.stdout.strip().splitlines()[-1]
        run.save()
    return run.state["pause_image"]


def _containerd_binaries(run):
    """containerd 2.x, its shim, ctr and runc, built (or reused) from the Go module proxy (tools/containerd)."""
    if "containerd_bin" not in run.state:
        result = subprocess.run([os.path.join(run.root, "tools", "containerd", "build.sh")], check=True,
                                stdout=subprocess.PIPE, text=True, cwd=run.root)
        run.state["containerd_bin"] = result.stdout.strip().splitlines()[-1]
        run.save()
    return run.state["containerd_bin"]


def _bind_nodes_to_node_role(run):
    """Kubelets authenticate as system:node:<name> in group system:nodes; RBAC is the only authorizer."""
    try:
        run.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "gkm-sim-nodes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]})
    except urllib.error.HTTPError as error:
        if error.code != 409:
            raise


def _write_node_files(run, node, pki, sandbox_image, containerd_bin):
    directory = node["dir"]
    with open(pki["ca.crt"]) as handle:
        ca_cert = handle.read()
    with open(pki["ca.key"]) as handle:
        ca_key = handle.read()
    host = run.state["host_address"]
    client_cert, client_key = tls.new_signed_cert(ca_cert, ca_key, "system:node:%s" % node["name"],
                                                  organization="system:nodes", server=False, client=True)
    serving_cert, serving_key = tls.new_signed_cert(ca_cert, ca_key, node["name"], dns_names=[node["name"]],
                                                    ip_addresses=[host])
    files = {
        "pki/client.crt": client_cert, "pki/client.key": client_key,
        "pki/kubelet.crt": serving_cert, "pki/kubelet.key": serving_key,
        "kubeconfig": plan.kubeconfig(run.state["apiserver"], pki["ca.crt"], os.path.join(directory, "pki/client.crt"),
                                      os.path.join(directory, "pki/client.key"), "system:node:%s" % node["name"]),
        "kubelet.yaml": plan.kubelet_config(node, host, pki),
        "containerd/config.toml": plan.containerd_config(os.path.join(directory, "containerd"), sandbox_image,
                                                         os.path.join(containerd_bin, "runc")),
        "containerd/certs.d/%s/hosts.toml" % run.state["registry"]: plan.registry_hosts_toml(run.state["registry"]),
        "containerd/cni/10-gkm.conflist": plan.cni_conflist(node, {
            "address": host, "ipam_dir": os.path.join(directory, "ipam")}),
    }
    for name, content in files.items():
        _write(os.path.join(directory, name), content, 0o600 if name.endswith(".key") else 0o644)


def _wait(what, check, timeout, run):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise SystemExit("sim: timed out after %ss waiting for %s (logs: %s/logs)" % (timeout, what, run.sim_dir))


def start(run, groups, binaries, pki, free_port):
    """Start containerd and the kubelet of every real node (those of groups, and those already in the state
    whose processes stopped), then make the nodes look like GPU nodes."""
    host = run.state["host_address"]
    nodes = run.state.setdefault("real_nodes", [])
    known = {node["name"] for node in nodes}
    _bind_nodes_to_node_role(run)
    sandbox_image = _sandbox_image(run)
    containerd_bin = _containerd_binaries(run)
    for spec in _specs(groups):
        if spec["name"] not in known:
            nodes.append(_node_record(run, spec, len(nodes), (free_port(), free_port())))
    run.network["bridges"] = [node["bridge"] for node in nodes]
    run.save()
    for node in nodes:
        if _ip("link", "show", node["bridge"], check=False) == "":
            _ip("link", "add", node["bridge"], "type", "bridge")
            _ip("link", "set", node["bridge"], "up")
    _install_firewall(run, int(run.state["apiserver"].rsplit(":", 1)[1]))
    # No proxy for the local registry; every other registry goes to a closed loopback port (plan.DEAD_PROXY).
    # containerd looks its shim up in PATH before its own directory: ours first, not a system containerd's.
    environment = dict(os.environ, HTTP_PROXY=plan.DEAD_PROXY, HTTPS_PROXY=plan.DEAD_PROXY,
                       NO_PROXY=run.state["registry"].split(":")[0],
                       PATH="%s:%s" % (containerd_bin, os.environ.get("PATH", os.defpath)))
    for node in nodes:
        name = node["name"]
        if not run.is_running("containerd-" + name):
            _make_cgroup_root(node["cgroup_root"])
            _write_node_files(run, node, pki, sandbox_image, containerd_bin)
            run.start_process("containerd-" + name, [os.path.join(containerd_bin, "containerd"), "--config",
                                                     os.path.join(node["dir"], "containerd", "config.toml")],
                              environment)
            _wait("containerd of %s" % name, lambda node=node: os.path.exists(node["containerd_socket"]), 30, run)
        if not run.is_running("kubelet-" + name):
            labels = ",".join("%s=%s" % item for item in sorted(node["labels"].items())
                              if "kubernetes.io" not in item[0])
            run.start_process("kubelet-" + name, [
                os.path.join(binaries, "kubelet"), "--config", os.path.join(node["dir"], "kubelet.yaml"),
                "--kubeconfig", os.path.join(node["dir"], "kubeconfig"), "--root-dir", node["kubelet_root"],
                "--hostname-override", name, "--node-ip", host, "--node-labels", labels, "--v", "1"], environment)
    for node in nodes:
        _wait("node %s registered" % node["name"], lambda node=node: _node(run, node["name"]) is not None, 60, run)
        run.api("PATCH", "/api/v1/nodes/%s" % node["name"], {"metadata": {"labels": node["labels"]}},
                "application/merge-patch+json")
        run.api("PATCH", "/api/v1/nodes/%s/status" % node["name"], {"status": {
            "capacity": node["gpu_capacity"], "allocatable": node["gpu_capacity"]}}, "application/merge-patch+json")
    for node in nodes:
        _wait("node %s Ready and schedulable" % node["name"], lambda node=node: _ready(_node(run, node["name"])), 90,
              run)


def any_stopped(run):
    return any(not run.is_running(prefix + node["name"])
               for node in run.state.get("real_nodes") or [] for prefix in ("containerd-", "kubelet-"))


def _node(run, name):
    try:
        return run.api("GET", "/api/v1/nodes/%s" % name)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def _ready(node):
    """Ready, and the node lifecycle controller has lifted its not-ready taint: pods can be scheduled there."""
    return bool(node) and any(c["type"] == "Ready" and c["status"] == "True"
                              for c in node.get("status", {}).get("conditions") or []) and not any(
        t["key"] == "node.kubernetes.io/not-ready" for t in node.get("spec", {}).get("taints") or [])


# ---------------------------------------------------------------- stopping

def _tasks(run, node):
    ctr = os.path.join(run.state["containerd_bin"], "ctr")
    result = subprocess.run([ctr, "--address", node["containerd_socket"], "-n", "k8s.io", "tasks", "ls", "-q"],
                            capture_output=True, text=True, check=False)
    return result.stdout.split() if result.returncode == 0 else []


def drain(run):
    """Delete the pods of the real nodes and let their kubelets tear them down (network, mounts, netns).

    Called with the controllers stopped, so nothing recreates them.
    """
    nodes = run.state.get("real_nodes") or []
    for node in nodes:
        pods = run.api("GET", "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s" % node["name"])["items"]
        for pod in pods:
            with contextlib.suppress(Exception):
                run.api("DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0" % (
                    pod["metadata"]["namespace"], pod["metadata"]["name"]))
    running = [node for node in nodes if run.is_running("kubelet-" + node["name"])]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_tasks(run, node) for node in running):
        time.sleep(0.3)


def _processes():
    """{pid: (ppid, argv)} of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                argv = handle.read().decode(errors="replace").split("\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        table[int(entry)] = (ppid, argv)
    return table


def _kill_shims(node):
    """containerd's shims outlive it: kill each shim of this node's containerd with its containers' processes."""
    table = _processes()
    shims = [pid for pid, (_, argv) in table.items()
             if argv[0].endswith("containerd-shim-runc-v2") and node["containerd_socket"] in argv]
    doomed = set(shims)
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in table.items() if ppid in doomed} - doomed
        grew = bool(children)
        doomed |= children
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists("/proc/%d" % pid) for pid in doomed):
        time.sleep(0.1)


def _mounts_under(directory):
    prefix = directory.rstrip("/") + "/"
    with open("/proc/self/mountinfo") as handle:
        points = [line.split()[4].encode().decode("unicode_escape") for line in handle]
    return [point for point in points if point == directory or point.startswith(prefix)]


def _unmount_self_bind(directory):
    """Undo the runs' bind mount of a directory onto itself (/run/netns, _share_netns_dir). With a namespace still
    mounted inside, umount fails, and so does the removal of a directory the runs created."""
    if directory in _mounts_under(directory):
        subprocess.run(["umount", directory], capture_output=True, check=False)


def _refuse_mounts_under(directory):
    """rm -rf through a bind mount would delete the host files behind it."""
    left = _mounts_under(directory)
    if left:
        raise SystemExit("sim: refusing to remove %s: still mounted: %s" % (directory, left))


def unmount_all(directory):
    """Every mount under directory, deepest first (kubelet's bind mount of its root, volumes, rootfs, shm)."""
    for _ in range(5):
        points = sorted(set(_mounts_under(directory)), key=len, reverse=True)
        if not points:
            return
        for point in points:
            if subprocess.run(["umount", point], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True)
    _refuse_mounts_under(directory)


def _remove_netns_and_cni_cache(node):
    """Network namespaces the node's pods had (libcni's cached results name them), and those results.

    containerd also caches the loopback network of each sandbox, under the shared name cni-loopback: those of
    this node are the ones with the same container ids.
    """
    for path in glob.glob(os.path.join(CNI_RESULTS, "%s-*" % node["cni_network"])):
        with open(path) as handle:
            cached = json.load(handle)
        for interface in (cached.get("result") or {}).get("interfaces") or []:
            sandbox = interface.get("sandbox")
            if sandbox and os.path.exists(sandbox):
                subprocess.run(["umount", sandbox], capture_output=True)
                os.unlink(sandbox)
        loopback = os.path.join(CNI_RESULTS, "cni-loopback-%s-lo" % cached["containerId"])
        for cache in (path, loopback):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(cache)


def _remove_cgroup_root(root):
    for mount in _cgroup_mounts():
        top = mount + root
        if not os.path.isdir(top):
            continue
        for directory, _, _ in sorted(os.walk(top), key=lambda entry: len(entry[0]), reverse=True):
            with open(os.path.join(directory, "cgroup.procs")) as handle:
                for pid in handle.read().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
            for _ in range(50):
                try:
                    os.rmdir(directory)
                    break
                except OSError:
                    time.sleep(0.1)


def _remove_log_links(run):
    for link in glob.glob("/var/log/containers/*"):
        if os.path.islink(link) and os.readlink(link).startswith(run.sim_dir.rstrip("/") + "/"):
            os.unlink(link)


def stop(run):
    """Everything start made, in reverse: pods first (drain), kubelets, containerds, then what they left."""
    nodes = run.state.get("real_nodes") or []
    for node in nodes:
        run.stop_process("kubelet-" + node["name"], run.state["processes"].get("kubelet-" + node["name"]), 15)
    for node in nodes:
        run.stop_process("containerd-" + node["name"], run.state["processes"].get("containerd-" + node["name"]), 15)
        _kill_shims(node)
    unmount_all(run.sim_dir)
    for node in nodes:
        _remove_netns_and_cni_cache(node)
        _remove_cgroup_root(node["cgroup_root"])
    _remove_log_links(run)
    network_down(run)
