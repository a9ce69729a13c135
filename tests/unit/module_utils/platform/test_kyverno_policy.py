"""Kyverno signature policies for GKMCache images: shape, selection by label, and the signer identity rules."""

import pytest
import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.platform import kyverno_policy as kp

ISSUER = "https://token.actions.githubusercontent.com"
SUBJECT = "https://github.com/example-org/kernel-caches/.github/workflows/build.yml@refs/heads/main"
KEY = "-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----"


def keyless():
    return kp.attestor_entry(keyless_issuer=ISSUER, keyless_subject=SUBJECT)


def test_one_policy_per_format_selected_by_label_with_the_right_verification_type():
    policies = kp.render_verify_policies(["cosign-v2", "cosign-v3"], keyless())
    names = [policy["metadata"]["name"] for policy in policies]
    assert names == ["gkm-verify-gkmcache-cosign-v2", "gkm-verify-gkmcache-cosign-v3"]
    expected = [("cosign-v2", "Cosign"), ("cosign-v3", "SigstoreBundle")]
    for policy, (signature_format, verify_type) in zip(policies, expected):
        assert policy["apiVersion"] == "kyverno.io/v1" and policy["kind"] == "ClusterPolicy"
        (rule,) = policy["spec"]["rules"]
        (selector,) = rule["match"]["any"]
        assert selector["resources"]["kinds"] == ["gkm.io/v1alpha1/GKMCache"]
        assert selector["resources"]["selector"] == {"matchLabels": {"gkm.io/signature-format": signature_format}}
        assert rule["imageExtractors"] == {"GKMCache": [{"path": "/spec/image"}]}
        (verify,) = rule["verifyImages"]
        assert verify["type"] == verify_type
        assert verify["mutateDigest"] is True and verify["verifyDigest"] is True and verify["required"] is True
        assert verify["failureAction"] == "Enforce" and verify["imageReferences"] == ["*"]
        assert verify["attestors"] == [{"entries": [{"keyless": {"issuer": ISSUER, "subject": SUBJECT,
                                                                 "rekor": {"url": kp.PUBLIC_REKOR_URL}}}]}]
        assert policy["spec"]["webhookConfiguration"] == {"failurePolicy": "Fail", "timeoutSeconds": 30}
        assert "ClusterGKMCache" in policy["metadata"]["annotations"]["policies.kyverno.io/description"]


def test_policies_survive_a_yaml_round_trip():
    policies = kp.render_verify_policies(["cosign-v3"], kp.attestor_entry(public_key=KEY), ["quay.io/org/*"], "Audit")
    assert list(yaml.safe_load_all(yaml.safe_dump_all(policies))) == policies


def test_public_key_and_transparency_settings():
    entry = kp.attestor_entry(public_key=KEY + "\n", ignore_tlog=True, ignore_sct=True)
    assert entry == {"keys": {"publicKeys": KEY, "rekor": {"ignoreTlog": True}, "ctlog": {"ignoreSCT": True}}}
    entry = kp.attestor_entry(keyless_issuer=ISSUER, keyless_subject_regexp=r"^https://github\.com/example-org/",
                              rekor_url="https://rekor.example.com")
    assert entry == {"keyless": {"issuer": ISSUER, "subjectRegExp": r"^https://github\.com/example-org/",
                                 "rekor": {"url": "https://rekor.example.com"}}}


def test_no_identity_is_refused_with_what_to_set():
    with pytest.raises(kp.PolicyError) as error:
        kp.attestor_entry()
    message = str(error.value)
    assert "no signer identity is set" in message
    for variable in ("kyverno_attestor_public_key", "kyverno_attestor_keyless_issuer",
                     "kyverno_attestor_keyless_subject"):
        assert variable in message


@pytest.mark.parametrize("subject, regexp", [
    ("*", None), ("https://github.com/*", None), ("https://github.com/*/*", None),
    (None, ".*"), (None, "^https://github.com/"), (None, "@refs/heads/main$"),
])
def test_identities_that_match_any_signer_are_refused(subject, regexp):
    with pytest.raises(kp.PolicyError) as error:
        kp.attestor_entry(keyless_issuer=ISSUER, keyless_subject=subject, keyless_subject_regexp=regexp)
    assert "matches any signer" in str(error.value)


