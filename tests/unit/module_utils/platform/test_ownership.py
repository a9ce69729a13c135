"""Ownership records and the install/remove plan of platform components."""

import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.platform import ownership
from ansible_collections.gkm.cluster.plugins.module_utils.platform.ownership_store import deployment_version


def record(version="v1.18.2"):
    return ownership.new_record(version, "manifest", "/m.yaml", "cert-manager", True, "2026-01-01T00:00:00Z")


@pytest.mark.parametrize("wanted, found, owned_version, desired, action", [
    ("present", False, None, "v1.18.2", "install"),
    ("present", False, "v1.18.2", "v1.18.2", "install"),   # recorded but deleted by hand: install again
    ("present", True, None, "v1.18.2", "skip"),            # someone else's: leave it
    ("present", True, "v1.17.0", "v1.18.2", "upgrade"),
    ("present", True, "v1.18.2", "v1.18.2", "apply"),
    ("absent", True, "v1.18.2", None, "remove"),
    ("absent", False, "v1.18.2", None, "remove"),          # ours, half gone: remove the rest
    ("absent", True, None, None, "keep"),
    ("absent", False, None, None, "none"),
])
def test_plan(wanted, found, owned_version, desired, action):
    owned = record(owned_version) if owned_version else None
    result = ownership.plan(wanted, found, "v1.17.0" if found else None, owned, desired)
    assert result["action"] == action
    assert result["owned"] is (owned is not None)


def test_skip_reason_says_whose_it_is_and_what_is_left_alone():
    reason = ownership.plan("present", True, "v1.16.1", None, "v1.18.2")["reason"]
    assert "v1.16.1" in reason and "not installed by gkm.cluster" in reason and "not be upgraded or removed" in reason


def test_records_round_trip_through_the_configmap_and_ignore_the_timestamp():
    configmap = ownership.configmap_with(None, "gkm-cluster-ownership", "gkm-system", "cert-manager", record())
    assert configmap["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gkm.cluster"}
    parsed = ownership.parse_record(configmap, "cert-manager")
    assert parsed == record()
    later = dict(record(), recorded_at="2027-01-01T00:00:00Z")
    assert ownership.same_record(parsed, later)
    assert not ownership.same_record(parsed, record("v1.18.3"))
    assert ownership.parse_record(configmap, "kyverno") is None


def test_forgetting_one_component_keeps_the_others():
    configmap = ownership.configmap_with(None, "o", "ns", "cert-manager", record())
    configmap = ownership.configmap_with(configmap, "o", "ns", "kyverno", record("v1.15.1"))
    configmap = ownership.configmap_with(configmap, "o", "ns", "cert-manager", None)
    assert list(configmap["data"]) == ["kyverno"]
    assert json.loads(configmap["data"]["kyverno"])["version"] == "v1.15.1"


@pytest.mark.parametrize("data, message", [
    ({"cert-manager": "{not json"}, "is not JSON"),
    ({"cert-manager": "{}"}, "has no 'version'"),
])
def test_broken_records_say_which_key_to_fix(data, message):
    configmap = {"metadata": {"name": "gkm-cluster-ownership", "namespace": "gkm-system"}, "data": data}
    with pytest.raises(ownership.OwnershipError) as error:
        ownership.parse_record(configmap, "cert-manager")
    assert message in str(error.value)


def test_new_record_needs_a_version_and_a_known_method():
    with pytest.raises(ownership.OwnershipError, match="version is required"):
        ownership.new_record("", "manifest", "", "ns", False, "t")
    with pytest.raises(ownership.OwnershipError, match="method must be one of helm, manifest"):
        ownership.new_record("v1", "kubectl", "", "ns", False, "t")


def test_deployment_version_from_label_or_image_tag():
    labelled = {"metadata": {"labels": {"app.kubernetes.io/version": "v1.18.2"}}}
    assert deployment_version(labelled) == "v1.18.2"
    by_image = {"metadata": {}, "spec": {"template": {"spec": {"containers": [
        {"image": "registry:5000/jetstack/cert-manager-controller:v1.17.0@sha256:abc"}]}}}}
    assert deployment_version(by_image) == "v1.17.0"
    untagged = {"metadata": {}, "spec": {"template": {"spec": {"containers": [{"image": "registry:5000/x"}]}}}}
    assert deployment_version(untagged) is None
    assert deployment_version(None) is None
