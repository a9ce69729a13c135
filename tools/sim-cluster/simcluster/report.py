"""What `status` and `nodes` print: the run's processes, ports, network and guard routes; its GPU nodes."""

import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    REAL_NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from simcluster import api, guard, kwok_nodes
from simcluster.control_plane import CONTROL_PLANE
from simcluster.pki import ensure_pki
from simcluster.state_dir import KUBECONFIG, is_recorded_running, load_state


def status():
    state = load_state()
    real = [prefix + node["name"] for node in state.get("real_nodes") or [] for prefix in ("containerd-", "kubelet-")]
    for name in [*CONTROL_PLANE, "registry", "webhook", "kyverno", "operator", *real]:
        print("%-24s %s" % (name, "running pid %d" % state["processes"][name]["pid"]
                            if is_recorded_running(state, name) else "stopped"))
    print("ports: %s" % json.dumps(state.get("ports", {}), sort_keys=True))
    if state.get("network"):
        print("host address: %s on %s" % (state["host_address"], state["network"]["host_interface"]))
    for node in state.get("real_nodes") or []:
        print("real node %s: bridge %s subnet %s kubelet port %d" % (
            node["name"], node["bridge"], node["subnet"], node["kubelet_port"]))
    for line in guard.status_lines():
        print(line)
    print("kubeconfig: %s" % state.get("kubeconfig", "-"))


def nodes():
    """The GPU nodes (kwok and real) with capacity, labels and taints, as a table."""
    state = load_state()
    pki = ensure_pki(state)
    real = api.request(state, pki, "GET", "/api/v1/nodes?labelSelector=%s%%3Dtrue" % REAL_NODE_LABEL)
    rows = [dict(gpu_nodes.node_summary(node), kind=kind) for kind, found in (
        ("kwok", kwok_nodes.list_nodes(state, pki)), ("real", real["items"])) for node in found]
    print("Simulated cluster: %s (KUBECONFIG=%s), registry %s" % (state["apiserver"], KUBECONFIG, state["registry"]))
    columns = ["name", "kind", "gpus", "backend", "arch", "warp_size", "taints"]
    widths = {column: max([len(column)] + [len(row[column]) for row in rows]) for column in columns}
    print("  ".join(column.upper().ljust(widths[column]) for column in columns))
    for row in rows:
        print("  ".join(row[column].ljust(widths[column]) for column in columns))
