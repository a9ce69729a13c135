"""The cache resource's bounded status: counts, the worst problems and exclusion reasons, at any cluster size."""

import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot, short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.job_pods import JOB_NAME_LABEL
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import SlotState
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import summary as status_summary
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    summary_status,
)

DIGEST = "sha256:" + "d" * 64
NAMESPACES = ("inference-prod", "inference-staging", "training-batch")
NOW = "2026-11-24T12:00:00Z"
TAINT = "untolerated taint nvidia.com/gpu=present:NoSchedule (add a toleration to pod_template.spec.tolerations)"
INCOMPATIBLE = "GPU cuda/80/32 does not match the image's targets (cuda/90/32)"
NO_GPU = "no gkm.io/gpu-* labels: not a GPU node (use compatibility: ignore to include it)"
BOUND = 16 * 1024


def job(name, namespace, condition):
    conditions = [{"type": condition, "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff"}]
    return {"metadata": {"name": name, "namespace": namespace}, "status": {"conditions": conditions}}


def unschedulable_pod(job_name, namespace):
    return {"metadata": {"name": job_name + "-x", "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gkm.cluster", JOB_NAME_LABEL: job_name}},
            "spec": {"volumes": []},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/5000 nodes are available: 1 node(s) had untolerated taint {maintenance: yes}."}]}}


def large_cluster_result(nodes=5000, failed_every=100, stuck_every=250):
    """A distribution result of one ClusterGKMCache over 3 namespaces on `nodes` GPU nodes, with failures,
    stuck Jobs and 1,500 more nodes that do not get the cache (taint, GPU, no GPU)."""
    names = ["gpu-a100-pool-%05d.cluster.internal" % number for number in range(nodes)]
    slots, jobs, pods = [], [], []
    for index, node in enumerate(names):
        for namespace in NAMESPACES:
            slot = Slot("llama-70b-kernels", "", namespace, node, DIGEST)
            slots.append(SlotState("current", namespace, node, short_digest(DIGEST), slot.pvc_name(), slot.job_name(),
                                   slot.pv_name()))
            if index % failed_every == 0:
                jobs.append(job(slot.job_name(), namespace, "Failed"))
            elif index % stuck_every == 1:
                jobs.append(job(slot.job_name(), namespace, "Suspended"))
                pods.append(unschedulable_pod(slot.job_name(), namespace))
            else:
                jobs.append(job(slot.job_name(), namespace, "Complete"))
    excluded = {}
    for number in range(1500):
        reason = (TAINT, INCOMPATIBLE, NO_GPU)[number % 3]
        excluded["other-pool-%05d.cluster.internal" % number] = [reason]
    incompatible = sorted(node for node, reasons in excluded.items() if reasons == [INCOMPATIBLE])
    result = status.cache_status(slots, names, incompatible, excluded, {"Job": jobs}, pods,
                                 {"nvidia.com/gpu=present:NoSchedule": 500})
    return {"status": result, "cache": {"digest": DIGEST}, "excluded_nodes": excluded}


def test_status_of_5000_nodes_by_3_namespaces_stays_under_the_bound():
    result = large_cluster_result()
    body = summary_status(result, NOW)
    size = len(json.dumps(body, separators=(",", ":")))
    assert size < BOUND, size
    assert body["nodeCnt"] == 5000 and body["nodeErrorCnt"] == 50 and body["phase"] == "Error"
    assert len(body["problems"]) == status_summary.MAX_PROBLEMS
    assert body["problemCnt"] == 50 * 3 + 20 * 3  # every failed and every stuck slot, each namespace
    assert {p["phase"] for p in body["problems"]} == {"Error"}
    assert (body["nodeExcludedCnt"], body["nodeIncompatibleCnt"]) == (1500, 500)
    assert [(line["reason"], line["nodeCnt"]) for line in body["excludedReasons"]] == [
        ("Incompatible", 500), ("NoGPU", 500), ("UntoleratedTaint", 500)]
    taint = body["excludedReasons"][2]
    assert "spec.podTemplate.spec.tolerations" in taint["message"] and len(taint["nodes"]) == 3
    # The per-slot entries this replaces pass etcd's 1.5 MiB request limit at this size.
    assert len(json.dumps(result["status"]["entries"], separators=(",", ":"))) > 1536 * 1024


def test_worst_problems_come_first_and_the_rest_is_counted():
    entries = [
        {"namespace": "a", "node": "n3", "phase": "Outdated", "message": "mounted by app"},
        {"namespace": "a", "node": "n2", "phase": "Pending", "reason": "Unschedulable", "message": "taint",
         "fix": ["pod_template.spec.tolerations"]},
        {"namespace": "a", "node": "n4", "phase": "Pending", "message": "waiting for the extraction pod to start"},
        {"namespace": "b", "node": "n1", "phase": "Error", "reason": "ToolsImageNotPullable", "message": "pull",
         "pvc": "p", "job": "j"},
        {"namespace": "a", "node": "n5", "phase": "Extracted"},
    ]
    problems, total = status_summary.worst_problems(entries, limit=2)
    assert total == 3
    assert problems == [
        {"namespace": "b", "node": "n1", "phase": "Error", "reason": "ToolsImageNotPullable", "message": "pull",
         "pvc": "p", "job": "j"},
        {"namespace": "a", "node": "n2", "phase": "Pending", "reason": "Unschedulable", "message": "taint",
         "fix": ["spec.podTemplate.spec.tolerations"]},
    ]


def test_each_distinct_reason_is_a_line_most_nodes_first_and_the_lines_are_bounded():
    excluded = {"gpu-%02d" % n: ["untolerated taint team=%d:NoSchedule (add a toleration to %s)" % (
        n % 20, "pod_template.spec.tolerations")] for n in range(40)}
    excluded.update({"gpu-9%d" % n: [TAINT] for n in range(5)})
    lines = status_summary.excluded_reasons(excluded)
    assert len(lines) == status_summary.MAX_REASON_LINES
    assert (lines[0]["nodeCnt"], lines[0]["nodes"]) == (5, ["gpu-90", "gpu-91", "gpu-92"])
    assert "nvidia.com/gpu=present:NoSchedule" in lines[0]["message"]
    assert lines[-1]["reason"] == "Other" and lines[-1]["message"] == "6 more reasons"
    assert sum(line["nodeCnt"] for line in lines) == 45
