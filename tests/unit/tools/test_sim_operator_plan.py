"""The simulated cluster's operator command line (tools/sim-cluster/simcluster/operator_plan.py): loopback only,
leader election on, our reconcile's owner references and status left alone."""

import importlib.util
import os

from tests.helpers.paths import ROOT

_spec = importlib.util.spec_from_file_location(
    "operator_plan", os.path.join(ROOT, "tools", "sim-cluster", "simcluster", "operator_plan.py"))
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)

PORTS = {"metrics": 40002, "health": 40003}


def test_every_server_of_the_operator_binds_loopback_on_its_own_ports():
    argv = plan.argv("/bin/ansible-operator", ROOT, "/tmp/vars.json", PORTS)
    assert argv[argv.index("--metrics-bind-address") + 1] == "127.0.0.1:40002"
    assert argv[argv.index("--health-probe-bind-address") + 1] == "127.0.0.1:40003"
    # The engine's proxy always binds localhost, and its runs' kubeconfig names port 8888 whatever the flag says.
    assert argv[argv.index("--proxy-port") + 1] == "8888"


def test_leader_election_is_on_and_owner_references_are_ours():
    argv = plan.argv("/bin/ansible-operator", ROOT, "/tmp/vars.json", PORTS)
    assert "--leader-elect" in argv
    assert argv[argv.index("--leader-election-namespace") + 1] == plan.NAMESPACE
    assert "--inject-owner-ref=false" in argv
    assert argv[argv.index("--ansible-args") + 1] == "-e @/tmp/vars.json"


def test_the_runs_use_the_checkouts_collection_and_the_venvs_python():
    environment = plan.environment({"PATH": "/usr/bin"}, ROOT, "/venv/bin", "/sim/kubeconfig")
    assert environment["PATH"].split(os.pathsep)[0] == "/venv/bin"
    assert environment["ANSIBLE_COLLECTIONS_PATH"] == os.path.join(ROOT, ".cache", "collections")
    assert environment["ANSIBLE_PYTHON_INTERPRETER"] == "/venv/bin/python"
    assert environment["KUBECONFIG"] == "/sim/kubeconfig"
    assert environment["MAX_CONCURRENT_RECONCILES_GKMCACHE_GKM_IO"] == str(plan.CACHE_CONCURRENCY)


def test_the_playbooks_caches_options_win_over_the_sim_defaults():
    options = plan.extra_vars("registry/tools:1", "/sim/kubeconfig",
                              {"caches_host_path_root": "/sim/node-disk", "caches_wait": False})
    # The runs' modules reach the API server itself, not the engine's caching proxy.
    assert options["caches_kubeconfig"] == "/sim/kubeconfig"
    assert options["caches_extract_image"] == "registry/tools:1"
    assert options["caches_host_path_root"] == "/sim/node-disk"
    assert options["caches_wait"] is False
    assert options["caches_registry_plain_http"] is True
