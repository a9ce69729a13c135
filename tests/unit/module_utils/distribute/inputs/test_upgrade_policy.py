"""spec.upgradePolicy: defaults, counts and percentages, and errors that name the field and the fix."""

import pathlib

import pytest
import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.upgrade_policy import (
    UpgradePolicyError,
    parse_upgrade_policy,
)
from tests.helpers.paths import ROOT

CRDS = pathlib.Path(ROOT) / "roles" / "gkm" / "files" / "crds"


def test_defaults_are_a_quarter_unpaused_by_name_and_no_failure_tolerated():
    policy = parse_upgrade_policy(None)
    assert policy.to_dict() == {"maxUnavailable": "25%", "paused": False, "order": "name", "failureThreshold": "0",
                                "restart": []}
    assert (policy.unavailable_budget(20), policy.failure_budget(20)) == (5, 0)


@pytest.mark.parametrize("value, total, budget", [
    (3, 20, 3),
    ("25%", 20, 5),
    ("25%", 3, 1),  # rounds down, but a rollout always moves
    ("100%", 7, 7),
    (10, 4, 10),
])
def test_max_unavailable_as_count_or_percentage(value, total, budget):
    assert parse_upgrade_policy({"maxUnavailable": value}).unavailable_budget(total) == budget


def test_failure_threshold_percentage_rounds_down():
    policy = parse_upgrade_policy({"failureThreshold": "10%"})
    assert (policy.failure_budget(20), policy.failure_budget(9)) == (2, 0)


def test_order_by_label_key():
    assert parse_upgrade_policy({"order": "topology.kubernetes.io/zone"}).order == "topology.kubernetes.io/zone"
    assert parse_upgrade_policy({"order": "rack"}).order == "rack"


@pytest.mark.parametrize("value, message", [
    ({"maxUnavailable": 0}, r"spec.upgradePolicy.maxUnavailable 0 would never upgrade a node.*paused: true"),
    ({"maxUnavailable": "0%"}, r"maxUnavailable 0 would never"),
    ({"maxUnavailable": "25"}, r"spec.upgradePolicy.maxUnavailable must be a whole number >= 1 or a percentage"),
    ({"maxUnavailable": "150%"}, r"maxUnavailable must be .*got '150%'"),
    ({"maxUnavailable": True}, r"maxUnavailable must be"),
    ({"failureThreshold": -1}, r"spec.upgradePolicy.failureThreshold must be a whole number >= 0"),
    ({"paused": "yes"}, r"spec.upgradePolicy.paused must be true or false"),
    ({"order": "bad key/with/slashes"}, r"spec.upgradePolicy.order must be \"name\" or a node label key"),
    ({"maxParallel": 2}, r"spec.upgradePolicy has unknown field\(s\) maxParallel; it takes maxUnavailable"),
    (["maxUnavailable"], r"spec.upgradePolicy must be a mapping"),
])
def test_bad_policies_name_the_field_and_the_fix(value, message):
    with pytest.raises(UpgradePolicyError, match=message):
        parse_upgrade_policy(value)


def test_resource_errors_name_the_resource():
    resource = {"kind": "GKMCache", "metadata": {"name": "llm", "namespace": "a"},
                "spec": {"image": "i", "upgradePolicy": {"maxUnavailable": "x"}}}
    with pytest.raises(UpgradePolicyError, match=r"^GKMCache llm: spec.upgradePolicy.maxUnavailable must be"):
        cache_cr.upgrade_policy(resource)
    resource["spec"]["upgradePolicy"] = {"maxUnavailable": 2, "paused": True}
    assert cache_cr.upgrade_policy(resource).paused is True


@pytest.mark.parametrize("crd", ["gkm.io_gkmcaches.yaml", "gkm.io_clustergkmcaches.yaml"])
def test_both_crds_declare_every_policy_field(crd):
    document = yaml.safe_load((CRDS / crd).read_text())
    spec = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    fields = spec["properties"]["upgradePolicy"]["properties"]
    assert set(fields) == set(parse_upgrade_policy(None).to_dict())
    for scale in ("maxUnavailable", "failureThreshold"):
        assert fields[scale]["x-kubernetes-int-or-string"] is True
