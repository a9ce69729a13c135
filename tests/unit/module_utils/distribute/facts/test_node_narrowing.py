"""A node event's reconcile (issue 33) plans with the facts narrowed to that node (facts/cluster.py narrow_to_node)
and writes only the actions on that node's objects: for a node that joins, is tainted away, is deleted or whose GPU
changes to one the image's targets do not cover, those
actions are exactly the ones the whole cache's plan has for that node, and the namespace-level objects a narrowed
plan would misjudge are never among them."""

import copy

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import narrow_to_node, node_of
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from tests.helpers.distribute import as_live, default_nodes, facts, make_spec


def actions(plan, node=None):
    return sorted((a.verb, a.kind, a.namespace, a.name) for a in plan.actions
                  if node is None or node_of(a.body) == node)


def converged(spec):
    nodes = default_nodes()
    live = as_live(planner.plan(spec, facts(nodes=nodes)).desired, complete_jobs=True, marked=True)
    return nodes, live


def joined(spec):
    nodes, live = converged(spec)
    first = planner.plan(spec, facts(nodes=nodes, objects=live)).eligibility.eligible[0]["metadata"]["name"]
    new = copy.deepcopy(next(n for n in nodes if n["metadata"]["name"] == first))
    new["metadata"]["name"] = "joined-1"
    return facts(nodes=[*nodes, new], objects=live), "joined-1"


def tainted(spec):
    nodes, live = converged(spec)
    name = planner.plan(spec, facts(nodes=nodes, objects=live)).eligibility.eligible[0]["metadata"]["name"]
    for node in nodes:
        if node["metadata"]["name"] == name:
            node.setdefault("spec", {})["taints"] = [{"key": "maintenance", "effect": "NoSchedule"}]
    return facts(nodes=nodes, objects=live), name


def deleted(spec):
    nodes, live = converged(spec)
    name = planner.plan(spec, facts(nodes=nodes, objects=live)).eligibility.eligible[0]["metadata"]["name"]
    return facts(nodes=[n for n in nodes if n["metadata"]["name"] != name], objects=live), name


def gpu_changed(spec):
    """The node's GPU becomes one the image has no kernels for (judged against the image's targets)."""
    nodes, live = converged(spec)
    name = planner.plan(spec, facts(nodes=nodes, objects=live)).eligibility.eligible[0]["metadata"]["name"]
    for node in nodes:
        if node["metadata"]["name"] == name:
            node["metadata"]["labels"]["gkm.io/gpu-arch"] = "gfx942"
    return facts(nodes=nodes, objects=live), name


SPECS = {
    "per-node": make_spec,
    "serving-pvc": lambda: make_spec(serving_pvc=True),
    "two-namespaces": lambda: make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"]),
}


@pytest.mark.parametrize("event", [joined, tainted, deleted, gpu_changed], ids=["joined", "tainted", "deleted",
                                                                                "gpu-changed"])
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_the_narrowed_plan_has_the_whole_plans_actions_for_that_node(kind, event):
    spec = SPECS[kind]()
    cluster, name = event(spec)
    whole = actions(planner.plan(spec, cluster), name)
    assert whole  # the event changes something on that node
    assert actions(planner.plan(spec, narrow_to_node(cluster, name)), name) == whole
    assert all(action in actions(planner.plan(spec, cluster)) for action in whole)


def test_a_narrowed_plan_misjudges_namespace_level_objects_so_only_the_nodes_actions_are_written():
    spec = make_spec(serving_pvc=True)
    cluster, name = deleted(spec)
    narrowed = planner.plan(spec, narrow_to_node(cluster, name))
    outside = [a for a in narrowed.actions if node_of(a.body) is None]
    assert outside  # seen alone, the gone node leaves no eligible node, so the serving PVC looks unneeded
    assert not [a for a in planner.plan(spec, cluster).actions if node_of(a.body) is None]
    assert all(node_of(a.body) == name for a in narrowed.actions if node_of(a.body) is not None)


def test_narrowing_keeps_the_namespace_level_objects_and_drops_the_other_nodes():
    spec = make_spec(serving_pvc=True)
    nodes, live = converged(spec)
    name = nodes[0]["metadata"]["name"]
    narrowed = narrow_to_node(facts(nodes=nodes, objects=live), name)
    assert [n["metadata"]["name"] for n in narrowed.nodes] == [name]
    kept = [obj for listed in narrowed.objects.values() for obj in listed]
    assert {node_of(obj) for obj in kept} <= {None, name}
    assert any(node_of(obj) is None for obj in kept)
