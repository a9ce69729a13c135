"""A rolling upgrade inside one reconcile (distribute/rollout.py): the wave plan from a plan made without holds, then
the plan made again with the nodes it holds, as runner._plan does, without a cluster."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.upgrade_policy import parse_upgrade_policy
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, rollout
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_status
from tests.helpers.distribute import (
    CSI_CLASS,
    DIGEST_A,
    DIGEST_B,
    WORKERS,
    as_live,
    facts,
    make_spec,
    moved_to_b,
    two_passes,
)


def test_one_node_at_a_time_creates_one_new_slot_and_keeps_every_previous_slot():
    spec, cluster = moved_to_b({"maxUnavailable": 1})
    plan, waves = two_passes(spec, cluster)
    assert waves.starting == [WORKERS[0]] and waves.nodes_in("pending") == WORKERS[1:]
    created = [a.body["metadata"]["labels"] for a in plan.actions if a.verb == "create" and a.kind == "Job"]
    assert [(labels["gkm.io/node"], labels["gkm.io/digest"]) for labels in created] == [
        (WORKERS[0], short_digest(DIGEST_B))]
    assert not [a for a in plan.actions if a.verb == "delete"]
    held = [s for s in plan.slots if s.outcome == planner.HELD]
    assert sorted(s.node for s in held) == WORKERS[1:]
    assert sorted(s.node for s in plan.slots if s.outcome == planner.PREVIOUS) == WORKERS


def test_the_next_reconcile_counts_the_started_node_by_its_live_pvc_and_holds_the_others():
    spec, cluster = moved_to_b({"maxUnavailable": 1})
    plan, _waves = two_passes(spec, cluster)
    new_objects = as_live([obj for obj in plan.desired if obj["metadata"]["labels"].get("gkm.io/digest")
                           == short_digest(DIGEST_B)])
    for kind, objects in new_objects.items():
        cluster.objects[kind] = cluster.objects.get(kind, []) + objects
    assert rollout.started_nodes(spec, plan.eligibility.eligible, cluster.objects["PersistentVolumeClaim"]) == {
        WORKERS[0]}
    again, waves = two_passes(spec, cluster)
    assert waves.nodes_in("upgrading") == [WORKERS[0]] and waves.starting == [] and not again.actions


def test_without_an_upgrade_policy_or_per_node_slots_there_are_no_waves():
    spec, cluster = moved_to_b(None)
    spec.upgrade_policy = None
    assert two_passes(spec, cluster)[1] is None
    shared = make_spec(DIGEST_B, access_modes=["ReadOnlyMany"], upgrade_policy=parse_upgrade_policy(None))
    assert two_passes(shared, facts(storage_class=CSI_CLASS))[1] is None


def test_the_diff_shows_the_state_labels_now_and_the_wave_plan():
    spec, cluster = moved_to_b({"maxUnavailable": "50%"})
    nodes = cluster.nodes
    worker = next(node for node in nodes if node["metadata"]["name"] == WORKERS[1])
    worker["metadata"].setdefault("labels", {})["upgrade.gkm.io/team-a.vector-add"] = "pending"
    waves = two_passes(spec, cluster)[1]
    diff = rollout.rollout_diff(spec, waves, nodes)
    assert diff["before_header"] == "upgrade of team-a/vector-add"
    assert diff["before"] == {WORKERS[1]: "pending"}
    assert diff["after"]["budget"] == 1 and diff["after"]["waves"] == [[WORKERS[1]], [WORKERS[2]]]


def per_node_states(spec, cluster, plan, waves):
    """The per-node objects' states of the cache after this plan (node_writer.sync_for_spec's input)."""
    entries = status.cache_status(plan.slots, WORKERS, [], {}, cluster.objects, [])["entries"]
    return node_status.node_cache_states(spec, plan.eligibility, entries, cluster.nodes, [],
                                         rollout.upgrade_states(waves))


def test_each_node_entry_of_the_new_digest_carries_its_upgrade_state_as_its_label_does():
    spec, cluster = moved_to_b({"maxUnavailable": 1})
    plan, waves = two_passes(spec, cluster)
    states = per_node_states(spec, cluster, plan, waves)
    assert {node: states[node][DIGEST_B].get("upgradeState") for node in WORKERS} == waves.labels() == {
        WORKERS[0]: "upgrading", WORKERS[1]: "pending", WORKERS[2]: "pending"}
    # The previous digest's entry (kept until replaced) says nothing of the rollout.
    assert all("upgradeState" not in states[node][DIGEST_A[7:19]] for node in WORKERS)


def test_no_upgrade_state_without_waves_or_once_every_node_is_upgraded():
    spec, cluster = moved_to_b(None)
    spec.upgrade_policy = None
    plan, waves = two_passes(spec, cluster)
    assert waves is None and rollout.upgrade_states(waves) == {}
    assert not [node for node, digests in per_node_states(spec, cluster, plan, waves).items()
                for state in digests.values() if "upgradeState" in state]
    # Every node Extracted at the new digest and nothing kept: the rollout is complete, its labels and states go.
    done = make_spec(DIGEST_B, upgrade_policy=parse_upgrade_policy({"maxUnavailable": 1}))
    live = facts(objects=as_live(planner.plan(done, facts()).desired, complete_jobs=True, marked=True))
    plan, waves = two_passes(done, live)
    assert waves.complete and rollout.upgrade_states(waves) == {}
    assert all("upgradeState" not in per_node_states(done, live, plan, waves)[node][DIGEST_B] for node in WORKERS)
