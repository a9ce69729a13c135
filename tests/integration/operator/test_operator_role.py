"""The gkm role's operator mode on the simulated cluster: gkm_reconcile=operator runs the operator here (the kopf
controller as a process, with the in-cluster Deployment's options), undeploy (gkm_state=absent) stops it, and the
in-cluster operator without its image is refused before anything is written (test_operator_in_cluster.py runs it in
the cluster)."""

import json

import pytest

from tests.helpers.roles import run_role
from tests.helpers.sim import SIM_SCRIPT, sim_control

pytestmark = [pytest.mark.cluster]


def operator_running():
    return sim_control.is_running(sim_control.load_state()["processes"].get("operator"))


def role_vars(sim, **extra):
    return dict(gkm_kubeconfig=sim.kubeconfig, gkm_webhook_endpoint="url", gkm_webhook_local=True,
                gkm_sim_script=SIM_SCRIPT, gkm_tools_image="%s/gkm-cluster/tools:sim" % sim.registry,
                gkm_reconcile="operator", **extra)


def test_the_in_cluster_operator_without_its_image_is_refused_before_any_write(sim, tmp_path):
    run = run_role("gkm", tmp_path, role_vars(sim, gkm_operator_local=False))
    assert not run.ok
    assert any("needs gkm_operator_image" in message for message in run.failures()), run.failures()
    assert not any("Install the cache CRDs" in task[0] for task in run.tasks), run.tasks


def test_the_role_starts_the_operator_and_undeploy_stops_it(sim, crds, tmp_path):
    installed = run_role("gkm", tmp_path, role_vars(sim))
    assert installed.ok, installed.failures()
    assert operator_running()
    argv = sim_control.load_state()["processes"]["operator"]["argv"]
    assert argv[1:3] == ["-m", "controller.gkm_controller.main"]
    # The Deployment's GKM_CACHES_OPTIONS (the role's wait, its namespace for the scrub), over the sim's plain HTTP.
    options = json.loads(argv[argv.index("--options") + 1])
    assert options["wait"] is True and options["system_namespace"] == "gkm-system", options
    assert options["registry_plain_http"] is True
    removed = run_role("gkm", tmp_path, role_vars(sim, gkm_state="absent"))
    assert removed.ok, removed.failures()
    assert removed.result("Stop the local operator")["changed"]
    assert not operator_running()
