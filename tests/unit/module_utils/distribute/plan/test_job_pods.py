"""From an extraction Job's pod states to the node's phase, reason, message and fix (pure, no cluster)."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import job_pods
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import SlotState
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.slot_states import (
    slot_phase,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    summary_status,
)
from tests.helpers.distribute import distribution

TOOLS = "registry.local/gkm/tools:1"
JOB = "job-n1"


def slot():
    return SlotState("current", "ns", "n1", "a" * 12, "pvc-n1", JOB)


def job(*conditions):
    return {"metadata": {"name": JOB, "namespace": "ns"},
            "status": {"conditions": [{"type": kind, "status": "True", "reason": reason, "message": message}
                                      for kind, reason, message in conditions]}}


def pod(phase="Pending", created="2026-11-24T07:00:00Z", init=(), main=(), node="n1"):
    """A Job pod with (state, fields) per init and main container."""
    def statuses(name, states):
        return [{"name": name, "image": TOOLS, "state": {state: fields}} for state, fields in states]

    return {"metadata": {"name": "%s-%s" % (JOB, created[-3:-1]), "namespace": "ns", "creationTimestamp": created,
                         "labels": {job_pods.JOB_NAME_LABEL: JOB, "app.kubernetes.io/managed-by": "gkm.cluster"}},
            "spec": {"nodeName": node},
            "status": {"phase": phase, "initContainerStatuses": statuses("first", init),
                       "containerStatuses": statuses("extract", main)}}


def phase_of(live_job, pods):
    return slot_phase(slot(), None, live_job, pods)


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "InvalidImageName"])
def test_tools_image_not_pullable_is_an_error_at_once_naming_image_node_and_fix(reason):
    waiting = pod(init=[("waiting", {"reason": reason, "message": "failed to pull: not found"})],
                  main=[("waiting", {"reason": "PodInitializing"})])
    phase, message, fixes, why = phase_of(job(), [waiting])
    assert (phase, why) == ("Error", "ToolsImageNotPullable")
    assert message == ("cannot pull the tools image %s on node n1: failed to pull: not found; build and push it "
                       "(make images REGISTRY=...) or set gkm_tools_image / gkm_registry_mirror" % TOOLS)
    assert fixes == ["extract_image (gkm_tools_image)", "gkm_registry_mirror"]


def test_extractor_refusal_reports_its_termination_message():
    refused = pod("Failed", main=[("terminated", {"exitCode": 1, "reason": "Error",
                                                  "message": "layer digest mismatch: expected sha256:1"})])
    phase, message, _fixes, why = phase_of(job(("Failed", "PodFailurePolicy", "Container extract ...")), [refused])
    assert (phase, why) == ("Error", "ExtractionRefused")
    assert message == "extraction failed on node n1: layer digest mismatch: expected sha256:1"


def test_unwritable_volume_names_the_option():
    unwritable = pod("Failed", main=[("terminated", {"exitCode": 4, "message": "cannot write /gkm as uid 1000"})])
    phase, message, fixes, why = phase_of(job(("Failed", "PodFailurePolicy", "")), [unwritable])
    assert (phase, why, fixes) == ("Error", "VolumeNotWritable", ["set_volume_owner", "storage_class_name"])
    assert "cannot write /gkm as uid 1000" in message


def test_a_retried_registry_outage_stays_pending_and_only_the_newest_pod_counts():
    first = pod("Failed", created="2026-11-24T07:00:01Z",
                main=[("terminated", {"exitCode": 3, "message": "registry r is unreachable"})])
    phase, message, fixes, why = phase_of(job(), [first])
    assert (phase, why) == ("Pending", "RegistryUnreachable") and "unreachable" in message and fixes
    retry = pod("Running", created="2026-11-24T07:00:20Z", main=[("running", {})])
    assert phase_of(job(), [first, retry]) == ("Extracting", None, [], None)


def test_without_a_termination_message_the_exit_code_is_said_and_a_bare_failed_job_keeps_its_condition():
    silent = pod("Failed", main=[("terminated", {"exitCode": 137, "reason": "OOMKilled"})])
    assert job_pods.pods_problem([silent]).message == "extraction failed on node n1: exit code 137 (OOMKilled)"
    assert phase_of(job(("Failed", "DeadlineExceeded", "Job was active longer than specified")), []) == (
        "Error", "DeadlineExceeded: Job was active longer than specified", [], "DeadlineExceeded")


def test_healthy_pods_show_no_problem():
    assert job_pods.pods_problem([]) is None
    assert job_pods.pods_problem([pod(init=[("terminated", {"exitCode": 0})], main=[("running", {})])]) is None
    assert phase_of(job(), [pod(main=[("waiting", {"reason": "ContainerCreating"})])])[0] == "Pending"


def test_entries_and_the_resource_status_carry_the_reason():

    pulling = pod(main=[("waiting", {"reason": "ErrImagePull", "message": "401"})])
    result = status.cache_status([slot()], ["n1"], [], {}, {"Job": [job()]}, [pulling])
    entry = result["entries"][0]
    assert (entry["phase"], entry["reason"]) == ("Error", "ToolsImageNotPullable")
    assert result["phase"] == "Error" and result["counts"]["node_error"] == 1 and result["unschedulable"] == []
    crd_status = summary_status(distribution(result, "sha256:x"), "now")
    assert crd_status["problems"][0]["reason"] == "ToolsImageNotPullable"
