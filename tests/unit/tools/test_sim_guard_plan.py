"""The guard routes' pure plan (tools/sim-cluster/simcluster/guard_plan.py): which ranges, when to refuse, what a run
adds and what the last one out removes."""

import importlib.util
import ipaddress
import os

import pytest

from tests.helpers.paths import ROOT

TOOLS = os.path.join(ROOT, "tools", "sim-cluster", "simcluster")


def _load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(TOOLS, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plan = _load("guard_plan")
real_nodes_plan = _load("real_nodes_plan")

# `ip -4 -o route show table all` of a machine with no run up, then with the three guard routes.
MACHINE = """default via 192.0.2.1 dev eth0 \\
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2 \\
local 127.0.0.0/8 dev lo table local proto kernel scope host src 127.0.0.1 \\
broadcast 192.0.2.255 dev eth0 table local proto kernel scope link src 192.0.2.2 \\
"""
GUARDED = MACHINE + "unreachable 10.96.0.0/16 \nunreachable 10.244.0.0/16 \nunreachable 10.89.0.0/16 \n"


def test_the_ranges_cover_every_fake_address_the_cluster_hands_out():
    ranges = [ipaddress.ip_network(guarded) for guarded in plan.GUARD_RANGES]
    for address in (plan.KWOK_NODE_IP, real_nodes_plan.SERVICE_IP, "10.244.3.7", "10.96.255.254"):
        assert any(ipaddress.ip_address(address) in guarded for guarded in ranges), address
    assert ipaddress.ip_network(plan.SERVICE_CIDR) in ranges and ipaddress.ip_network(plan.KWOK_POD_CIDR) in ranges


def test_no_range_takes_a_whole_private_block_or_a_real_node_run_subnet():
    """The machine's resolver or network may live in 10/8 (here 10.255.255.53); real-node runs take 10.100-10.199."""
    for guarded in map(ipaddress.ip_network, plan.GUARD_RANGES):
        assert guarded.prefixlen >= 16
        for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"):
            assert not ipaddress.ip_network(block).subnet_of(guarded)
        assert guarded.network_address.packed[1] not in real_nodes_plan.PREFIX_RANGE
        assert ipaddress.ip_address("10.255.255.53") not in guarded


def test_parse_routes_reads_type_destination_devices_and_table():
    routes = plan.parse_routes(MACHINE + "unreachable 10.96.0.0/16 \n"
                               "10.89.0.0/16 proto static \\\tnexthop via 192.0.2.7 dev eth0 weight 1 "
                               "\\\tnexthop via 192.0.2.8 dev eth1 weight 1\n")
    assert routes[0] == {"type": "unicast", "dst": ipaddress.ip_network("0.0.0.0/0"), "devices": ["eth0"],
                         "table": "main"}
    assert routes[2]["type"] == "local" and routes[2]["table"] == "local"
    assert routes[4] == {"type": "unreachable", "dst": ipaddress.ip_network("10.96.0.0/16"), "devices": [],
                         "table": "main"}
    assert routes[5]["devices"] == ["eth0", "eth1"]


def test_a_machine_with_only_a_default_route_needs_all_three_and_has_no_conflict():
    routes = plan.parse_routes(MACHINE)
    assert plan.conflicts(routes, ["10.255.255.53"]) == []
    assert plan.missing(routes) == list(plan.GUARD_RANGES)
    assert plan.missing(plan.parse_routes(GUARDED)) == []


def test_a_wider_route_is_no_conflict_the_guard_is_narrower():
    routes = plan.parse_routes(MACHINE + "10.0.0.0/8 via 192.0.2.9 dev eth0 \n")
    assert plan.conflicts(routes, []) == []


@pytest.mark.parametrize("line, expected", [
    ("10.96.0.0/16 via 192.0.2.9 dev eth0", "10.96.0.0/16: this machine routes 10.96.0.0/16 dev eth0 (table main)"),
    ("10.244.7.0/24 dev cni0 proto kernel scope link src 10.244.7.1",
     "10.244.0.0/16: this machine routes 10.244.7.0/24 dev cni0 (table main)"),
    ("local 10.89.0.1 dev lo table local proto kernel scope host src 10.89.0.1",
     "10.89.0.0/16: this machine routes 10.89.0.1/32 dev lo (table local)"),
    ("10.96.0.0/16 dev eth1 table 100", "10.96.0.0/16: this machine routes 10.96.0.0/16 dev eth1 (table 100)"),
])
def test_a_range_the_machine_routes_to_an_interface_is_refused(line, expected):
    assert plan.conflicts(plan.parse_routes(MACHINE + line + "\n"), []) == [expected]


def test_a_resolver_inside_a_range_is_refused():
    """A machine that is itself a Kubernetes pod asks 10.96.0.10 for names: routing that unreachable would cut it."""
    servers = plan.nameservers("search example\nnameserver 10.96.0.10\nnameserver fd00::53\noptions ndots:5\n")
    assert servers == ["10.96.0.10"]
    assert plan.conflicts(plan.parse_routes(MACHINE), servers) == [
        "10.96.0.0/16: this machine's resolver 10.96.0.10 is in it"]


def test_a_reject_route_already_there_is_kept_not_added_again():
    """Another run's guard, or the machine's own: either way the range is guarded and not a conflict."""
    routes = plan.parse_routes(MACHINE + "blackhole 10.244.0.0/16 \n")
    assert plan.conflicts(routes, []) == []
    assert plan.missing(routes) == [plan.SERVICE_CIDR, "10.89.0.0/16"]


def test_a_guard_route_in_another_table_does_not_count():
    routes = plan.parse_routes(MACHINE + "unreachable 10.96.0.0/16 table 7 \n")
    assert plan.SERVICE_CIDR in plan.missing(routes)


def test_only_the_last_run_out_removes_and_only_what_runs_added():
    added = ["10.89.0.0/16", "10.96.0.0/16"]
    assert plan.to_remove(added, other_live_runs=["abc123"]) == []
    assert plan.to_remove(added, other_live_runs=[]) == ["10.89.0.0/16", "10.96.0.0/16"]
    # The machine had 10.244.0.0/16 unreachable before any run: it was never added, so never removed.
    assert "10.244.0.0/16" not in plan.to_remove(added, [])


def test_status_says_who_made_each_route():
    routes = plan.parse_routes(MACHINE + "unreachable 10.96.0.0/16 \nprohibit 10.244.0.0/16 \n")
    assert plan.status_lines(routes, ["10.96.0.0/16"]) == [
        "guard route 10.96.0.0/16: unreachable (added by the simulated clusters)",
        "guard route 10.244.0.0/16: prohibit (the machine's own)",
        "guard route 10.89.0.0/16: missing (a packet to it would leave this machine)",
    ]
