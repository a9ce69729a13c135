"""extract_limits.max_digests: the digests of one cache a node holds at once, the current one included. A node whose
pods hold previous digests up to the limit gets no slot of a new digest, and nothing is deleted under those pods."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import OUTDATED, PENDING
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import spec as cache_spec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, slot_states
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_readiness
from tests.helpers.distribute import DIGEST_A, DIGEST_B, WORKERS, as_live, facts, make_spec, merged, pod

DIGEST_C = "sha256:" + "c" * 64
A, B, C = (short_digest(digest) for digest in (DIGEST_A, DIGEST_B, DIGEST_C))


def limited(max_digests=2, digest=DIGEST_C):
    return make_spec(digest, extract_limits={"max_digests": max_digests})


def on_node(objects, node):
    return {kind: [obj for obj in objs if node in obj["metadata"]["name"]] for kind, objs in objects.items()}


def stamped(objects, when):
    """The objects created at `when`: make before break keeps a node's newest extracted previous digest."""
    for obj in (obj for objs in objects.values() for obj in objs):
        obj["metadata"]["creationTimestamp"] = when
    return objects


@pytest.fixture(name="after_b")
def after_b_fixture():
    """Digest B extracted everywhere; worker-1 keeps A's slot, which pod `app` mounts: (live objects, that pod)."""
    first = planner.plan(make_spec(), facts())
    live_a = stamped(as_live(first.desired, complete_jobs=True, marked=True), "2026-01-01T00:00:00Z")
    second = planner.plan(make_spec(DIGEST_B), facts(objects=live_a))
    old_pvc = next(slot.pvc for slot in first.slots if slot.node == WORKERS[0])
    reader = pod("app", "team-a", old_pvc, node=WORKERS[0])
    live_b = stamped(as_live(second.desired, complete_jobs=True, marked=True), "2026-02-01T00:00:00Z")
    return merged(live_b, on_node(live_a, WORKERS[0])), reader


def test_a_node_at_the_limit_gets_no_new_slot_and_keeps_the_digests_its_pods_hold(after_b):
    live, reader = after_b
    result = planner.plan(limited(), facts(objects=live, pods=[reader]))
    [waiting] = [slot for slot in result.slots if slot.outcome == planner.LIMITED]
    assert (waiting.node, waiting.digest) == (WORKERS[0], C)
    assert waiting.reason == (
        "digest %s waits on node %s: the node holds 2 previous digest(s) of the cache (%s)%s and "
        "extract_limits.max_digests is 2; it is extracted once a previous one is released (its pods end)" % (
            C, WORKERS[0], ", ".join(sorted((A, B))), "; used by team-a/app"))
    # Nothing written or deleted on worker-1: A is mounted, B serves the node until C is extracted there.
    assert [a.to_dict() for a in result.actions if WORKERS[0] in a.name] == []
    assert {(slot.digest, slot.outcome) for slot in result.slots if slot.node == WORKERS[0]} == {
        (A, "outdated"), (B, planner.PREVIOUS), (C, planner.LIMITED)}
    # The other nodes hold B only: C is planned there.
    created = {a.name for a in result.actions if a.verb == "create" and a.kind == "PersistentVolumeClaim"}
    assert {slot.pvc for slot in result.slots if slot.outcome == "current"} <= created
    assert {slot.node for slot in result.slots if slot.outcome == "current"} == set(WORKERS[1:])

    entries = status.cache_status(result.slots, WORKERS, [], {}, live, [reader])["entries"]
    [entry] = [e for e in entries if e["digest"] == C and e["node"] == WORKERS[0]]
    assert (entry["phase"], entry["reason"], entry["fix"]) == (
        PENDING, planner.DIGEST_LIMIT, [slot_states.DIGEST_LIMIT_FIX])
    assert entry["message"] == waiting.reason and "mounted_by" not in entry
    assert {e["phase"] for e in entries if e["node"] == WORKERS[0] and e["digest"] != C} == {OUTDATED}
    # Steering keeps worker-1 on the digest it has.
    assert node_readiness.ready_labels(limited(), entries)[WORKERS[0]] == B


def test_the_new_digest_is_planned_once_the_pod_ends_or_under_a_higher_limit(after_b):
    live, reader = after_b
    freed = planner.plan(limited(), facts(objects=live))
    assert not [slot for slot in freed.slots if slot.outcome == planner.LIMITED]
    on_worker = {(a.verb, a.kind) for a in freed.actions if WORKERS[0] in a.name}
    assert ("create", "PersistentVolumeClaim") in on_worker and ("delete", "PersistentVolumeClaim") in on_worker
    # A, unused now, goes; B stays on worker-1 until C is extracted there.
    assert [slot.digest for slot in freed.slots if slot.node == WORKERS[0] and slot.outcome == planner.PREVIOUS] == [B]
    assert [a.reason for a in freed.actions if a.verb == "delete" and a.kind == "PersistentVolumeClaim"] == [
        "no longer desired (old digest %s)" % A]
    higher = planner.plan(limited(3), facts(objects=live, pods=[reader]))
    assert not [slot for slot in higher.slots if slot.outcome == planner.LIMITED]
    assert {slot.node for slot in higher.slots if slot.outcome == "current"} == set(WORKERS)


def test_a_slot_that_exists_stays_whatever_the_limit(after_b):
    live, reader = after_b
    started = planner.plan(limited(3), facts(objects=live, pods=[reader]))
    with_c = merged(live, as_live(started.desired))
    result = planner.plan(limited(2), facts(objects=with_c, pods=[reader]))
    assert not [slot for slot in result.slots if slot.outcome == planner.LIMITED]
    assert [a.to_dict() for a in result.actions if a.verb == "delete" and WORKERS[0] in a.name] == []


def test_without_the_limit_every_node_gets_the_new_digest(after_b):
    live, reader = after_b
    result = planner.plan(make_spec(DIGEST_C), facts(objects=live, pods=[reader]))
    assert {slot.node for slot in result.slots if slot.outcome == "current"} == set(WORKERS)


@pytest.mark.parametrize("value, message", [
    (1, "extract_limits.max_digests must be at least 2: make before break keeps a node's previous digest"),
    (0, "extract_limits.max_digests must be a positive whole number"),
])
def test_max_digests_below_two_is_refused(value, message):
    with pytest.raises(cache_spec.SpecError, match=message):
        limited(value)


def test_max_digests_is_the_planner_s_not_an_extractor_argument():
    assert cache_spec.extract_limit_args({"max_digests": 3, "max_files": 5}) == ["--max-files", "5"]
