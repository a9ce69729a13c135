"""Refusals and unplaceable caches as a cache resource's status, without a cluster."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import resource_terms
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply import dry_run
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import (
    DistributeError,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, scheduling
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import outcome
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    COUNT_NAMES,
    summary_status,
)
from tests.helpers.distribute import distribution, facts, make_spec

COUNTS = [crd_name for _name, crd_name in COUNT_NAMES]


def test_error_status_replaces_every_field_of_the_last_run():
    status = outcome.error_status("ImageUnresolvable", "image x: tag v9 not found", "t", COUNTS)
    assert status["phase"] == "Error" and status["resolvedDigest"] == "" and status["problems"] == []
    assert all(status[name] == 0 for name in COUNTS)
    ready, gkm = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "ImageUnresolvable")
    assert (gkm["type"], gkm["status"]) == ("Error", "True")
    assert ready["message"] == gkm["message"] == "image x: tag v9 not found"
    # Computed against an Extracted status, the merge patch of it leaves nothing of that status behind.
    extracted_status = {"phase": "Extracted", "counts": {"nodes": 3}, "entries": [{"node": "n", "phase": "Extracted"}]}
    extracted = summary_status(distribution(extracted_status, "sha256:a"), "t")
    assert set(extracted) <= set(status)


def test_a_missing_namespace_is_gkms_no_namespace_condition():
    status = outcome.error_status(outcome.NO_NAMESPACE, "namespace(s) team-z do not exist", "t", COUNTS)
    assert [c["type"] for c in status["conditions"]] == ["Ready", "NoNamespace"]


@pytest.mark.parametrize("message, expected", [
    ("invalid pod_template.spec.tolerations[0].value", "invalid spec.podTemplate.spec.tolerations[0].value"),
    ("storage_class_name 'x' does not exist", "spec.storageClassName 'x' does not exist"),
    ("set access_modes or workload_namespaces", "set spec.accessModes or spec.workloadNamespaces"),
    ("image pod_templates and x.pod_template stay", "image pod_templates and x.pod_template stay"),
])
def test_messages_name_the_resource_fields(message, expected):
    assert resource_terms(message) == expected


def test_the_reason_comes_from_the_error_or_its_result():
    assert outcome.failure_reason(DistributeError("x", reason="WriteFailed")) == "WriteFailed"
    assert outcome.failure_reason(cache_cr.ResourceError("spec.image is required")) == "InvalidSpec"
    assert outcome.failure_reason(GkmError("some refusal from planning")) == outcome.DEFAULT_REASON
    assert outcome.failure_reason(planner.PlanError("n", reason="NoNamespace")) == "NoNamespace"


@pytest.mark.parametrize("toleration, field", [
    ({"key": "gpu", "operator": "Exists", "value": "true", "effect": "NoSchedule"},
     "pod_template.spec.tolerations[0].value must be empty when operator is Exists"),
    ({"key": "gpu", "operator": "Exist", "effect": "NoSchedule"},
     "pod_template.spec.tolerations[0].operator 'Exist' is not an operator: use Equal or Exists"),
    ({"operator": "Equal", "value": "x"}, "pod_template.spec.tolerations[0].key is required"),
    ({"key": "gpu", "operator": "Exists", "effect": "NoSchedul"},
     "pod_template.spec.tolerations[0].effect 'NoSchedul'"),
])
def test_an_invalid_toleration_names_its_field_not_untolerated_taints(toleration, field):
    spec = make_spec(pod_template={"spec": {"tolerations": [toleration]}})
    with pytest.raises(planner.PlanError) as raised:
        planner.plan(spec, facts())
    assert field in str(raised.value)
    assert "untolerated" not in str(raised.value)
    assert raised.value.reason == "InvalidSpec"


def test_valid_tolerations_pass():
    assert scheduling.toleration_problems([
        {"operator": "Exists"}, {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
        {"key": "gpu", "value": "true", "effect": "NoSchedule"}]) == []


def test_an_unplaced_cache_is_pending_with_the_reason_and_the_fix():
    status = {
        "phase": "Pending", "counts": {}, "entries": [],
        "unplaced": "no node is eligible for the cache yet: w-1, w-2: untolerated taint gpu=true:NoSchedule "
                    "(add a toleration to pod_template.spec.tolerations)"}
    ready = summary_status(distribution(status, "sha256:a"), "t")["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "Pending")
    assert ready["message"] == ("Pending: no node is eligible for the cache yet: w-1, w-2: untolerated taint "
                                "gpu=true:NoSchedule (add a toleration to spec.podTemplate.spec.tolerations)")


def test_server_messages_name_the_pod_template_fields_for_jobs_only():
    message = ('Job.batch "j" is invalid: [spec.template.spec.tolerations[0].operator: Invalid value, '
               'spec.template.labels: Invalid value: "x!"]')
    assert dry_run.user_fields("Job", message) == (
        'Job.batch "j" is invalid: [pod_template.spec.tolerations[0].operator: Invalid value, '
        'pod_template.metadata.labels: Invalid value: "x!"]')
    assert dry_run.user_fields("PersistentVolumeClaim", "spec.template.spec.x") == "spec.template.spec.x"
    assert resource_terms(dry_run.user_fields("Job", "spec.template.spec.priorityClassName: x")) == (
        "spec.podTemplate.spec.priorityClassName: x")


def test_one_slot_object_per_kind_and_namespace_is_dry_run_and_none_on_a_no_op_rerun():
    spec = make_spec()
    first = planner.plan(spec, facts())
    actions = dry_run.dry_run_actions(first, set())
    shapes = {(a.kind, a.namespace) for a in first.actions}
    assert len(first.actions) > len(shapes)  # several nodes: their slots share a representative
    assert sorted((a.kind, a.namespace or "") for a in actions) == sorted((k, n or "") for k, n in shapes)
    live = {}
    for obj in first.desired:
        live.setdefault(obj["kind"], []).append(obj)
    rerun = planner.plan(spec, facts(objects=live))
    assert rerun.actions == [] and dry_run.dry_run_actions(rerun, set()) == []
    # Objects in a namespace the plan creates cannot be dry-run yet.
    assert dry_run.dry_run_actions(first, {"team-a"}) == [a for a in actions if a.namespace != "team-a"]
