"""The cache_distribute and cache_reconcile results: bounded at any cluster size unless node_details asks."""

import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import tasks
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import module_result
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import summary as status_summary
from tests.helpers.distribute import large_cluster_result

# The whole result of one ClusterGKMCache at 5,000 nodes x 3 namespaces; the per-slot entries alone pass 4 MB.
BOUND = 16 * 1024


def module_result_at_scale():
    """A distribution result as runner.distribute returns it: 5,000 GPU nodes x 3 namespaces, 50 failed nodes,
    20 stuck ones and 1,500 nodes that do not get the cache."""
    result = large_cluster_result()
    counts = result["status"]["counts"]
    eligible = sorted({entry["node"] for entry in result["status"]["entries"] if entry.get("pvc")})
    result.update(changed=False, plan={"summary": {}, "actions": []}, eligible_nodes=eligible, node_labels=[],
                  scrub={"nodes": []}, api_requests=15, api_dry_runs=0, api_writes=0, duration_seconds=9.5,
                  cache=dict(result["cache"], name="llama-70b-kernels", namespace="", scope="cluster"),
                  node_objects={"created": 0, "patched": 0, "deleted": 0, "conflicts": 0})
    assert counts["nodes"] == len(eligible) == 5000
    return result


def size(document):
    return len(json.dumps(document, separators=(",", ":")))


def test_the_result_at_5000_nodes_by_3_namespaces_stays_under_the_bound():
    full = module_result_at_scale()
    bounded = module_result.without_node_details(full)
    assert size(bounded) < BOUND, size(bounded)
    assert size(full) > 4 * 1024 * 1024  # what the same run returned with every entry and node list
    status = bounded["status"]
    assert "entries" not in status and "eligible_nodes" not in bounded and "excluded_nodes" not in bounded
    assert status["counts"] == full["status"]["counts"] and status["phase"] == "Error"
    assert len(status["problems"]) == status_summary.MAX_PROBLEMS and status["problem_count"] == 50 * 3 + 20 * 3
    assert len(status["unschedulable"]) == status_summary.MAX_PROBLEMS and status["unschedulable_count"] == 20 * 3
    # The reasons in the module's option names (the resource's status says spec.podTemplate...).
    assert [(line["reason"], line["nodeCnt"]) for line in bounded["excluded_reasons"]] == [
        ("Incompatible", 500), ("NoGPU", 500), ("UntoleratedTaint", 500)]
    assert "(add a toleration to pod_template.spec.tolerations)" in bounded["excluded_reasons"][2]["message"]
    # Nothing else is touched, and the full result is left as it was (the resource's status is made from it).
    assert {key: bounded[key] for key in ("plan", "cache", "api_requests", "node_objects")} == {
        key: full[key] for key in ("plan", "cache", "api_requests", "node_objects")}
    assert len(full["status"]["entries"]) == 15000 + 500 and len(full["eligible_nodes"]) == 5000


def test_problems_keep_the_entries_fields_and_name_each_distinct_reason_before_repeating_one():
    entries = [{"namespace": "a", "node": "n%02d" % n, "phase": "Error", "reason": "BackoffLimitExceeded",
                "message": "backoff", "pvc": "p%d" % n, "job": "j%d" % n} for n in range(20)]
    entries.append({"namespace": "b", "node": "n99", "phase": "Error", "reason": "ToolsImageNotPullable",
                    "message": "cannot pull the tools image", "fix": ["extract_image (gkm_tools_image)"]})
    entries.append({"namespace": "a", "node": "n50", "phase": "Pending", "reason": "Unschedulable", "message": "taint"})
    bounded = module_result.without_node_details({"status": {"phase": "Error", "counts": {}, "entries": entries}})
    problems = bounded["status"]["problems"]
    assert [p["reason"] for p in problems[:2]] == ["BackoffLimitExceeded", "ToolsImageNotPullable"]
    assert problems[1] == entries[20]  # as the entry says it, in the module's option names
    assert {p["phase"] for p in problems} == {"Error"} and bounded["status"]["problem_count"] == 22


def test_a_result_without_a_status_is_returned_as_it_is():
    refused = {"reason": "InvalidSpec", "writes": 0}
    assert module_result.without_node_details(refused) is refused


class Call:
    """What tasks.py reads of common/module.py's ModuleCall here: the parameters."""

    def __init__(self, node_details):
        self.params = {"node_details": node_details}


@pytest.mark.parametrize("node_details", [False, True])
def test_a_refusal_carries_the_same_result_as_a_success(node_details):
    full = module_result_at_scale()

    def refuse():
        raise GkmError("timed out waiting for extraction", full)

    with pytest.raises(GkmError) as raised:
        tasks.reported(Call(node_details), refuse)
    assert ("entries" in raised.value.result["status"]) is node_details
    assert ("eligible_nodes" in raised.value.result) is node_details
    assert tasks.reported(Call(node_details), lambda: full) == (
        full if node_details else module_result.without_node_details(full))
