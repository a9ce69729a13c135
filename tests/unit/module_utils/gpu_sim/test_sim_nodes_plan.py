"""sim_nodes' planning: which simulated nodes to create, replace, update or delete."""

import copy

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import sim_nodes

GROUPS = [{"name": "amd", "count": 2, "vendor": "amd", "gpus": 2}, {"name": "cpu", "count": 1, "vendor": "none"}]


def live(desired, manager="gkm.cluster"):
    """Live copies of desired nodes, as the API server returns them after we applied them."""
    nodes = []
    for node in copy.deepcopy(list(desired.values())):
        labels = node["metadata"]["labels"]
        node["metadata"]["managedFields"] = [{"manager": manager, "operation": "Apply", "fieldsV1": {
            "f:metadata": {"f:labels": {"f:" + key: {} for key in labels}}}}]
        node["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        nodes.append(node)
    return nodes


def test_first_run_creates_everything_and_second_run_nothing():
    desired = sim_nodes.desired_nodes(GROUPS, "create")
    actions = sim_nodes.plan(desired, [], "create", True, "gkm.cluster")
    assert actions["create"] == ["amd-1", "amd-2", "cpu-1"]
    actions = sim_nodes.plan(desired, live(desired), "create", True, "gkm.cluster")
    assert actions["unchanged"] == ["amd-1", "amd-2", "cpu-1"]
    assert not any(actions[key] for key in ("create", "replace", "update", "status", "delete"))


def test_changing_the_list_adds_removes_updates_and_replaces():
    before = sim_nodes.desired_nodes(GROUPS, "create")
    after_groups = [{"name": "amd", "count": 1, "vendor": "amd", "gpus": 8},
                    {"name": "cpu", "count": 1, "vendor": "none", "labels": {"pool": "x"}},
                    {"name": "nvidia", "count": 1, "vendor": "nvidia"}]
    after = sim_nodes.desired_nodes(after_groups, "create")
    actions = sim_nodes.plan(after, live(before), "create", True, "gkm.cluster")
    assert actions["create"] == ["nvidia-1"]
    assert actions["replace"] == ["amd-1"]          # GPU capacity lives in the status: the node is swapped
    assert actions["update"] == ["cpu-1"]           # a new label
    assert actions["delete"] == ["amd-2"]
    assert sim_nodes.plan(after, live(before), "create", False, "gkm.cluster")["delete"] == []


def test_a_label_we_set_and_dropped_is_drift_but_someone_elses_label_is_not():
    desired = sim_nodes.desired_nodes([{"name": "cpu", "vendor": "none", "labels": {"pool": "x"}}], "create")
    nodes = live(desired)
    nodes[0]["metadata"]["labels"]["team"] = "theirs"      # set by another manager
    assert sim_nodes.plan(desired, nodes, "create", True, "gkm.cluster")["unchanged"] == ["cpu-1"]
    dropped = sim_nodes.desired_nodes([{"name": "cpu", "vendor": "none"}], "create")
    assert sim_nodes.plan(dropped, nodes, "create", True, "gkm.cluster")["update"] == ["cpu-1"]


def test_controller_taints_are_not_drift():
    desired = sim_nodes.desired_nodes([{"name": "amd", "vendor": "amd"}], "create")
    nodes = live(desired)
    nodes[0]["spec"]["taints"].append({"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"})
    assert sim_nodes.plan(desired, nodes, "create", True, "gkm.cluster")["unchanged"] == ["amd-1"]
    body = sim_nodes._metadata_and_spec(desired["amd-1"], nodes[0])
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"} in body["spec"]["taints"]


def test_scope_labels_every_node():
    desired = sim_nodes.desired_nodes(GROUPS, "create", scope="bench")
    assert all(node["metadata"]["labels"]["gkm.io/sim-scope"] == "bench" for node in desired.values())


def test_patch_mode_sets_status_capacity_and_never_creates():
    groups = [{"name": "amd", "vendor": "amd", "gpus": 4, "node_names": ["kind-worker"]}]
    desired = sim_nodes.desired_nodes(groups, "patch")
    bare = {"metadata": {"name": "kind-worker", "labels": {"kubernetes.io/hostname": "kind-worker"}},
            "spec": {}, "status": {"capacity": {"cpu": "8"}}}
    actions = sim_nodes.plan(desired, [bare], "patch", True, "gkm.cluster")
    assert actions["update"] == ["kind-worker"] and actions["status"] == ["kind-worker"]
    assert sim_nodes._status_body(desired["kind-worker"])["status"] == {
        "capacity": {"amd.com/gpu": "4"}, "allocatable": {"amd.com/gpu": "4"}}
    with pytest.raises(sim_nodes.SimNodesError, match="does not exist"):
        sim_nodes.plan(desired, [], "patch", True, "gkm.cluster")


@pytest.mark.parametrize("groups, mode, message", [
    ([{"name": "a", "vendor": "intel"}], "create", "'vendor' must be one of"),
    ([{"count": 1}], "create", "'name' is required"),
    ([{"name": "a", "vendor": "amd"}], "patch", "needs 'node_names'"),
    ([{"name": "a", "node_names": ["n"]}, {"name": "b", "node_names": ["n"]}], "patch", "named by two node groups"),
])
def test_bad_groups_are_refused_with_the_group_named(groups, mode, message):
    with pytest.raises(sim_nodes.SimNodesError) as error:
        sim_nodes.desired_nodes(groups, mode)
    assert message in str(error.value)
