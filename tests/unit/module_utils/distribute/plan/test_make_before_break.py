"""Make before break in the planner and the readiness labels: a node keeps a verified cache it had until the new
digest is extracted there."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    EXTRACTED,
    OUTDATED,
    PENDING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_readiness
from tests.helpers.distribute import DIGEST_A, DIGEST_B, WORKERS, as_live, default_nodes, facts, make_spec, merged

OLD, NEW = short_digest(DIGEST_A), short_digest(DIGEST_B)


def kept_nodes(result):
    return sorted(s.node for s in result.slots if s.outcome == planner.PREVIOUS)


def test_only_a_verified_previous_slot_is_kept_and_only_on_a_node_that_still_gets_the_cache():
    old = planner.plan(make_spec(), facts())
    live = as_live(old.desired, complete_jobs=True)
    # worker-2's old Job never finished: nothing verified to keep there.
    live["Job"] = [job for job in live["Job"] if WORKERS[1] not in job["metadata"]["name"]]
    nodes = [n for n in default_nodes() if n["metadata"]["name"] != WORKERS[2]]  # worker-3 left
    result = planner.plan(make_spec(DIGEST_B), facts(nodes=nodes, objects=live))
    assert kept_nodes(result) == [WORKERS[0]]
    deleted = sorted(a.name for a in result.actions if a.verb == "delete" and a.kind == "PersistentVolumeClaim")
    assert deleted == sorted(s.pvc for s in old.slots if s.node in WORKERS[1:])


def test_a_failed_new_extraction_leaves_the_node_on_its_previous_digest():
    old = planner.plan(make_spec(), facts())
    live = as_live(old.desired, complete_jobs=True, marked=True)
    started = planner.plan(make_spec(DIGEST_B), facts(objects=live))
    new_live = as_live(started.desired, complete_jobs=True, marked=True)
    failed = as_live([obj for obj in started.desired if WORKERS[0] in obj["metadata"]["name"]])
    for job in failed["Job"]:
        job["status"] = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    new_live = {kind: [obj for obj in objects if WORKERS[0] not in obj["metadata"]["name"]]
                for kind, objects in new_live.items()}
    objects = merged(live, new_live, failed)
    result = planner.plan(make_spec(DIGEST_B), facts(objects=objects))
    assert kept_nodes(result) == [WORKERS[0]]
    assert "kept until digest %s is extracted on node %s (make before break)" % (NEW, WORKERS[0]) in [
        s.reason for s in result.slots if s.outcome == planner.PREVIOUS]

    entries = status.cache_status(result.slots, WORKERS, [], {}, objects, [])["entries"]
    kept, = [e for e in entries if e.get("reason") == planner.KEPT_UNTIL_REPLACED]
    assert (kept["node"], kept["phase"], kept["digest"]) == (WORKERS[0], OUTDATED, OLD)
    assert node_readiness.ready_labels(make_spec(DIGEST_B), entries) == {
        WORKERS[0]: OLD, WORKERS[1]: NEW, WORKERS[2]: NEW}


def test_force_and_absent_keep_nothing():
    live = as_live(planner.plan(make_spec(), facts()).desired, complete_jobs=True)
    assert kept_nodes(planner.plan(make_spec(DIGEST_B, force=True), facts(objects=live))) == []
    assert kept_nodes(planner.plan(make_spec(DIGEST_B, state="absent"), facts(objects=live))) == []


def test_kept_slots_do_not_make_the_cache_outdated_unless_pods_read_them():
    old = planner.plan(make_spec(), facts())
    live = as_live(old.desired, complete_jobs=True, marked=True)
    started = planner.plan(make_spec(DIGEST_B), facts(objects=live))
    # The new Jobs completed in the same run: the new PVCs are marked by this plan, the old slots go next run.
    objects = merged(live, as_live(started.desired, complete_jobs=True))
    marking = planner.plan(make_spec(DIGEST_B), facts(objects=objects))
    assert kept_nodes(marking) == WORKERS
    assert status.cache_status(marking.slots, WORKERS, [], {}, objects, [])["phase"] == EXTRACTED
    reader = {"metadata": {"name": "app", "namespace": "team-a"}, "status": {"phase": "Running"},
              "spec": {"nodeName": WORKERS[0], "volumes": [{"name": "c", "persistentVolumeClaim": {
                  "claimName": old.slots[0].pvc}}]}}
    assert status.cache_status(marking.slots, WORKERS, [], {}, objects, [reader])["phase"] == OUTDATED


def test_a_held_node_gets_no_new_slot_keeps_its_previous_one_and_waits_for_its_wave():
    old = planner.plan(make_spec(), facts())
    live = as_live(old.desired, complete_jobs=True, marked=True)
    result = planner.plan(make_spec(DIGEST_B), facts(objects=live), hold={WORKERS[1], WORKERS[2]})
    # One slot, and the PVC and PV its Job writes through.
    assert result.summary() == {"create": {"PersistentVolume": 2, "PersistentVolumeClaim": 2, "Job": 1}}
    assert kept_nodes(result) == WORKERS
    entries = status.cache_status(result.slots, WORKERS, [], {}, live, [])
    held = [e for e in entries["entries"] if e.get("reason") == planner.WAITING_FOR_WAVE]
    assert sorted(e["node"] for e in held) == WORKERS[1:] and {e["phase"] for e in held} == {PENDING}
    assert entries["phase"] == PENDING
    assert node_readiness.ready_labels(make_spec(DIGEST_B), entries["entries"]) == {node: OLD for node in WORKERS}
