"""The gpu_sim role against the real local cluster.

kwok backend: the shared cluster is already running, so `sim.py up` is not repeated; the node reconcile is
scoped (gpu_sim_scope) so other tests' nodes are left alone. Starting and stopping a cluster of its own is
measured by bench/gpu_sim.py on a separate state directory. kind backend: no container engine here, so only
its refusal is run; the plan it would run is unit-tested, and its node patches (sim_nodes patch mode) are
run here against kwok nodes named like kind's.
"""

import os

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube as kube_access
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import sim_nodes
from tests.helpers.modules import run_module
from tests.helpers.roles import run_role

pytestmark = pytest.mark.cluster

SCOPE = "roles-gpu-sim"
MIXED = [
    {"name": "gsim-amd", "count": 2, "vendor": "amd", "arch": "gfx90a", "gpus": 8},
    {"name": "gsim-nvidia", "count": 2, "vendor": "nvidia", "arch": "90", "gpus": 4},
    {"name": "gsim-cpu", "count": 1, "vendor": "none", "labels": {"pool": "cpu"}},
]


def scoped_nodes(kube):
    nodes = client.CoreV1Api(kube).list_node(label_selector="gkm.io/sim-scope=%s" % SCOPE).items
    return {node.metadata.name: node for node in nodes}


@pytest.fixture
def scoped(kube):
    yield
    sim_nodes.reconcile(kube_access.Kube(kube), [], scope=SCOPE)


def role_vars(sim, nodes, **extra):
    """The role's variables for the session's cluster (its state directory, which GKM_SIM_DIR may have moved)."""
    return dict({"gpu_sim_nodes": nodes, "gpu_sim_scope": SCOPE, "gpu_sim_wait_timeout": 120,
                 "gpu_sim_kwok_dir": os.path.dirname(sim.kubeconfig)}, **extra)


def test_kwok_nodes_follow_the_list_across_runs(sim, kube, scoped, tmp_path):
    rehearsal = run_role("gpu_sim", tmp_path, role_vars(sim, MIXED), check=True)
    assert rehearsal.ok, rehearsal.failures()
    assert scoped_nodes(kube) == {}

    first = run_role("gpu_sim", tmp_path, role_vars(sim, MIXED))
    assert first.ok, first.failures()
    result = first.facts["gpu_sim_result"]
    assert result["backend"] == "kwok" and result["kubeconfig"] == sim.kubeconfig
    assert result["registry"] == sim.registry
    assert sorted(result["created"]) == ["gsim-amd-1", "gsim-amd-2", "gsim-cpu-1", "gsim-nvidia-1", "gsim-nvidia-2"]
    nodes = scoped_nodes(kube)
    nvidia = nodes["gsim-nvidia-1"]
    assert nvidia.status.capacity["nvidia.com/gpu"] == "4"
    assert (nvidia.metadata.labels["gkm.io/gpu-backend"], nvidia.metadata.labels["gkm.io/gpu-arch"],
            nvidia.metadata.labels["gkm.io/gpu-warp-size"]) == ("cuda", "90", "32")
    assert nodes["gsim-amd-2"].status.capacity["amd.com/gpu"] == "8"
    assert [(t.key, t.value, t.effect) for t in nodes["gsim-amd-2"].spec.taints] == [("gpu", "true", "NoSchedule")]
    assert "amd.com/gpu" not in nodes["gsim-cpu-1"].status.capacity and not nodes["gsim-cpu-1"].spec.taints
    assert all(any(c.type == "Ready" and c.status == "True" for c in node.status.conditions) for node in nodes.values())

    again = run_role("gpu_sim", tmp_path, role_vars(sim, MIXED))
    assert again.ok, again.failures()
    assert again.changed == 0, again.changed_tasks()

    day2 = [{"name": "gsim-amd", "count": 1, "vendor": "amd", "arch": "gfx942", "gpus": 8},
            {"name": "gsim-nvidia", "count": 3, "vendor": "nvidia", "arch": "90", "gpus": 4}]
    changed = run_role("gpu_sim", tmp_path, role_vars(sim, day2))
    assert changed.ok, changed.failures()
    result = changed.facts["gpu_sim_result"]
    assert result["created"] == ["gsim-nvidia-3"]
    assert sorted(result["deleted"]) == ["gsim-amd-2", "gsim-cpu-1"]
    assert result["updated"] == ["gsim-amd-1"]
    nodes = scoped_nodes(kube)
    assert sorted(nodes) == ["gsim-amd-1", "gsim-nvidia-1", "gsim-nvidia-2", "gsim-nvidia-3"]
    assert nodes["gsim-amd-1"].metadata.labels["gkm.io/gpu-arch"] == "gfx942"


