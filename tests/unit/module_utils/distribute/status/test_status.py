"""Cache status: per-slot phases, GKM's counts and scheduler diagnostics, from plain API dicts."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    EXTRACTED_DIGEST_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.job_pods import JOB_NAME_LABEL
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import SlotState
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.slot_states import (
    scheduler_fix,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status

DIGEST = "a" * 12
NODES = ["n1", "n2", "n3"]
TAINT_MESSAGE = ("0/4 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, "
                 "3 node(s) had untolerated taint {gpu: true}. preemption: 0/4 nodes are available: "
                 "4 Preemption is not helpful for scheduling.")


def slot(node, outcome="current", digest=DIGEST, namespace="ns", users=None, reason=None):
    return SlotState(outcome, namespace, node, digest, "pvc-%s-%s" % (node or "shared", digest),
                     "job-%s-%s" % (node or "shared", digest), users=users, reason=reason)


def job(name, condition=None, namespace="ns", message="m"):
    conditions = [{"type": condition, "status": "True", "reason": "BackoffLimitExceeded", "message": message}] if (
        condition) else []
    return {"metadata": {"name": name, "namespace": namespace}, "status": {"conditions": conditions}}


def job_pod(job_name, phase="Pending", unschedulable=None, namespace="ns"):
    conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": unschedulable}] if unschedulable else []
    return {"metadata": {"name": job_name + "-x", "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gkm.cluster", JOB_NAME_LABEL: job_name}},
            "spec": {"volumes": []}, "status": {"phase": phase, "conditions": conditions}}


def workload(name, claim, node, phase="Running", namespace="ns"):
    return {"metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": claim}}]},
            "status": {"phase": phase}}


def test_phases_and_counts_of_a_mixed_rwo_cache():
    slots = [slot("n1"), slot("n2"), slot("n3"), slot("n1", outcome="outdated", digest="b" * 12, reason="mounted")]
    live = {"Job": [job(slots[0].job, "Complete"), job(slots[1].job, "Failed", message="backoff"),
                    job(slots[2].job)],
            "PersistentVolumeClaim": []}
    pods = [job_pod(slots[2].job, phase="Running"),
            workload("app", slots[0].pvc, "n1"), workload("app2", slots[0].pvc, "n1"),
            workload("old", slots[3].pvc, "n1"), workload("gone", slots[0].pvc, "n1", phase="Succeeded")]
    result = status.cache_status(slots, NODES, [], {}, live, pods)
    assert [e["phase"] for e in result["entries"]] == ["Extracted", "Error", "Extracting", "Outdated"]
    assert result["entries"][1]["message"] == "BackoffLimitExceeded: backoff"
    assert result["counts"] == {"nodes": 3, "node_in_use": 1, "node_not_in_use": 0, "node_error": 1,
                                "pod_running": 2, "pod_outdated": 1}
    assert result["phase"] == "Error"


def test_extracted_marker_survives_the_job_ttl_and_idle_nodes_count_as_not_in_use():
    slots = [slot("n1"), slot("n2")]
    live = {"PersistentVolumeClaim": [
        {"metadata": {"name": s.pvc, "namespace": "ns",
                      "annotations": {EXTRACTED_DIGEST_ANNOTATION: "sha256:" + "a" * 64}}}
        for s in slots]}
    result = status.cache_status(slots, ["n1", "n2"], [], {}, live, [workload("app", slots[1].pvc, "n2")])
    assert result["counts"] == {"nodes": 2, "node_in_use": 1, "node_not_in_use": 1, "node_error": 0,
                                "pod_running": 1, "pod_outdated": 0}
    assert result["phase"] == "Running"
    idle = status.cache_status(slots, ["n1", "n2"], [], {}, live, [])
    assert idle["phase"] == "Extracted"


def test_unschedulable_job_reports_the_scheduler_message_and_the_fix():
    shared = slot("")
    result = status.cache_status([shared], NODES, [], {}, {"Job": [job(shared.job)]},
                                 [job_pod(shared.job, unschedulable=TAINT_MESSAGE)], {"gpu=true:NoSchedule": 3})
    entry = result["entries"][0]
    assert entry["phase"] == "Pending"
    assert "untolerated taint {gpu: true}" in entry["message"]
    assert entry["fix"] == ["pod_template.spec.tolerations"]
    assert result["unschedulable"] == [{"namespace": "ns", "job": shared.job, "message": TAINT_MESSAGE,
                                        "fix": ["pod_template.spec.tolerations"],
                                        "untolerated_taints": {"gpu=true:NoSchedule": 3}}]
    assert result["phase"] == "Pending"


def test_failed_rox_job_marks_every_node_as_error():
    shared = slot("")
    result = status.cache_status([shared], NODES, [], {}, {"Job": [job(shared.job, "Failed")]}, [])
    assert result["counts"]["node_error"] == 3
    assert result["phase"] == "Error"


def test_incompatible_and_blocked_and_outdated_only():
    blocked = slot("", outcome="blocked", reason="PVC ns/c is mounted by app")
    old = slot("", outcome="outdated", digest="b" * 12, reason="mounted by app")
    result = status.cache_status([blocked, old], ["n1"], ["nv"], {"nv": ["GPU cuda/90/32 does not match"]},
                                 {}, [workload("app", old.pvc, "n1")])
    assert [(e["phase"], e.get("message")) for e in result["entries"]] == [
        ("Pending", "PVC ns/c is mounted by app"), ("Outdated", "mounted by app"),
        ("Incompatible", "GPU cuda/90/32 does not match")]
    assert result["counts"]["pod_outdated"] == 1
    assert result["phase"] == "Pending"


def test_no_slots_at_all_is_pending():
    assert status.cache_status([], [], [], {}, {}, [])["phase"] == "Pending"


def test_scheduler_fixes():
    assert scheduler_fix("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.") == [
        "pod_template.spec.nodeSelector / pod_template.spec.affinity"]
    assert scheduler_fix("3 Insufficient cpu") == [
        "free capacity on the nodes (the extraction Job requests cpu 100m, memory 128Mi)"]
    assert scheduler_fix("something new") == []


def test_caches_known_only_from_the_cluster():
    def obj(name, digest, created, node="n1", cache="c", cache_ns=""):
        return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": created, "labels": {
            "gkm.io/cache": cache, "gkm.io/cache-namespace": cache_ns, "gkm.io/digest": digest, "gkm.io/node": node}}}

    live = {"PersistentVolumeClaim": [obj("old", "b" * 12, "2026-01-01T00:00:00Z"),
                                      obj("new", DIGEST, "2026-02-01T00:00:00Z"),
                                      obj("other", DIGEST, "2026-02-01T00:00:00Z", cache="d", cache_ns="x")],
            "Job": [obj("job-new", DIGEST, "2026-02-01T00:00:01Z")]}
    caches = status.group_by_cache(live)
    assert sorted(caches) == [("c", ""), ("d", "x")]
    slots, nodes = status.slots_from_live(caches[("c", "")])
    assert [(s.pvc, s.outcome, s.job) for s in slots] == [("new", "current", "job-new"), ("old", "outdated", None)]
    assert nodes == ["n1"]


def test_objects_without_a_digest_label_still_get_a_status():
    """A PVC labelled by hand or by an older version: cache_info reports it instead of failing."""
    pvc = {"metadata": {"name": "hand-made", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z",
                        "labels": {"gkm.io/cache": "c", "gkm.io/node": "n1"},
                        "annotations": {EXTRACTED_DIGEST_ANNOTATION: "sha256:" + DIGEST}}}
    live = {"PersistentVolumeClaim": [pvc]}
    slots, nodes = status.slots_from_live(status.group_by_cache(live)[("c", "")])
    assert [(s.pvc, s.outcome, s.digest) for s in slots] == [("hand-made", "current", "")]
    result = status.cache_status(slots, nodes, [], {}, live, [])
    # Without a digest, the extraction marker cannot say which image is on the volume.
    assert [entry["phase"] for entry in result["entries"]] == ["Pending"]
