import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    carry_transition_times,
    status_differs,
    summary_status,
)
from tests.helpers.distribute import EXTRACTED_STATUS, distribution

DEFAULTS = {"extract_image": "tools:1", "create_pvs": "auto", "wait": True}


def test_namespaced_resource_maps_spec_over_defaults():
    params = cache_cr.distribute_params({
        "kind": "GKMCache", "metadata": {"name": "vector-add", "namespace": "team-a"},
        "spec": {"image": "reg/cache:v1", "storageClassName": "standard",
                 "podTemplate": {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}},
    }, DEFAULTS)
    assert params["scope"] == "namespaced" and params["namespace"] == "team-a"
    assert params["access_modes"] == ["ReadWriteOnce"]  # GKM's default
    assert params["storage_class_name"] == "standard"
    assert params["pod_template"]["spec"]["tolerations"][0]["key"] == "gpu"
    assert params["extract_image"] == "tools:1" and params["wait"] is True
    assert DEFAULTS == {"extract_image": "tools:1", "create_pvs": "auto", "wait": True}  # not mutated


def test_cluster_resource_maps_workload_namespaces():
    params = cache_cr.distribute_params({
        "kind": "ClusterGKMCache", "metadata": {"name": "llm"},
        "spec": {"image": "reg/llm:v2", "accessModes": ["ReadOnlyMany"], "workloadNamespaces": ["a", "b"]},
    }, DEFAULTS)
    assert (params["scope"], params["namespace"], params["workload_namespaces"]) == ("cluster", None, ["a", "b"])
    assert params["access_modes"] == ["ReadOnlyMany"]


@pytest.mark.parametrize("resource, message", [
    ({"kind": "GKMCache", "metadata": {"name": "x", "namespace": "n"}, "spec": {}}, "spec.image is required"),
    ({"kind": "ClusterGKMCache", "metadata": {"name": "x"}, "spec": {"image": "i"}}, "spec.workloadNamespaces"),
    ({"kind": "Pod", "metadata": {"name": "x"}, "spec": {"image": "i"}}, "kind must be one of"),
])
def test_bad_resources_name_the_field(resource, message):
    with pytest.raises(cache_cr.ResourceError, match=message):
        cache_cr.distribute_params(resource, DEFAULTS)


def test_paths():
    assert cache_cr.resource_path("GKMCache", "c", "ns") == "/apis/gkm.io/v1alpha1/namespaces/ns/gkmcaches/c"
    assert cache_cr.resource_path("ClusterGKMCache") == "/apis/gkm.io/v1alpha1/clustergkmcaches"
    with pytest.raises(cache_cr.ResourceError, match="needs a namespace"):
        cache_cr.resource_path("GKMCache", "c")


def test_status_uses_gkm_names_and_ready_condition():
    status = summary_status(distribution(EXTRACTED_STATUS), "2026-11-23T09:00:00Z")
    assert (status["phase"], status["nodeCnt"], status["nodeInUseCnt"], status["nodeNotInUseCnt"]) == (
        "Extracted", 3, 1, 2)
    assert status["resolvedDigest"] == "sha256:abc"
    assert status["conditions"][0]["type"] == "Ready" and status["conditions"][0]["status"] == "True"
    assert "nodes" not in status and (status["problems"], status["problemCnt"]) == ([], 0)


def test_unschedulable_jobs_explain_the_fix():
    status = dict(EXTRACTED_STATUS, phase="Pending", unschedulable=[
        {"message": "3 node(s) had untolerated taint {gpu: true}", "fix": "pod_template.spec.tolerations"}])
    condition = summary_status(distribution(status, "d"), "t")["conditions"][0]
    assert condition["status"] == "False"
    # The fix names the field the resource's author wrote, not the module option.
    assert "untolerated taint {gpu: true}" in condition["message"]
    assert "(fix: spec.podTemplate.spec.tolerations)" in condition["message"]


def test_timestamps_alone_do_not_make_a_write():
    first = summary_status(distribution(EXTRACTED_STATUS), "2026-11-23T09:00:00Z")
    second = summary_status(distribution(EXTRACTED_STATUS), "2026-11-23T10:00:00Z")
    assert not status_differs(first, second)
    changed = summary_status(distribution(EXTRACTED_STATUS, "sha256:new"), "2026-11-23T10:00:00Z")
    assert status_differs(first, changed)
    kept = carry_transition_times(first, changed)
    assert kept["conditions"][0]["lastTransitionTime"] == "2026-11-23T09:00:00Z"
