"""A cache's status entries read back from its per-node objects, as cache_info and the status playbook will."""

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import (
    node_entries,
    node_objects,
    node_status,
)
from tests.helpers.distribute import (
    CSI_CLASS,
    T0,
    NodeObjectServer,
    facts,
    make_spec,
    mixed_nodes,
    pod,
    reconcile_facts,
)

SLOT_FIELDS = ("namespace", "node", "digest", "pvc", "job", "pv", "phase")


def written(spec, cluster_facts, kind="ClusterGKMCache"):
    """(entries the reconcile computed, entries read back from the per-node objects it would write)."""
    plan, entries = reconcile_facts(spec, cluster_facts)
    states = node_status.node_cache_states(spec, plan.eligibility, entries, cluster_facts.nodes, cluster_facts.pods)
    server = NodeObjectServer()
    server.write(node_objects.plan_node_objects(kind, spec.cache_namespace or None, spec.name, states,
                                                cluster_facts.nodes, [], T0))
    return entries, node_entries.cache_entries(server.list(), spec.name)


def slot_view(entries):
    return sorted(tuple(entry.get(field) for field in SLOT_FIELDS) for entry in entries if entry.get("pvc"))


def test_rwo_slots_read_back_as_written_and_excluded_gpu_nodes_say_why():
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"])
    cluster_facts = facts(nodes=mixed_nodes())
    plan, _entries = reconcile_facts(spec, cluster_facts)
    running = next(s for s in plan.slots if s.node == "gkm-gpu-worker-1" and s.namespace == "team-a")
    cluster_facts.pods = [pod("app", "team-a", running.pvc)]
    computed, read = written(spec, cluster_facts)
    assert slot_view(read) == slot_view(computed) and len(slot_view(read)) == 6
    # Who mounts a slot reads back too (undeploy and the status playbook name them).
    assert {(e["node"], e["namespace"], tuple(e["mounted_by"])) for e in read if e.get("mounted_by")} == {
        ("gkm-gpu-worker-1", "team-a", ("team-a/app",))}
    excluded = {e["node"]: (e["phase"], e["reason"]) for e in read if not e.get("pvc")}
    assert excluded == {"tainted-1": ("Excluded", "UntoleratedTaint"), "nv-1": ("Incompatible", "Incompatible"),
                        "broken-1": ("Excluded", "GPULabelsUnusable")}
    assert "maintenance=yes:NoSchedule" in next(e for e in read if e["node"] == "tainted-1")["message"]


def test_rox_shared_pvc_reads_back_as_one_entry_per_namespace():
    spec = make_spec(access_modes=["ReadOnlyMany"])
    computed, read = written(spec, facts(storage_class=CSI_CLASS), kind="GKMCache")
    assert slot_view(read) == slot_view(computed)
    assert [(e["namespace"], e["node"], e["pvc"]) for e in read] == [("team-a", "", "vector-add")]
