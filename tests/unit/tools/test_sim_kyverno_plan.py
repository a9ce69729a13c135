"""The simulated cluster's Kyverno command line (tools/sim-cluster/simcluster/kyverno_plan.py): it listens only where
told."""

import importlib.util
import os

from tests.helpers.paths import ROOT

_spec = importlib.util.spec_from_file_location(
    "kyverno_plan", os.path.join(ROOT, "tools", "sim-cluster", "simcluster", "kyverno_plan.py"))
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)


def options(argv):
    """--flag value pairs and bare --flags of an argv, as a dict."""
    found, index = {}, 1
    while index < len(argv):
        flag = argv[index]
        if "=" in flag:
            name, value = flag.split("=", 1)
            found[name] = value
        elif index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            found[flag] = argv[index + 1]
            index += 1
        else:
            found[flag] = True
        index += 1
    return found


def test_the_webhook_binds_the_given_address_and_registers_it():
    found = options(plan.argv("/bin/kyverno", "/sim/kubeconfig", "127.0.0.1", 40123, 40124))
    assert found["--webhookServerHost"] == "127.0.0.1" and found["--webhookServerPort"] == "40123"
    assert found["--metricsHost"] == "127.0.0.1" and found["--metricsPort"] == "40124"
    assert found["--serverIP"] == "127.0.0.1:40123" and found["--kubeconfig"] == "/sim/kubeconfig"


def test_no_other_listener_and_the_plain_http_registry_is_allowed():
    found = options(plan.argv("/bin/kyverno", "/k", "10.1.2.3", 1, 2))
    assert found["--controllerRuntimeMetricsAddress"] == "0" and found["--metricsHost"] == "10.1.2.3"
    assert found["--allowInsecureRegistry"] is True
    assert not any(flag in found for flag in ("--profile", "--enableTracing"))


def test_its_namespace_and_config_maps_are_the_ones_its_environment_names():
    assert plan.namespace()["metadata"]["name"] == plan.NAMESPACE
    names = {config_map["metadata"]["name"] for config_map in plan.config_maps()}
    environment = plan.environment()
    assert names == {environment["INIT_CONFIG"], environment["METRICS_CONFIG"]}
    assert environment["KYVERNO_NAMESPACE"] == plan.NAMESPACE
