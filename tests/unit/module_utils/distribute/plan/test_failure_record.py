"""A failed extraction recorded on its PVC (failure_record.py): it outlives the Job, creates no Job again, and
deleting the PVC is the retry."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract import naming
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DIGEST_LABEL,
    ERROR,
    EXTRACTION_FAILED_LABEL,
    EXTRACTION_FAILURE_ANNOTATION,
    MANAGED_BY_LABEL,
    MANAGER,
    PENDING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.verification import (
    SIGNATURE_NOT_VERIFIED,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import failure_record, planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.slot_states import (
    slot_phase,
)
from tests.helpers.distribute import DIGEST_A, DIGEST_B, as_live, by_kind, facts, is_access, make_spec

SHORT_A = naming.short_digest(DIGEST_A)


def failed(live, refusing_pods=True):
    """The live objects with every Job failed; with refusing_pods, each Job's pod exited 5 with a message."""
    pods = []
    for job in live["Job"]:
        job["status"] = {"failed": 1, "conditions": [{
            "type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit"}]}
        if refusing_pods:
            pods.append({
                "metadata": {"name": job["metadata"]["name"] + "-x", "namespace": job["metadata"]["namespace"],
                             "labels": {failure_record.JOB_NAME_LABEL: job["metadata"]["name"],
                                        MANAGED_BY_LABEL: MANAGER}},
                "spec": {"nodeName": "n"},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "extract", "state": {
                    "terminated": {"exitCode": 5, "message": "signature does not verify"}}}]},
            })
    return live, pods


def applied(result, live):
    """The live objects after the plan's PVC updates and its deletions (the failed slots' access PVCs and PVs) were
    applied."""
    updates = {a.name: a.body for a in result.actions if a.verb == "update" and a.kind == "PersistentVolumeClaim"}
    deleted = {(a.kind, a.name) for a in result.actions if a.verb == "delete"}
    for kind in live:
        live[kind] = [obj for obj in live[kind] if (kind, obj["metadata"]["name"]) not in deleted]
    live["PersistentVolumeClaim"] = [dict(updates.get(p["metadata"]["name"], p), status={})
                                     for p in live["PersistentVolumeClaim"]]
    return live


def own(actions):
    """(verb, kind) of the actions on the slots' own objects, not their access PVCs and PVs."""
    return {(a.verb, a.kind) for a in actions if not is_access(a.body)}


def test_a_failed_job_is_recorded_on_its_pvc_with_what_its_pod_said_and_no_job_is_created_again():
    spec = make_spec()
    live, pods = failed(as_live(planner.plan(spec, facts()).desired))
    result = planner.plan(spec, facts(objects=live, pods=pods))
    assert own(result.actions) == {("update", "PersistentVolumeClaim")}
    # No Job runs again: the PVCs and PVs it would write through go.
    assert {(a.verb, a.kind) for a in result.actions if is_access(a.body)} == {
        ("delete", "PersistentVolumeClaim"), ("delete", "PersistentVolume")}
    pvc = next(a.body for a in result.actions if a.verb == "update")
    assert pvc["metadata"]["labels"][EXTRACTION_FAILED_LABEL] == SHORT_A
    said = failure_record.recorded(pvc, SHORT_A)
    assert said.reason == SIGNATURE_NOT_VERIFIED and "signature does not verify" in said.message

    # The TTL controller deleted the failed Jobs and their pods: nothing is planned, the slots stay in Error.
    recorded = applied(result, live)
    del recorded["Job"]
    after_ttl = planner.plan(spec, facts(objects=recorded))
    assert after_ttl.actions == []
    slot = after_ttl.slots[0]
    pvc = next(p for p in recorded["PersistentVolumeClaim"] if p["metadata"]["name"] == slot.pvc)
    phase, message, fixes, reason = slot_phase(slot, pvc, None, [])
    assert (phase, reason) == (ERROR, SIGNATURE_NOT_VERIFIED) and "signature does not verify" in message
    assert fixes[-1] == failure_record.RETRY_FIX