def test_bad_node_lists_are_rejected_by_the_argument_spec(sim, tmp_path):
    run = run_role("gpu_sim", tmp_path, role_vars(sim, [{"name": "x", "vendor": "intel"}]))
    assert not run.ok
    message = " ".join(run.failures())
    assert "vendor" in message and "amd, nvidia, none" in message
    run = run_role("gpu_sim", tmp_path, role_vars(sim, [{"count": 2}]))
    assert not run.ok
    assert "name" in " ".join(run.failures())


def test_kwok_backend_without_the_tooling_says_where_to_point(sim, tmp_path):
    run = run_role("gpu_sim", tmp_path, role_vars(sim, MIXED, gpu_sim_kwok_tools_dir=str(tmp_path)))
    assert not run.ok
    message = " ".join(run.failures())
    assert "sim.py does not exist" in message and "gpu_sim_kwok_tools_dir" in message


def test_kind_backend_refuses_without_kind_and_an_engine(sim, tmp_path):
    run = run_role("gpu_sim", tmp_path, role_vars(sim, MIXED, gpu_sim_backend="kind",
                                                  gpu_sim_kind_config_path=str(tmp_path / "kind.yaml"),
                                                  gpu_sim_kind_kubeconfig=str(tmp_path / "kubeconfig")))
    assert not run.ok
    message = " ".join(run.failures())
    assert "kind version" in message and "gpu_sim_backend: kwok" in message
    assert not (tmp_path / "kind.yaml").exists()


def test_kind_node_patches_label_taint_and_set_gpu_capacity_through_status(sim, kube, scoped):
    """sim_nodes patch mode, what the kind backend runs after `kind create cluster`, on kwok nodes."""
    raw = kube_access.Kube(kube)
    sim_nodes.reconcile(raw, [{"name": "gsim-kind-worker", "count": 2, "vendor": "none"}], scope=SCOPE)
    groups = [{"name": "gpu-amd", "vendor": "amd", "arch": "gfx90a", "gpus": 4, "node_names": ["gsim-kind-worker-1"]},
              {"name": "gpu-nvidia", "vendor": "nvidia", "arch": "80", "gpus": 1, "node_names": ["gsim-kind-worker-2"],
               "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]}]
    first = run_module("sim_nodes", sim.kubeconfig, groups=groups, mode="patch")
    assert first["changed"] and sorted(first["updated"]) == ["gsim-kind-worker-1", "gsim-kind-worker-2"]
    nodes = scoped_nodes(kube)
    amd = nodes["gsim-kind-worker-1"]
    assert amd.status.capacity["amd.com/gpu"] == "4" and amd.status.allocatable["amd.com/gpu"] == "4"
    assert amd.metadata.labels["gkm.io/gpu-arch"] == "gfx90a"
    nvidia = nodes["gsim-kind-worker-2"]
    assert {(t.key, t.value) for t in nvidia.spec.taints} == {("gpu", "true"), ("dedicated", "ml")}
    assert nvidia.metadata.labels["nvidia.com/gpu.present"] == "true"
    managers = {(entry.manager, entry.subresource) for entry in nvidia.metadata.managed_fields}
    assert ("gkm.cluster-node-patch", "status") in managers
    assert nvidia.metadata.labels["gkm.io/sim-scope"] == SCOPE   # create mode's labels survive the patch
    again = run_module("sim_nodes", sim.kubeconfig, groups=groups, mode="patch")
    assert not again["changed"] and again["api_writes"] == 0
    missing = run_module("sim_nodes", sim.kubeconfig, mode="patch",
                         groups=[{"name": "x", "vendor": "amd", "node_names": ["gsim-no-such-node"]}])
    assert missing["failed"] and "does not exist" in missing["msg"]
