"""Selecting the cluster by kubeconfig context: gkm_context in the playbooks, and the gkm.cluster.k8s action group.

The kubeconfig has two contexts: the current one points at 127.0.0.1:1, where nothing listens, and a named one
at the simulated cluster. Only the named context can reach a cluster, so a run that works used it.
"""

import os

import pytest
import yaml

from tests.helpers.roles import run_playbook, run_sim_playbook

pytestmark = pytest.mark.cluster

NAMED = "gkm-sim-by-name"


@pytest.fixture
def two_contexts(sim, tmp_path):
    """A kubeconfig whose current context is unreachable and whose context NAMED is the simulated cluster."""
    with open(sim.kubeconfig) as handle:
        config = yaml.safe_load(handle)
    real = config["contexts"][0]["context"]
    config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}})
    config["contexts"] = [{"name": "nowhere", "context": {"cluster": "nowhere", "user": real["user"]}},
                          {"name": NAMED, "context": real}]
    config["current-context"] = "nowhere"
    path = tmp_path / "two-contexts.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def unreachable(run):
    return any("127.0.0.1" in message and "port=1" in message for message in run.failures())


def test_status_playbook_reaches_the_cluster_of_gkm_context(sim, two_contexts):
    sim_dir = os.path.dirname(sim.kubeconfig)
    run = run_sim_playbook("status.yml", sim_dir, "-e", "gkm_kubeconfig=" + two_contexts, "-e", "gkm_context=" + NAMED)
    assert run.ok, run.failures() or run.stderr[-2000:]
    info = run.result("Read the status of every cache")
    assert info["invocation"]["module_args"]["context"] == NAMED
    assert isinstance(info["caches"], list)

    # Without gkm_context the kubeconfig's current context is used, and it names the unreachable server.
    run = run_sim_playbook("status.yml", sim_dir, "-e", "gkm_kubeconfig=" + two_contexts)
    assert not run.ok
    assert unreachable(run), run.failures()


def test_module_defaults_group_sets_auth_for_every_gkm_module(sim, two_contexts, tmp_path):
    def play(context):
        return {"module_defaults": {"group/gkm.cluster.k8s": {"kubeconfig": two_contexts, "context": context}},
                "tasks": [{"name": "Read the caches", "gkm.cluster.cache_info": {}}]}

    run = run_playbook(play(NAMED), tmp_path)
    assert run.ok, run.failures() or run.stderr[-2000:]
    info = run.result("Read the caches")
    assert info["invocation"]["module_args"]["kubeconfig"] == two_contexts
    assert isinstance(info["caches"], list)

    run = run_playbook(play("nowhere"), tmp_path)
    assert not run.ok
    assert unreachable(run), run.failures()