def test_a_job_failed_without_pod_messages_is_recorded_from_its_condition_and_a_changed_template_retries():
    spec = make_spec()
    live, _pods = failed(as_live(planner.plan(spec, facts()).desired), refusing_pods=False)
    recorded = applied(planner.plan(spec, facts(objects=live)), live)
    said = failure_record.recorded(by_kind(recorded["PersistentVolumeClaim"], "PersistentVolumeClaim")[0], SHORT_A)
    assert said.reason == "BackoffLimitExceeded" and "backoff limit" in said.message
    assert planner.plan(spec, facts(objects=recorded)).actions == []
    # A new Job template (a fixed tools image, pod template or volume owner step) is a retry: the failed Jobs are
    # replaced and the records cleared; with the Jobs gone (TTL), they are created.
    other = make_spec(pod_template={"spec": {"tolerations": [{"operator": "Exists"}]}})
    retried = planner.plan(other, facts(objects=recorded))
    assert own(retried.actions) == {("replace", "Job"), ("update", "PersistentVolumeClaim")}
    assert not any(failure_record.has_record(a.body) for a in retried.actions)
    gone = dict(recorded, Job=[])
    assert own(planner.plan(other, facts(objects=gone)).actions) == {
        ("create", "Job"), ("update", "PersistentVolumeClaim")}


def test_deleting_the_pvc_retries_and_a_new_digest_starts_without_the_record():
    spec = make_spec()
    live, pods = failed(as_live(planner.plan(spec, facts()).desired))
    recorded = applied(planner.plan(spec, facts(objects=live, pods=pods)), live)
    own_pvcs = by_kind(recorded["PersistentVolumeClaim"], "PersistentVolumeClaim")
    retried = dict(recorded, PersistentVolumeClaim=own_pvcs[1:])
    result = planner.plan(spec, facts(objects=retried, pods=pods))
    slot = naming.Slot("vector-add", "team-a", "team-a", planner.plan(spec, facts()).slots[0].node, DIGEST_A,
                       shared=True)
    assert {(a.verb, a.kind) for a in result.actions if a.name in (slot.pvc_name(), slot.job_name())} == {
        ("create", "PersistentVolumeClaim"), ("replace", "Job")}
    assert not any(EXTRACTION_FAILED_LABEL in a.body["metadata"].get("labels", {}) for a in result.actions
                   if a.name == slot.pvc_name())

    moved = planner.plan(make_spec(digest=DIGEST_B), facts(objects=recorded, pods=pods))
    created = [a for a in moved.actions if a.verb == "create" and a.kind in ("PersistentVolumeClaim", "Job")]
    assert created and all(EXTRACTION_FAILED_LABEL not in a.body["metadata"]["labels"] for a in created)
    # The failed slots of the old digest were never extracted: nothing keeps them.
    assert {a.verb for a in moved.actions if a.body["metadata"].get("labels", {}).get(DIGEST_LABEL) == SHORT_A
            } == {"delete"}


def test_a_record_for_another_digest_or_job_or_an_unreadable_one():
    pvc = failure_record.record({"metadata": {"name": "p"}}, SHORT_A, failure_record.Failure("R", "m" * 5000, job="h"))
    assert failure_record.recorded(pvc, "b" * 12) is None
    assert failure_record.recorded(pvc, SHORT_A, "other-hash") is None
    said = failure_record.recorded(pvc, SHORT_A, "h")
    assert len(said.message) == failure_record.MAX_MESSAGE
    # Written back as it was read, so a rerun never rewrites a record.
    assert failure_record.record({"metadata": {"name": "p"}}, SHORT_A, said)["metadata"] == pvc["metadata"]
    assert failure_record.job_failure({"metadata": {"name": "j"}, "status": {"conditions": [
        {"type": "Failed", "status": "True"}]}}, []).reason == failure_record.UNKNOWN_REASON
    pvc["metadata"]["annotations"][EXTRACTION_FAILURE_ANNOTATION] = "not json"
    assert failure_record.recorded(pvc, SHORT_A) is None
    # A Job still running is no failure; a slot recorded failed but whose PVC is gone is Pending again.
    assert failure_record.job_failure({"metadata": {"name": "j"}, "status": {}}, []) is None
    slot = planner.SlotState("current", "team-a", "n", SHORT_A, "p", "j")
    assert slot_phase(slot, None, None, [])[0] == PENDING