@pytest.mark.parametrize("arguments, expected", [
    ({"public_key": KEY, "keyless_issuer": ISSUER, "keyless_subject": SUBJECT}, "not both"),
    ({"public_key": "ssh-ed25519 AAAA"}, "must be a PEM public key"),
    ({"keyless_subject": SUBJECT}, "kyverno_attestor_keyless_issuer is required"),
    ({"keyless_issuer": "http://issuer", "keyless_subject": SUBJECT}, "https:// OIDC issuer"),
    ({"keyless_issuer": ISSUER}, "exactly one of"),
    ({"keyless_issuer": ISSUER, "keyless_subject": SUBJECT, "keyless_subject_regexp": "x"}, "exactly one of"),
    ({"keyless_issuer": ISSUER, "keyless_subject_regexp": "("}, "not a regular expression"),
])
def test_bad_attestor_settings_name_the_variable(arguments, expected):
    with pytest.raises(kp.PolicyError) as error:
        kp.attestor_entry(**arguments)
    assert expected in str(error.value)


@pytest.mark.parametrize("arguments, expected", [
    ({"formats": []}, "kyverno_signature_formats"),
    ({"formats": ["cosign-v4"]}, "kyverno_signature_formats"),
    ({"failure_action": "Warn"}, "kyverno_failure_action"),
    ({"image_references": []}, "kyverno_image_references"),
    ({"webhook_timeout_seconds": 31}, "kyverno_webhook_timeout_seconds"),
])
def test_bad_policy_settings_name_the_variable(arguments, expected):
    arguments = dict({"formats": ["cosign-v2"], "attestor": keyless()}, **arguments)
    with pytest.raises(kp.PolicyError) as error:
        kp.render_verify_policies(**arguments)
    assert expected in str(error.value)


@pytest.mark.parametrize("required, namespaces", [(True, None), (["team-b", "team-a", "team-a"], ["team-a", "team-b"])])
def test_where_signatures_are_required_the_first_format_takes_the_unlabelled_caches(required, namespaces):
    policies = kp.render_verify_policies(["cosign-v3", "cosign-v2"], keyless(), required=required)
    first, second = (policy["spec"]["rules"][0]["match"]["any"] for policy in policies)
    by_label = {"matchLabels": {"gkm.io/signature-format": "cosign-v2"}}
    assert [match["resources"]["selector"] for match in second] == [by_label]
    labelled, unlabelled = first
    assert labelled["resources"]["selector"] == {"matchLabels": {"gkm.io/signature-format": "cosign-v3"}}
    # NotIn also matches a GKMCache without the label: the owner cannot leave it out to skip the check.
    assert unlabelled["resources"]["selector"] == {"matchExpressions": [
        {"key": "gkm.io/signature-format", "operator": "NotIn", "values": ["cosign-v3", "cosign-v2"]}]}
    assert unlabelled["resources"]["kinds"] == ["gkm.io/v1alpha1/GKMCache"]
    assert unlabelled["resources"].get("namespaces") == namespaces
    assert "admin requires it" in policies[0]["metadata"]["annotations"]["policies.kyverno.io/description"]


@pytest.mark.parametrize("required", [False, None, []])
def test_without_a_requirement_only_labelled_caches_are_matched(required):
    for policy in kp.render_verify_policies(["cosign-v2", "cosign-v3"], keyless(), required=required):
        (rule,) = policy["spec"]["rules"]
        assert [match["resources"]["selector"]["matchLabels"] for match in rule["match"]["any"]] == [
            {"gkm.io/signature-format": policy["metadata"]["labels"]["gkm.io/signature-format"]}]


@pytest.mark.parametrize("required", ["team-a", [""], [1], {"team-a": True}])
def test_a_requirement_that_is_not_a_list_of_namespaces_names_the_variable(required):
    with pytest.raises(kp.PolicyError) as error:
        kp.render_verify_policies(["cosign-v2"], keyless(), required=required)
    assert "kyverno_require_signature" in str(error.value)
