"""The real nodes' host network: the run's host interface and address, the nodes' bridges and the run's own
iptables chains (names and rules in real_nodes_plan.py). Everything made is recorded in state.json "network"."""

import os
import subprocess

from simcluster import host_runs
from simcluster import real_nodes_plan as plan
from simcluster.state_dir import SIM_DIR, is_recorded_running, log, save_state


def _ip(*argv, check=True):
    return subprocess.run(["ip", *argv], check=check, capture_output=True, text=True).stdout


def _iptables(*argv, check=True):
    return subprocess.run(["iptables", "-w", *argv], check=check, capture_output=True, text=True)


def network_up(state):
    """The run's host interface with its own 10.X.0.1/32: the registry and the API server bind it."""
    if os.geteuid() != 0:
        raise SystemExit("sim: real nodes need root (their own containerd, bridges and iptables chains); "
                         "run as root or set GKM_SIM_REAL_NODES=0")
    bound = [name for name in ("registry", "kube-apiserver") if is_recorded_running(state, name)]
    if bound:
        raise SystemExit("sim: %s already run(s) on 127.0.0.1 without real nodes, where pods cannot reach them: "
                         "`sim.py down` first, or set GKM_SIM_REAL_NODES=0" % " and ".join(bound))
    run_id = plan.run_id(SIM_DIR)
    with host_runs.host_lock():
        used = plan.used_second_octets(_ip("-4", "-o", "addr") + _ip("-4", "route", "show", "table", "all"))
        octet = plan.pick_second_octet(used)
        state["network"] = {"run": run_id, "octet": octet, "host_interface": plan.host_interface(run_id),
                            "bridges": [], "chains": []}
        state["host_address"] = plan.host_address(octet)
        save_state(state)
        host_runs.join_host(run_id)
        interface = state["network"]["host_interface"]
        _ip("link", "add", interface, "type", "bridge")
        _ip("addr", "add", "%s/32" % state["host_address"], "dev", interface)
        _ip("link", "set", interface, "up")
    log("host address %s on %s" % (state["host_address"], interface))


def add_bridges(state, nodes):
    """Each node's bridge, unless it exists, and the firewall that goes with the set of bridges."""
    state["network"]["bridges"] = [node["bridge"] for node in nodes]
    save_state(state)
    for node in nodes:
        if _ip("link", "show", node["bridge"], check=False) == "":
            _ip("link", "add", node["bridge"], "type", "bridge")
            _ip("link", "set", node["bridge"], "up")
    _install_firewall(state, int(state["apiserver"].rsplit(":", 1)[1]))


def _install_firewall(state, api_port):
    network = state["network"]
    for table, parent, chain, rules in plan.firewall_rules(
            network["run"], network["bridges"], state["host_address"], api_port):
        if _iptables("-t", table, "-N", chain, check=False).returncode == 0:
            network["chains"].append([table, parent, chain])
            save_state(state)
        _iptables("-t", table, "-F", chain)
        for rule in rules:
            _iptables("-t", table, "-A", chain, *rule)
        if _iptables("-t", table, "-C", parent, "-j", chain, check=False).returncode != 0:
            _iptables("-t", table, "-I", parent, "1", "-j", chain)


def network_down(state):
    network = state.get("network")
    if not network:
        return
    for table, parent, chain in network["chains"]:
        while _iptables("-t", table, "-D", parent, "-j", chain, check=False).returncode == 0:
            pass
        _iptables("-t", table, "-F", chain, check=False)
        _iptables("-t", table, "-X", chain, check=False)
    for interface in [*network["bridges"], network["host_interface"]]:
        _ip("link", "del", interface, check=False)
    host_runs.leave_host(network["run"])
