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
# Each role as a user includes it, with what it needs to reach its first Kubernetes call.
ROLES = {
    "gkm": {"name": "gkm.cluster.gkm", "vars": {"gkm_state": "absent"}},
    "sweep": {"name": "gkm.cluster.gkm", "tasks_from": "sweep.yml"},
    "caches": {"name": "gkm.cluster.caches", "vars": {"caches_state": "absent"}},
    "cert_manager": {"name": "gkm.cluster.cert_manager", "vars": {"cert_manager_manifest_path": "/dev/null"}},
    "kyverno": {"name": "gkm.cluster.kyverno", "vars": {"kyverno_state": "absent"}},
    "hardware": {"name": "gkm.cluster.hardware", "vars": {"hardware_install_nfd": False}},
}


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
    assert info["invocation"]["module_args"]["context"] == NAMED
    assert isinstance(info["caches"], list)

    run = run_playbook(play("nowhere"), tmp_path)
    assert not run.ok
    assert unreachable(run), run.failures()


def test_every_role_reaches_the_server_of_gkm_context(tmp_path):
    """No cluster needed: two unreachable servers, and each role's first request must go to the chosen one."""
    kubeconfig = tmp_path / "two-servers.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "first",
        "clusters": [{"name": name, "cluster": {"server": "https://127.0.0.1:%d" % port}}
                     for name, port in (("first", 1), ("second", 2))],
        "users": [{"name": "someone", "user": {"token": "unused"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "someone"}} for name in ("first", "second")],
    }))
    tasks = [{"name": "Run %s" % name,
              "block": [{"name": "Include %s" % name, "ansible.builtin.include_role": dict(
                  (key, value) for key, value in role.items() if key != "vars"), "vars": role.get("vars", {})}],
              "rescue": [{"name": "Failure of %s" % name,
                          "ansible.builtin.debug": {"msg": "{{ ansible_failed_result.msg }}"}}]}
             for name, role in ROLES.items()]
    for context, port in ((None, 1), ("second", 2)):
        play_vars = dict({"gkm_kubeconfig": str(kubeconfig)}, **({"gkm_context": context} if context else {}))
        run = run_playbook({"vars": play_vars, "tasks": tasks}, tmp_path)
        for name in ROLES:
            message = run.result("Failure of %s" % name)["msg"]
            assert "host='127.0.0.1', port=%d)" % port in message, (name, context, message)
