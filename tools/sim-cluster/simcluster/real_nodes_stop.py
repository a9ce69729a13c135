"""Stopping the real nodes: their pods drained, kubelets and containerds stopped, and everything they left on the
machine (shims, mounts, network namespaces, CNI cache, cgroups, log links) removed, then the host network."""

import contextlib
import glob
import json
import os
import signal
import subprocess
import time

from simcluster import api, real_nodes_network
from simcluster.mounts import cgroup_mounts, unmount_all
from simcluster.state_dir import SIM_DIR, is_recorded_running, stop_process

CNI_RESULTS = "/var/lib/cni/results"


def _tasks(state, node):
    ctr = os.path.join(state["containerd_bin"], "ctr")
    result = subprocess.run([ctr, "--address", node["containerd_socket"], "-n", "k8s.io", "tasks", "ls", "-q"],
                            capture_output=True, text=True, check=False)
    return result.stdout.split() if result.returncode == 0 else []


def drain(state, pki):
    """Delete the pods of the real nodes and let their kubelets tear them down (network, mounts, netns).

    Called with the controllers stopped, so nothing recreates them.
    """
    nodes = state.get("real_nodes") or []
    for node in nodes:
        pods = api.request(state, pki, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s" % node["name"])
        for pod in pods["items"]:
            with contextlib.suppress(Exception):
                api.request(state, pki, "DELETE", "/api/v1/namespaces/%s/pods/%s?gracePeriodSeconds=0" % (
                    pod["metadata"]["namespace"], pod["metadata"]["name"]))
    running = [node for node in nodes if is_recorded_running(state, "kubelet-" + node["name"])]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_tasks(state, node) for node in running):
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
    for mount in cgroup_mounts():
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


def _remove_log_links():
    for link in glob.glob("/var/log/containers/*"):
        if os.path.islink(link) and os.readlink(link).startswith(SIM_DIR.rstrip("/") + "/"):
            os.unlink(link)


def stop(state):
    """Everything real_nodes.start made, in reverse (after drain): kubelets, containerds, then what they left."""
    nodes = state.get("real_nodes") or []
    for node in nodes:
        stop_process("kubelet-" + node["name"], state["processes"].get("kubelet-" + node["name"]), 15)
    for node in nodes:
        stop_process("containerd-" + node["name"], state["processes"].get("containerd-" + node["name"]), 15)
        _kill_shims(node)
    unmount_all(SIM_DIR)
    for node in nodes:
        _remove_netns_and_cni_cache(node)
        _remove_cgroup_root(node["cgroup_root"])
    _remove_log_links()
    real_nodes_network.network_down(state)
