"""Real nodes of the simulated cluster: a kubelet with its own containerd, runc and CNI bridge per node.

containerd (2.x, so pods can mount images with `volumes[].image`) and runc come from tools/containerd/build.sh.

Needs root. Everything the run creates outside its state directory is recorded in state.json (interfaces,
chains, cgroup roots) or recognised by the run id, and `stop` (real_nodes_stop.py) removes exactly that. The host
network is in real_nodes_network.py, the machine's shared places in host_runs.py.
"""

import os
import urllib.error

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    REAL_NODE_LABEL,
    SIM_NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from simcluster import api, builds, real_nodes_network
from simcluster import real_nodes_plan as plan
from simcluster.mounts import cgroup_mounts
from simcluster.state_dir import (
    SIM_DIR,
    free_port,
    is_recorded_running,
    save_state,
    start_process,
    wait_for,
    write_file,
)


def _node_record(state, spec, index):
    network = state["network"]
    directory = os.path.join(SIM_DIR, "nodes", spec["name"])
    # The deepest unix socket: the kubelet's device plugin socket under its root dir.
    socket = os.path.join(directory, "kubelet", "device-plugins", "kubelet.sock")
    if len(socket) > plan.MAX_SOCKET_PATH:
        raise SystemExit("sim: %s is too long a path for the real nodes' unix sockets (%d > %d characters): use a "
                         "shorter GKM_SIM_DIR" % (SIM_DIR, len(socket), plan.MAX_SOCKET_PATH))
    return {
        **spec, **plan.node_network(network["run"], network["octet"], index), "index": index, "dir": directory,
        "containerd_socket": os.path.join(directory, "containerd", "containerd.sock"),
        "kubelet_root": os.path.join(directory, "kubelet"),
        "kubelet_port": free_port(), "healthz_port": free_port(),
        "cgroup_root": plan.cgroup_root(network["run"], index),
        "serving_cert": os.path.join(directory, "pki", "kubelet.crt"),
        "serving_key": os.path.join(directory, "pki", "kubelet.key"),
    }


def _make_cgroup_root(root):
    """The kubelet wants its cgroup root under every hierarchy; a new cpuset starts empty, so copy the parent's."""
    for mount in cgroup_mounts():
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
    return [plan.real_node_object(node, SIM_NODE_LABEL, REAL_NODE_LABEL)
            for node in gpu_nodes.render_nodes(groups)]


def _built_once(state, key, build):
    """state[key], built and recorded on the state's first use: the pause image, containerd's directory."""
    if key not in state:
        state[key] = build()
        save_state(state)
    return state[key]


def _write_node_files(state, node, pki, sandbox_image, containerd_bin):
    directory = node["dir"]
    with open(pki["ca.crt"]) as handle:
        ca_cert = handle.read()
    with open(pki["ca.key"]) as handle:
        ca_key = handle.read()
    host = state["host_address"]
    client_cert, client_key = tls.new_signed_cert(ca_cert, ca_key, "system:node:%s" % node["name"],
                                                  organization="system:nodes", server=False, client=True)
    serving_cert, serving_key = tls.new_signed_cert(ca_cert, ca_key, node["name"], dns_names=[node["name"]],
                                                    ip_addresses=[host])
    files = {
        "pki/client.crt": client_cert, "pki/client.key": client_key,
        "pki/kubelet.crt": serving_cert, "pki/kubelet.key": serving_key,
        "kubeconfig": plan.kubeconfig(state["apiserver"], pki["ca.crt"], os.path.join(directory, "pki/client.crt"),
                                      os.path.join(directory, "pki/client.key"), "system:node:%s" % node["name"]),
        "kubelet.yaml": plan.kubelet_config(node, host, pki),
        "containerd/config.toml": plan.containerd_config(os.path.join(directory, "containerd"), sandbox_image,
                                                         os.path.join(containerd_bin, "runc")),
        "containerd/certs.d/%s/hosts.toml" % state["registry"]: plan.registry_hosts_toml(state["registry"]),
        "containerd/cni/10-gkm.conflist": plan.cni_conflist(node, {
            "address": host, "ipam_dir": os.path.join(directory, "ipam")}),
    }
    for name, content in files.items():
        write_file(os.path.join(directory, name), content, 0o600 if name.endswith(".key") else 0o644)


