"""The cache resource's bounded status: counts, the worst problems and exclusion reasons, at any cluster size."""

import json

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import summary as status_summary
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    summary_status,
)
from tests.helpers.distribute import TAINT, distribution, large_cluster_result

NOW = "2026-11-24T12:00:00Z"
BOUND = 16 * 1024


def test_status_of_5000_nodes_by_3_namespaces_stays_under_the_bound():
    result = large_cluster_result()
    body = summary_status(distribution(result["status"], excluded=result["excluded_nodes"]), NOW)
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


def test_the_kernel_overlay_is_in_the_status_only_when_the_image_gets_it():
    result = large_cluster_result()
    overlaid = summary_status(distribution(result["status"], overlay_variable="TRITON_CACHE_DIR"), NOW)
    assert overlaid["kernelOverlay"] == {"variable": "TRITON_CACHE_DIR"}
    assert "kernelOverlay" not in summary_status(distribution(result["status"]), NOW)
