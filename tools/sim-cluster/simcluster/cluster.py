"""The whole run brought up and down: the node list, `up`, `registry-up`, `apply-nodes` and `down`."""

import json
import os
import subprocess
import time

import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from simcluster import (
    builds,
    control_plane,
    guard,
    kwok_nodes,
    real_nodes,
    real_nodes_network,
    real_nodes_plan,
    real_nodes_stop,
    registry,
)
from simcluster.mounts import unmount_all
from simcluster.pki import ensure_pki, write_kubeconfig
from simcluster.state_dir import KUBECONFIG, SIM_DIR, load_state, log, save_state, stop_process


def node_groups():
    """$GKM_SIM_NODES's node groups; without it one control-plane node and $GKM_SIM_GPU_NODES GPU workers."""
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


def _ensure_host_network(state):
    """With real nodes asked for, the run's host address exists before anything binds it."""
    if split_node_groups()[1] and not state.get("network"):
        real_nodes_network.network_up(state)


def registry_up():
    """Only the registry (enough for extraction tests); print its address."""
    os.makedirs(SIM_DIR, exist_ok=True)
    state = load_state()
    _ensure_host_network(state)
    registry.start(state)
    print(state["registry"])


def up():
    """Start whatever is not running and wait until ready; lay out the nodes on a fresh start."""
    started = time.monotonic()
    os.makedirs(SIM_DIR, exist_ok=True)
    binaries = builds.binary_dir()
    state = load_state()
    # Saved first: a run counts as live for the guard routes while its state.json exists.
    save_state(state)
    guard.up()
    _ensure_host_network(state)
    pki = ensure_pki(state)
    state["apiserver"] = write_kubeconfig(state, pki)
    state["kubeconfig"] = KUBECONFIG
    save_state(state)
    registry.start(state)
    started_any = control_plane.start(state, binaries, pki)
    if started_any:
        # Nodes are only laid out on a fresh start: a running cluster may have been reshaped on purpose
        # (benchmarks, day-2 tests) and `up` must not undo that; `apply-nodes` reconciles explicitly.
        control_plane.ensure_default_storage_class(state, pki)
        groups, real_groups = split_node_groups()
        kwok_nodes.apply_nodes(state, pki, groups)
        # 180 s, as apply-nodes' 120 s and more: the test lanes start four clusters at once on two cores, and in
        # one run two of them waited over 60 s for kwok to report its nodes Ready.
        kwok_nodes.wait_ready(state, pki, groups, 180, control_plane.CONTROL_PLANE)
        if real_groups:
            real_nodes.start(state, pki, real_groups, binaries)
    elif real_nodes.any_stopped(state):
        # A real node's kubelet or containerd was killed (fault tests): start it again, which also advertises
        # its GPUs again (a kubelet starting on an existing node zeroes extended resources nothing manages).
        real_nodes.start(state, pki, [], binaries)
        started_any = True
    log("ready in %.1fs (%s); KUBECONFIG=%s" % (
        time.monotonic() - started, "started" if started_any else "already running", KUBECONFIG))


def apply_nodes():
    """kwok nodes only: real nodes are started by `up` and stopped by `down`."""
    state = load_state()
    pki = ensure_pki(state)
    groups = split_node_groups()[0]
    added, removed = kwok_nodes.apply_nodes(state, pki, groups)
    kwok_nodes.wait_ready(state, pki, groups, 120, control_plane.CONTROL_PLANE)
    print(json.dumps({"added": added, "removed": removed}))


def down():
    """Stop exactly the processes recorded in the state file and remove the state directory."""
    started = time.monotonic()
    state = load_state()
    if state.get("network"):
        pki = ensure_pki(state)
        # Controllers first, so the real nodes' pods, once deleted, are not made again.
        for name in ("kube-controller-manager", "kube-scheduler"):
            stop_process(name, state["processes"].get(name))
        # An API server that runs but cannot be reached (its host interface gone) has no pods to give: stopping the
        # kubelets and containerds then takes the pods down with them.
        if control_plane.apiserver_ready(state, pki):
            real_nodes_stop.drain(state, pki)
        real_nodes_stop.stop(state)
    for name in ["operator", "kyverno", "webhook", *reversed([*control_plane.CONTROL_PLANE, "registry"])]:
        # The API server's shutdown can hang for good with nothing left to serve; its data is about to go.
        stop_process(name, state["processes"].get(name), 5 if name == "kube-apiserver" else 15)
    if os.path.isdir(SIM_DIR):
        unmount_all(SIM_DIR)
        subprocess.run(["rm", "-rf", "--one-file-system", SIM_DIR], check=True)
    # After every process that could dial a fake address has stopped.
    guard.down()
    log("stopped in %.1fs; removed %s" % (time.monotonic() - started, SIM_DIR))