def start(state, pki, groups, binaries):
    """Start containerd and the kubelet of every real node (those of groups, and those already in the state
    whose processes stopped), then make the nodes look like GPU nodes."""
    host = state["host_address"]
    nodes = state.setdefault("real_nodes", [])
    known = {node["name"] for node in nodes}
    # Kubelets authenticate as system:node:<name> in group system:nodes; RBAC is the only authorizer.
    api.create_if_missing(state, pki, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "gkm-sim-nodes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]})
    sandbox_image = _built_once(state, "pause_image", lambda: builds.push_image("pause", state["registry"]))
    containerd_bin = _built_once(state, "containerd_bin", builds.containerd_dir)
    for spec in _specs(groups):
        if spec["name"] not in known:
            nodes.append(_node_record(state, spec, len(nodes)))
    real_nodes_network.add_bridges(state, nodes)
    # No proxy for the local registry; every other registry goes to a closed loopback port (plan.DEAD_PROXY).
    # containerd looks its shim up in PATH before its own directory: ours first, not a system containerd's.
    environment = dict(os.environ, HTTP_PROXY=plan.DEAD_PROXY, HTTPS_PROXY=plan.DEAD_PROXY,
                       NO_PROXY=state["registry"].split(":")[0],
                       PATH="%s:%s" % (containerd_bin, os.environ.get("PATH", os.defpath)))
    for node in nodes:
        name = node["name"]
        if not is_recorded_running(state, "containerd-" + name):
            _make_cgroup_root(node["cgroup_root"])
            _write_node_files(state, node, pki, sandbox_image, containerd_bin)
            start_process(state, "containerd-" + name, [
                os.path.join(containerd_bin, "containerd"), "--config",
                os.path.join(node["dir"], "containerd", "config.toml")], environment)
            wait_for("containerd of %s" % name, lambda node=node: os.path.exists(node["containerd_socket"]), 30)
        if not is_recorded_running(state, "kubelet-" + name):
            labels = ",".join("%s=%s" % item for item in sorted(node["labels"].items())
                              if "kubernetes.io" not in item[0])
            start_process(state, "kubelet-" + name, [
                os.path.join(binaries, "kubelet"), "--config", os.path.join(node["dir"], "kubelet.yaml"),
                "--kubeconfig", os.path.join(node["dir"], "kubeconfig"), "--root-dir", node["kubelet_root"],
                "--hostname-override", name, "--node-ip", host, "--node-labels", labels, "--v", "1"], environment)
    for node in nodes:
        wait_for("node %s registered" % node["name"], lambda node=node: _node(state, pki, node["name"]) is not None,
                 60)
        api.request(state, pki, "PATCH", "/api/v1/nodes/%s" % node["name"], {"metadata": {"labels": node["labels"]}},
                    "application/merge-patch+json")
        api.request(state, pki, "PATCH", "/api/v1/nodes/%s/status" % node["name"], {"status": {
            "capacity": node["gpu_capacity"], "allocatable": node["gpu_capacity"]}}, "application/merge-patch+json")
    for node in nodes:
        wait_for("node %s Ready and schedulable" % node["name"],
                 lambda node=node: _schedulable(_node(state, pki, node["name"])), 90)


def any_stopped(state):
    return any(not is_recorded_running(state, prefix + node["name"])
               for node in state.get("real_nodes") or [] for prefix in ("containerd-", "kubelet-"))


def _node(state, pki, name):
    try:
        return api.request(state, pki, "GET", "/api/v1/nodes/%s" % name)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def _schedulable(node):
    """Ready, and the node lifecycle controller has lifted its not-ready taint: pods can be scheduled there."""
    return bool(node) and any(c["type"] == "Ready" and c["status"] == "True"
                              for c in node.get("status", {}).get("conditions") or []) and not any(
        t["key"] == "node.kubernetes.io/not-ready" for t in node.get("spec", {}).get("taints") or [])
