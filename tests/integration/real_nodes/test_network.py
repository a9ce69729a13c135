"""Pods on the real nodes can reach only this machine: checked from the configuration, never by connecting out.

Each assertion was seen failing once with the property weakened by hand (a default route added in a pod's
network namespace, a MASQUERADE rule for the run's range, the FORWARD jump removed).
"""

import ipaddress
import os
import subprocess
import time
import uuid

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    REAL_NODE_LABEL,
)
from tests.helpers.sim import sim_control

GPU_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def _run(*argv):
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def run_range(sim):
    return ipaddress.ip_network("10.%d.0.0/16" % sim.state["network"]["octet"])


def pod_pid(sim, node, container_id):
    """The host pid of a container (containerd's task list), to enter its network namespace from the host."""
    ctr = os.path.join(sim.state["containerd_bin"], "ctr")
    for line in _run(ctr, "--address", node["containerd_socket"], "-n", "k8s.io", "tasks", "ls").splitlines()[1:]:
        task, pid = line.split()[:2]
        if task == container_id:
            return int(pid)
    raise AssertionError("no task %s in %s's containerd" % (container_id, node["name"]))


@pytest.fixture(scope="module")
def pods_on_real_nodes(kube, sim, real_nodes):
    """One pause pod per real node (the image containerd uses for sandboxes); {node name: host pid}."""
    core = client.CoreV1Api(kube)
    namespace = "t-real-nodes-network-%s" % uuid.uuid4().hex[:5]
    core.create_namespace({"metadata": {"name": namespace, "labels": {"gkm.io/test": "true"}}})
    for node in real_nodes:
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": node["name"]},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node["name"], REAL_NODE_LABEL: "true"},
                     "tolerations": [GPU_TOLERATION], "automountServiceAccountToken": False,
                     "containers": [{"name": "main", "image": sim.state["pause_image"]}]}})
    deadline = time.monotonic() + 90
    pids = {}
    while time.monotonic() < deadline and len(pids) < len(real_nodes):
        for node in real_nodes:
            pod = core.read_namespaced_pod(node["name"], namespace)
            statuses = pod.status.container_statuses or []
            if statuses and statuses[0].state.running:
                pids[node["name"]] = pod_pid(sim, node, statuses[0].container_id.split("://", 1)[1])
        time.sleep(0.5)
    assert len(pids) == len(real_nodes), "pods not Running on every real node in 90 s"
    yield pids
    core.delete_namespace(namespace)


def test_pods_have_only_their_subnet_the_host_address_and_the_service_ip(sim, real_nodes, pods_on_real_nodes):
    host = sim.state["host_address"]
    for node in real_nodes:
        pid = pods_on_real_nodes[node["name"]]
        routes = sorted(" ".join(line.split()[:5]) for line in _run(
            "nsenter", "-t", str(pid), "-n", "ip", "-4", "route", "show", "table", "all").splitlines()
            if not line.startswith(("local ", "broadcast ")))
        assert routes == sorted([
            "10.96.0.1 via %s dev eth0" % node["gateway"],
            "%s via %s dev eth0" % (host, node["gateway"]),
            "%s dev eth0 proto kernel" % node["subnet"],
        ]), node["name"]
        ipv6 = _run("nsenter", "-t", str(pid), "-n", "ip", "-6", "route", "show", "table", "all")
        assert not [line for line in ipv6.splitlines() if line.startswith("default")], ipv6
        assert ipaddress.ip_network(node["subnet"]).subnet_of(run_range(sim))


def test_nothing_masquerades_or_translates_the_pods_source(sim, real_nodes):
    """A MASQUERADE or SNAT rule that could match a pod's packets would let them leave as the host."""
    pods = run_range(sim)
    for line in _run("iptables-save", "-t", "nat").splitlines():
        if not line.startswith("-A") or not any(target in line for target in ("MASQUERADE", "SNAT")):
            continue
        words = line.split()
        sources = [ipaddress.ip_network(words[i + 1]) for i, word in enumerate(words) if word in ("-s", "--source")]
        negated = any(words[i - 1] == "!" for i, word in enumerate(words) if word in ("-s", "--source"))
        assert sources and not negated and not any(source.overlaps(pods) for source in sources), line


def test_forwarding_off_every_pod_bridge_is_dropped_first(sim, real_nodes):
    chain = "GKM-%s-FWD" % sim.state["network"]["run"]
    rules = _run("iptables-save", "-t", "filter").splitlines()
    forward = [line for line in rules if line.startswith("-A FORWARD ")]
    # First in FORWARD: nothing before it can accept a pod's packet (other runs' chains only drop).
    first_foreign = next((i for i, line in enumerate(forward) if not line.startswith("-A FORWARD -j GKM-")), None)
    assert "-A FORWARD -j %s" % chain in forward[:first_foreign]
    own = [line for line in rules if line.startswith("-A %s " % chain)]
    for node in real_nodes:
        assert "-A %s -i %s ! -o %s -j DROP" % (chain, node["bridge"], node["bridge"]) in own


def test_service_ip_goes_only_to_the_run_api_server(sim, real_nodes):
    chain = "GKM-%s-SVC" % sim.state["network"]["run"]
    api_port = sim.state["ports"]["apiserver"]
    rules = [line for line in _run("iptables-save", "-t", "nat").splitlines() if line.startswith("-A %s " % chain)]
    assert rules == ["-A %s -d 10.96.0.1/32 -i gkm%sn+ -p tcp -m tcp --dport 443 -j DNAT --to-destination %s:%d"
                     % (chain, sim.state["network"]["run"], sim.state["host_address"], api_port)]


def test_containerd_pulls_from_nowhere_but_the_local_registry(sim, real_nodes):
    processes = sim_control.load_state()["processes"]  # fault tests may have restarted containerd since
    for node in real_nodes:
        pid = processes["containerd-" + node["name"]]["pid"]
        with open("/proc/%d/environ" % pid, "rb") as handle:
            environment = dict(item.split("=", 1) for item in handle.read().decode().split("\0") if "=" in item)
        assert environment["HTTPS_PROXY"] == environment["HTTP_PROXY"] == "http://127.0.0.1:9"
        assert environment["NO_PROXY"] == sim.state["registry"].split(":")[0] == sim.state["host_address"]
        assert os.path.exists(os.path.join(node["dir"], "containerd", "certs.d", sim.state["registry"], "hosts.toml"))
