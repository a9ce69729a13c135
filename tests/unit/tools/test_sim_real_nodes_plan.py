"""The real nodes' pure plan (tools/sim-cluster/simcluster/real_nodes_plan.py): names two runs cannot share, routes,
rules."""

import importlib.util
import ipaddress
import json
import os

import pytest
import yaml

from tests.helpers.paths import ROOT

_spec = importlib.util.spec_from_file_location(
    "real_nodes_plan", os.path.join(ROOT, "tools", "sim-cluster", "simcluster", "real_nodes_plan.py"))
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)


def run_names(sim_dir, octet, nodes=2):
    run = plan.run_id(sim_dir)
    networks = [plan.node_network(run, octet, index) for index in range(nodes)]
    return {
        "interfaces": {plan.host_interface(run), *(network["bridge"] for network in networks)},
        "chains": set(plan.chains(run).values()),
        "cgroups": {plan.cgroup_root(run, index) for index in range(nodes)},
        "cni": {network["cni_network"] for network in networks},
        "subnets": [ipaddress.ip_network(network["subnet"]) for network in networks]
        + [ipaddress.ip_network(plan.host_address(octet) + "/32")],
    }


def test_two_checkouts_share_no_name_and_no_address():
    first_dir, second_dir = "/work/a/.sim", "/work/b/.sim"
    first_octet = plan.pick_second_octet(set())
    # The second run sees the first one's host address and bridge routes and takes the next /16.
    second_octet = plan.pick_second_octet(plan.used_second_octets(
        "5: gkm%sh inet %s/32 scope global\n10.%d.1.0/24 dev gkm%sn0 proto kernel" % (
            plan.run_id(first_dir), plan.host_address(first_octet), first_octet, plan.run_id(first_dir))))
    first, second = run_names(first_dir, first_octet), run_names(second_dir, second_octet)
    assert plan.run_id(first_dir) != plan.run_id(second_dir)
    for kind in ("interfaces", "chains", "cgroups", "cni"):
        assert not first[kind] & second[kind], kind
    assert not any(a.overlaps(b) for a in first["subnets"] for b in second["subnets"])
    assert all(len(name) <= 15 for name in first["interfaces"] | second["interfaces"])


def test_run_id_is_stable_per_directory():
    assert plan.run_id("/work/a/.sim") == plan.run_id("/work/a/.sim/")
    assert len(plan.run_id("/work/a/.sim")) == 6


def test_second_octet_skips_used_and_reserved_ranges():
    used = plan.used_second_octets("inet 10.100.0.1/32\n10.101.3.0/24 dev x\ndefault via 192.0.2.1\n")
    assert used == {100, 101}
    assert plan.pick_second_octet(used) == 102
    assert plan.pick_second_octet(set(range(100, 150))) == 150
    with pytest.raises(RuntimeError, match=r"no free 10\.X"):
        plan.pick_second_octet(set(plan.PREFIX_RANGE))
    assert not {89, 96, 244} & set(plan.PREFIX_RANGE)  # kwok's node IP, the service range, kwok's pod range


def test_bridge_names_longer_than_the_kernel_allows_are_refused():
    with pytest.raises(ValueError, match="longer than"):
        plan.bridge("abcdef", 123456)


def test_pod_network_has_no_way_off_the_bridge():
    network = plan.node_network("abcdef", 120, 1)
    assert network == {"bridge": "gkmabcdefn1", "subnet": "10.120.2.0/24", "gateway": "10.120.2.1",
                       "cni_network": "gkm-abcdef-n1"}
    conf = json.loads(plan.cni_conflist(network, {"address": "10.120.0.1", "ipam_dir": "/x/ipam"}))
    bridge = conf["plugins"][0]
    assert [plugin["type"] for plugin in conf["plugins"]] == ["bridge"]
    assert bridge["ipMasq"] is False and bridge["isDefaultGateway"] is False and bridge["isGateway"] is True
    assert bridge["ipam"]["routes"] == [{"dst": "10.120.0.1/32", "gw": "10.120.2.1"},
                                        {"dst": "10.96.0.1/32", "gw": "10.120.2.1"}]
    assert bridge["ipam"]["dataDir"] == "/x/ipam"


