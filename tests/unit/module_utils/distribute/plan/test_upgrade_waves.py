"""Rolling cache upgrades (distribute/upgrade_waves.py): waves, pause, failures and roll-back, without a cluster."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    short_digest,
    upgrade_state_label_key,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
    EXTRACTED,
    EXTRACTING,
    PENDING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.upgrade_policy import parse_upgrade_policy
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import upgrade_waves as waves
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_readiness import label_changes
from tests.helpers.distribute import DIGEST_B, OLD, WORKERS, as_live, facts, fleet, make_spec, node, upgrade


def progress_after(plan, finish, fail=()):
    """The next reconcile's facts: started nodes Pending, `finish` Extracted, `fail` Error."""
    result = {}
    for name, state in plan.states.items():
        target = None
        if state != waves.WAITING:
            target = PENDING
        if name in finish or state == waves.UPGRADED:
            target = EXTRACTED
        if name in fail:
            target = ERROR
        result[name] = waves.NodeProgress(previous=OLD, target=target)
    return result


def test_twenty_nodes_at_a_quarter_move_five_at_a_time_and_never_more():
    nodes = fleet(20)
    plan = upgrade(nodes, {"maxUnavailable": "25%"})
    assert plan.budget == 5 and plan.starting == ["gpu-00", "gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    assert [len(wave) for wave in plan.waves] == [5, 5, 5] and plan.waves[0][0] == "gpu-05"
    rounds = 0
    while not plan.complete:
        rounds += 1
        upgrading = plan.nodes_in(waves.UPGRADING)
        assert len(upgrading) <= 5
        # Two nodes of each wave finish per round: the wave planner refills exactly the freed places.
        plan = waves.plan_waves(plan.policy, DIGEST_B, nodes, progress_after(plan, upgrading[:2]))
    assert rounds == 10 and plan.labels() == {}
    assert plan.message == "every node has %s" % short_digest(DIGEST_B)


def test_the_same_facts_give_the_same_plan():
    nodes = fleet(7)
    first, second = upgrade(nodes, {"maxUnavailable": 2}), upgrade(list(reversed(nodes)), {"maxUnavailable": 2})
    assert first.to_dict() == second.to_dict()
    assert first.to_dict()["pending"] == ["gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06"]
    assert first.labels()["gpu-00"] == "upgrading" and first.labels()["gpu-06"] == "pending"


def test_a_failure_beyond_the_threshold_stops_the_rollout_and_rolls_the_failed_nodes_back():
    nodes = fleet(8)
    plan = upgrade(nodes, {"maxUnavailable": 3})
    stopped = waves.plan_waves(plan.policy, DIGEST_B, nodes, progress_after(plan, ["gpu-00"], fail=["gpu-01"]))
    assert stopped.stopped and stopped.starting == [] and stopped.waves == []
    assert stopped.nodes_in(waves.ROLLED_BACK) == ["gpu-01"]
    # Nodes already upgrading finish; the rest stay on the previous digest.
    assert stopped.nodes_in(waves.UPGRADING) == ["gpu-02"] and stopped.nodes_in(waves.UPGRADED) == ["gpu-00"]
    assert stopped.holds("gpu-05") and not stopped.holds("gpu-01")
    assert stopped.labels()["gpu-01"] == "rolled-back"
    assert "stopped: 1 node(s) failed (gpu-01), more than failureThreshold 0 allows" in stopped.message
    assert "delete their PVCs labelled gkm.io/extraction-failed to retry" in stopped.message


def test_failures_within_the_threshold_leave_the_rollout_running():
    nodes = fleet(10)
    plan = upgrade(nodes, {"maxUnavailable": 2, "failureThreshold": "10%"})
    going = waves.plan_waves(plan.policy, DIGEST_B, nodes, progress_after(plan, ["gpu-00"], fail=["gpu-01"]))
    assert not going.stopped and going.nodes_in(waves.FAILED) == ["gpu-01"]
    # The failed node still serves its previous digest, so it takes no place in the budget.
    assert going.starting == ["gpu-02", "gpu-03"]
    assert not going.complete


def test_pause_starts_nobody_but_lets_nodes_in_flight_finish_and_resume_goes_on():
    nodes = fleet(6)
    plan = upgrade(nodes, {"maxUnavailable": 2})
    paused = waves.plan_waves(parse_upgrade_policy({"maxUnavailable": 2, "paused": True}), DIGEST_B, nodes,
                              progress_after(plan, ["gpu-00"]))
    assert paused.starting == [] and paused.nodes_in(waves.UPGRADING) == ["gpu-01"]
    assert "paused" in paused.message and "set upgradePolicy.paused false" in paused.message
    resumed = waves.plan_waves(plan.policy, DIGEST_B, nodes, progress_after(paused, ()))
    assert resumed.starting == ["gpu-02"]


def test_order_by_a_label_puts_unlabelled_nodes_last():
    nodes = [node("a", zone="z2"), node("b"), node("c", zone="z1"), node("d", zone="z2")]
    plan = upgrade(nodes, {"maxUnavailable": 1, "order": "zone"})
    assert plan.starting == ["c"] and plan.waves == [["a"], ["d"], ["b"]]


def test_a_node_with_nothing_to_protect_starts_at_once_and_takes_no_place():
    nodes = [*fleet(4), node("joined")]
    plan = upgrade(nodes, {"maxUnavailable": 1, "paused": True}, joined=waves.NodeProgress())
    assert plan.starting == ["joined"] and plan.nodes_in(waves.UPGRADING) == ["joined"]
    running = upgrade(nodes, {"maxUnavailable": 1}, joined=waves.NodeProgress(target=PENDING))
    assert running.starting == ["gpu-00"]


def test_a_node_whose_workloads_wait_for_their_restart_is_still_upgrading():
    nodes = fleet(3)
    plan = upgrade(nodes, {"maxUnavailable": 1},
                   **{"gpu-00": waves.NodeProgress(previous=OLD, target=EXTRACTED, evictions=2)})
    assert plan.restart == ["gpu-00"] and plan.states["gpu-00"] == waves.UPGRADING and plan.starting == []


def test_without_a_previous_digest_there_is_no_rollout():
    nodes = fleet(3)
    plan = waves.plan_waves(parse_upgrade_policy(None), DIGEST_B, nodes, {})
    assert not plan.active and plan.complete and plan.starting == ["gpu-00", "gpu-01", "gpu-02"]
    assert plan.labels() == {}


def test_state_labels_change_only_what_differs():
    nodes = fleet(3)
    nodes[0]["metadata"]["labels"]["upgrade.gkm.io/team-a.vector-add"] = "upgrading"
    nodes[2]["metadata"]["labels"]["upgrade.gkm.io/team-a.vector-add"] = "stale"
    plan = upgrade(nodes, {"maxUnavailable": 1})
    key = upgrade_state_label_key("vector-add", "team-a")
    assert key == "upgrade.gkm.io/team-a.vector-add"
    # What runner.distribute writes through node_readiness_runner.sync_labels.
    assert label_changes(nodes, key, plan.labels()) == [("gpu-01", "pending"), ("gpu-02", "pending")]


def test_node_progress_from_the_planner_and_the_status_of_a_digest_change():
    """The wiring in one pass: a plan made without holds keeps the previous slots; its status gives the facts."""
    old_plan = planner.plan(make_spec(), facts())
    live = as_live(old_plan.desired, complete_jobs=True)
    spec = make_spec(DIGEST_B)
    new_plan = planner.plan(spec, facts(objects=live))
    # A node the image does not fit has an Incompatible entry, without a digest: no part of the rollout.
    entries = status.cache_status(new_plan.slots, WORKERS, ["nv-1"], {"nv-1": ["cuda does not match"]}, live,
                                  [])["entries"]
    progress = waves.node_progress(entries, spec.digest, started={WORKERS[2]}, kept_reason=planner.KEPT_UNTIL_REPLACED)
    assert {name: (fact.previous, fact.target) for name, fact in progress.items()} == {
        WORKERS[0]: (OLD, None), WORKERS[1]: (OLD, None), WORKERS[2]: (OLD, PENDING)}
    plan = waves.plan_waves(parse_upgrade_policy({"maxUnavailable": 2}), spec.digest, new_plan.eligibility.eligible,
                            progress)
    assert plan.starting == [WORKERS[0]] and plan.holds(WORKERS[1])


@pytest.mark.parametrize("phases, target", [
    ((EXTRACTED, ERROR), ERROR),
    ((EXTRACTED, EXTRACTING), EXTRACTING),
    ((EXTRACTED, EXTRACTED), EXTRACTED),
])
def test_a_node_is_as_far_as_its_slowest_namespace(phases, target):
    entries = [{"namespace": "ns-%d" % index, "node": "n", "digest": short_digest(DIGEST_B), "phase": phase}
               for index, phase in enumerate(phases)]
    progress = waves.node_progress(entries, DIGEST_B, {"n"}, planner.KEPT_UNTIL_REPLACED)
    assert progress["n"].target == target


def test_a_node_whose_previous_slot_is_released_keeps_its_place_while_its_workloads_restart():
    nodes = fleet(2)
    plan = upgrade(nodes, {"maxUnavailable": 1},
                   **{"gpu-00": waves.NodeProgress(target=EXTRACTED, evictions=1)})
    assert plan.active and not plan.complete and plan.restart == ["gpu-00"]
    assert plan.states == {"gpu-00": waves.UPGRADING, "gpu-01": waves.WAITING} and plan.starting == []
    done = upgrade(nodes, {"maxUnavailable": 1}, **{"gpu-00": waves.NodeProgress(target=EXTRACTED)})
    assert done.starting == ["gpu-01"] and done.restart == []


def test_a_rollout_is_moving_until_only_time_cannot_move_it():
    """What the operator reconciles the cache again soon for (the controller's handlers.py): nodes upgrading or
    pending, and nothing holding the rollout."""
    nodes = fleet(4)
    plan = upgrade(nodes, {"maxUnavailable": 1})
    assert plan.moving() and plan.to_dict()["moving"]
    paused = waves.plan_waves(parse_upgrade_policy({"maxUnavailable": 1, "paused": True}), DIGEST_B, nodes,
                              progress_after(plan, ()))
    assert not paused.moving()
    stopped = waves.plan_waves(plan.policy, DIGEST_B, nodes, progress_after(plan, (), fail=["gpu-00"]))
    assert stopped.stopped and not stopped.moving()
    # Every node done but one failed within the threshold: not complete, yet nothing moves until someone retries it.
    tolerant = parse_upgrade_policy({"maxUnavailable": 4, "failureThreshold": 1})
    fresh = {n["metadata"]["name"]: waves.NodeProgress(previous=OLD) for n in nodes}
    started = waves.plan_waves(tolerant, DIGEST_B, nodes, fresh)
    left = waves.plan_waves(tolerant, DIGEST_B, nodes, progress_after(started, ["gpu-01", "gpu-02", "gpu-03"],
                                                                      fail=["gpu-00"]))
    assert not left.complete and not left.stopped and not left.moving()
    assert not waves.plan_waves(parse_upgrade_policy(None), DIGEST_B, nodes, {}).moving()
