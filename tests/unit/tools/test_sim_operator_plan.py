"""The simulated cluster's local operator (tools/sim-cluster/simcluster/operator_plan.py): the kopf controller's own
entry point with its Lease in the operator's namespace, the checkout importable, the options the controller accepts."""

import importlib.util
import json
import os

import pytest

from tests.helpers.paths import ROOT

_spec = importlib.util.spec_from_file_location(
    "operator_plan", os.path.join(ROOT, "tools", "sim-cluster", "simcluster", "operator_plan.py"))
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_the_local_operator_is_the_controller_with_its_lease_in_the_operators_namespace():
    argv = plan.argv("/venv/bin/python", "/sim/kubeconfig", plan.NAMESPACE, "registry/tools:1", {"wait": True})
    assert argv[:3] == ["/venv/bin/python", "-m", "controller.gkm_controller.main"]
    assert flag(argv, "--kubeconfig") == "/sim/kubeconfig"
    assert flag(argv, "--namespace") == "gkm-system"
    assert flag(argv, "--tools-image") == "registry/tools:1"
    assert json.loads(flag(argv, "--options")) == {"wait": True}
    # No port unless asked: the local operator binds nothing.
    assert not {"--probe-port", "--identity", "--verbose", "--resync-seconds"} & set(argv)
    tested = plan.argv("py", "k", "ns", "t", {}, identity="second", probe_port=40003, verbose=True, resync_seconds=3)
    assert flag(tested, "--identity") == "second" and flag(tested, "--probe-port") == "40003" and "--verbose" in tested
    assert flag(tested, "--resync-seconds") == "3"


def test_the_checkouts_controller_and_collection_are_importable():
    path = plan.environment({"PATH": "/usr/bin", "PYTHONPATH": "/extra"}, ROOT)["PYTHONPATH"].split(os.pathsep)
    assert path == [ROOT, os.path.join(ROOT, ".cache", "collections"), "/extra"]
    assert plan.environment({}, ROOT)["PYTHONPATH"].split(os.pathsep) == path[:2]


def test_the_given_options_win_over_the_sims_and_the_controller_accepts_them():
    main = pytest.importorskip("controller.gkm_controller.main")  # kopf: Python 3.11 and later
    options = plan.options({"wait_timeout": 900, "system_namespace": "gkm-system"})
    assert options == {"registry_plain_http": True, "wait_timeout": 900, "system_namespace": "gkm-system"}
    assert plan.options({"registry_plain_http": False})["registry_plain_http"] is False
    assert main.distribution_options(options, "t")["registry_plain_http"] is True