def test_firewall_sends_only_the_service_ip_to_the_host_and_drops_forwarding_off_each_bridge():
    rules = plan.firewall_rules("abcdef", ["gkmabcdefn0", "gkmabcdefn1"], "10.120.0.1", 6443)
    (nat, prerouting, service, dnat), (filt, forward, fwd_chain, drops) = rules
    assert (nat, prerouting, service) == ("nat", "PREROUTING", "GKM-abcdef-SVC")
    assert dnat == [["-i", "gkmabcdefn+", "-d", "10.96.0.1/32", "-p", "tcp", "--dport", "443",
                     "-j", "DNAT", "--to-destination", "10.120.0.1:6443"]]
    assert (filt, forward, fwd_chain) == ("filter", "FORWARD", "GKM-abcdef-FWD")
    assert drops == [["-i", "gkmabcdefn0", "!", "-o", "gkmabcdefn0", "-j", "DROP"],
                     ["-i", "gkmabcdefn1", "!", "-o", "gkmabcdefn1", "-j", "DROP"]]


def test_containerd_config_keeps_everything_under_the_node_directory():
    config = plan.containerd_config("/s/nodes/n/containerd", "10.120.0.1:5000/gkm/pause@sha256:ab", "/b/runc")
    assert config.startswith("version = 3\n")
    assert "restrict_oom_score_adj = true" in config
    assert 'sandbox = "10.120.0.1:5000/gkm/pause@sha256:ab"' in config
    assert 'config_path = "/s/nodes/n/containerd/certs.d"' in config
    assert 'BinaryName = "/b/runc"' in config
    paths = [line.split('"')[1] for line in config.splitlines() if '"/' in line]
    assert paths and all(path.startswith("/s/nodes/n/containerd/") or path in ("/usr/lib/cni", "/b/runc")
                         for path in paths)


def test_containerd_config_uses_the_split_cri_plugins_of_version_3():
    config = plan.containerd_config("/d", "pause", "/b/runc")
    sections = [line for line in config.splitlines() if line.startswith("[")]
    assert "io.containerd.grpc.v1.cri" not in config
    assert "[plugins.'io.containerd.cri.v1.images'.pinned_images]" in sections
    assert "[plugins.'io.containerd.cri.v1.runtime'.cni]" in sections


def test_image_volumes_are_on_for_the_api_server_and_the_kubelet():
    assert plan.feature_gates_flag() == "ImageVolume=true"
    node = {"kubelet_port": 1, "healthz_port": 2, "containerd_socket": "/s", "cgroup_root": "/g", "dir": "/d",
            "serving_cert": "c", "serving_key": "k", "taints": []}
    assert yaml.safe_load(plan.kubelet_config(node, "10.1.0.1", {"ca.crt": "ca"}))["featureGates"] == {
        "ImageVolume": True}


def test_default_real_groups_alternate_vendors():
    assert plan.default_real_groups(0) == []
    assert [(g["name"], g["count"], g["vendor"]) for g in plan.default_real_groups(3)] == [
        ("gkm-real-amd", 2, "amd"), ("gkm-real-nvidia", 1, "nvidia")]
    kwok, real = plan.split_groups([{"name": "a"}, {"name": "b", "real": True}], 1)
    assert kwok == [{"name": "a"}] and [group["name"] for group in real] == ["b", "gkm-real-amd"]


def test_real_node_drops_the_kwok_marks_and_keeps_the_gpu_look():
    kwok_node = {"metadata": {"name": "n", "labels": {"gkm.io/sim-node": "true", "type": "kwok", "x": "1"}},
                 "spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
                 "status": {"capacity": {"cpu": "32", "amd.com/gpu": "2"}}}
    node = plan.real_node_object(kwok_node, "gkm.io/sim-node", "gkm.io/real-node")
    assert node == {"name": "n", "labels": {"x": "1", "gkm.io/real-node": "true"},
                    "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
                    "gpu_capacity": {"amd.com/gpu": "2"}}
