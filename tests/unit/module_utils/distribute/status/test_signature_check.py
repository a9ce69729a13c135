"""The SignatureVerified condition: who checked a cache resource's image, said plainly."""

import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SIGNATURE_FORMAT_LABEL
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import signature_check as sc

IMAGE = "registry.example/caches/vllm@sha256:" + "a" * 64
NOW = "2026-11-24T12:00:00Z"


def cache(kind="GKMCache", labels=None, annotations=None, image=IMAGE):
    return {"kind": kind, "metadata": {"name": "c", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"image": image}}


def test_an_unlabelled_cache_gets_no_condition():
    assert sc.signature_condition(cache(), NOW) is None


TENANT_WRITABLE = "anyone who may edit the resource can write it"


def test_an_unlabelled_cache_the_admin_requires_checked_gets_the_condition():
    condition = sc.signature_condition(cache(), NOW, [entry("Extracted")], key_given=True, required=True)
    assert (condition["status"], condition["reason"]) == ("True", "VerifiedByExtraction")
    assert "cosign (v2 or v3) signature of %s" % IMAGE in condition["message"]


def test_kyverno_s_record_of_a_pass_is_a_note_never_a_verification():
    resource = cache(labels={SIGNATURE_FORMAT_LABEL: "cosign-v3"},
                     annotations={sc.KYVERNO_RECORD: json.dumps({IMAGE: "pass"})})
    condition = sc.signature_condition(resource, NOW)
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "SignatureVerified", "Unknown", "ReportedByKyverno")
    assert "records a pass for %s" % IMAGE in condition["message"] and TENANT_WRITABLE in condition["message"]
    assert "signature_public_key" in condition["message"] and condition["lastTransitionTime"] == NOW


def test_kyverno_s_record_without_the_tag_matches_the_tagged_pinned_image():
    tagged = "registry.example:5000/caches/vllm:v1@sha256:" + "a" * 64
    resource = cache(labels={SIGNATURE_FORMAT_LABEL: "cosign-v2"}, image=tagged,
                     annotations={sc.KYVERNO_RECORD: json.dumps({"registry.example:5000/caches/vllm@sha256:" + "a" * 64:
                                                                 "pass"})})
    assert sc.signature_condition(resource, NOW)["reason"] == "ReportedByKyverno"


@pytest.mark.parametrize("kind", ["GKMCache", "ClusterGKMCache"])
@pytest.mark.parametrize("key_given", [False, True])
@pytest.mark.parametrize("entries", [[], [{"phase": "Extracting"}], [{"phase": "Extracted"}, {"phase": "Pending"}]],
                         ids=["no-entries", "extracting", "half-done"])
def test_a_tenant_s_annotation_never_makes_signature_verified_true(kind, key_given, entries):
    """What a tenant with edit writes on its own cache: a pass for its image, however the record is spelled."""
    for record in ({IMAGE: "pass"}, {IMAGE: "PASS"}, {IMAGE.replace("vllm@", "vllm:v1@"): "pass"}):
        resource = cache(kind=kind, labels={SIGNATURE_FORMAT_LABEL: "cosign-v3"},
                         annotations={sc.KYVERNO_RECORD: json.dumps(record)})
        condition = sc.signature_condition(resource, NOW, entries, key_given=key_given)
        assert condition["status"] != "True", condition


@pytest.mark.parametrize("annotations", [
    {},
    {sc.KYVERNO_RECORD: json.dumps({"registry.example/caches/other@sha256:" + "b" * 64: "pass"})},
    {sc.KYVERNO_RECORD: json.dumps({IMAGE: "fail"})},
    {sc.KYVERNO_RECORD: "not json"},
    {sc.KYVERNO_RECORD: json.dumps(["pass"])},
    {sc.KYVERNO_RECORD: json.dumps({"registry.example/caches/vllm:v1": "pass"})},
], ids=["no-record", "other-image", "not-pass", "unreadable", "not-a-map", "no-digest"])
def test_a_labelled_cache_without_kyverno_s_pass_says_nothing_checked_it(annotations):
    condition = sc.signature_condition(cache(labels={SIGNATURE_FORMAT_LABEL: "cosign-v2"}, annotations=annotations),
                                       NOW)
    assert (condition["status"], condition["reason"]) == ("False", "NotVerified")
    assert "nothing checked the signature of %s" % IMAGE in condition["message"]
    assert "extracted unchecked" in condition["message"] and "is it running" in condition["message"]


def test_a_labelled_cluster_cache_names_why_kyverno_did_not_check_it():
    condition = sc.signature_condition(cache(kind="ClusterGKMCache", labels={SIGNATURE_FORMAT_LABEL: "cosign-v2"}), NOW)
    assert condition["status"] == "False"
    assert "Kyverno does not see cluster-scoped resources" in condition["message"]


def entry(phase, reason=None, message=None):
    return {"phase": phase, "reason": reason, "message": message}


LABELLED = {SIGNATURE_FORMAT_LABEL: "cosign-v3"}


@pytest.mark.parametrize("kind", ["GKMCache", "ClusterGKMCache"])
def test_every_slot_extracted_by_verifying_jobs_is_verified_by_extraction(kind):
    entries = [entry("Extracted"), entry("Extracted"), entry("Outdated"), entry("Incompatible")]
    condition = sc.signature_condition(cache(kind=kind, labels=LABELLED), NOW, entries, key_given=True)
    assert (condition["status"], condition["reason"]) == ("True", "VerifiedByExtraction")
    assert "cosign-v3 signature of %s" % IMAGE in condition["message"] and "(2 volume(s))" in condition["message"]


def test_a_job_that_refused_the_signature_fails_the_condition_with_its_message():
    refusal = "extraction failed on node n1: image ... has no cosign v3 signature that verifies with the given key"
    entries = [entry("Extracted"), entry("Error", "SignatureNotVerified", refusal)]
    condition = sc.signature_condition(cache(labels=LABELLED), NOW, entries, key_given=True)
    assert (condition["status"], condition["reason"]) == ("False", "VerificationFailed")
    assert condition["message"].endswith(refusal) and "1 extraction Job(s) refused" in condition["message"]


def test_verification_still_to_come_is_unknown():
    entries = [entry("Extracted"), entry("Extracting")]
    pending = sc.signature_condition(cache(labels=LABELLED), NOW, entries, key_given=True)
    assert (pending["status"], pending["reason"]) == ("Unknown", "VerificationPending")
    assert "1 of 2 volume(s) done" in pending["message"]


def test_verification_still_to_come_stays_pending_beside_kyverno_s_record_which_is_only_noted():
    entries = [entry("Extracted"), entry("Extracting")]
    admitted = cache(labels=LABELLED, annotations={sc.KYVERNO_RECORD: json.dumps({IMAGE: "pass"})})
    condition = sc.signature_condition(admitted, NOW, entries, key_given=True)
    assert (condition["status"], condition["reason"]) == ("Unknown", "VerificationPending")
    assert "verify the cosign-v3 signature" in condition["message"] and "1 of 2 volume(s) done" in condition["message"]
    assert TENANT_WRITABLE in condition["message"]


def test_a_job_refusal_outweighs_kyverno_s_record():
    admitted = cache(labels=LABELLED, annotations={sc.KYVERNO_RECORD: json.dumps({IMAGE: "pass"})})
    entries = [entry("Error", "SignatureNotVerified", "signed for another digest")]
    assert sc.signature_condition(admitted, NOW, entries, key_given=True)["reason"] == "VerificationFailed"


def test_nothing_checked_it_names_the_key_variable_as_the_fix():
    condition = sc.signature_condition(cache(kind="ClusterGKMCache", labels=LABELLED), NOW, [entry("Extracted")])
    assert (condition["status"], condition["reason"]) == ("False", "NotVerified")
    assert "signature_public_key" in condition["message"] and "caches_signature_public_key" in condition["message"]


# ---------------------------------------------------------------- mountMode imageVolume: the reconcile's own check

DIGEST = "sha256:" + "c" * 64


def test_an_image_volume_digest_the_reconcile_verified_is_verified_by_reconcile_even_beside_kyverno():
    admitted = cache(labels=LABELLED, annotations={sc.KYVERNO_RECORD: json.dumps({IMAGE: "pass"})})
    for resource in (cache(labels=LABELLED), admitted):
        condition = sc.signature_condition(resource, NOW, [entry("Incompatible")], key_given=True,
                                           image_volume_digest=DIGEST)
        assert (condition["status"], condition["reason"]) == ("True", "VerifiedByReconcile")
        assert "the reconcile verified the cosign-v3 signature of %s at %s" % (IMAGE, DIGEST) in condition["message"]


def test_an_image_volume_cache_nobody_checked_says_pods_mount_the_digest_unchecked():
    condition = sc.signature_condition(cache(labels=LABELLED), NOW, image_volume_digest=DIGEST)
    assert (condition["status"], condition["reason"]) == ("False", "NotVerified")
    message = condition["message"]
    assert "the reconcile had no public key; pods annotated gkm.io/cache mount %s unchecked" % DIGEST in message
    assert "signature_public_key" in message and "extracted" not in message


def error_status(message="refused"):
    return {"phase": "Error", "resolvedDigest": "", "targets": [], "conditions": [
        {"type": "Ready", "status": "False", "reason": "SignatureNotVerified", "message": message,
         "lastTransitionTime": NOW},
        {"type": "Error", "status": "True", "reason": "SignatureNotVerified", "message": message,
         "lastTransitionTime": NOW}]}


def test_a_refused_digest_keeps_the_recorded_digest_that_still_verifies_with_its_targets_and_overlay():
    current = {"resolvedDigest": DIGEST, "targets": [{"backend": "hip", "arch": "gfx90a", "warpSize": 64}],
               "kernelOverlay": {"variable": "TRITON_CACHE_DIR"}}
    status = sc.refused_status(error_status("why and fix"), current, DIGEST, NOW)
    assert (status["phase"], status["resolvedDigest"], status["targets"]) == ("Error", DIGEST, current["targets"])
    assert status["kernelOverlay"] == {"variable": "TRITON_CACHE_DIR"}
    condition = status["conditions"][-1]
    assert (condition["type"], condition["status"], condition["reason"], condition["message"]) == (
        "SignatureVerified", "False", "VerificationFailed", "why and fix")


def test_a_refused_digest_with_nothing_kept_records_no_digest():
    current = {"resolvedDigest": DIGEST, "targets": [{"backend": "hip", "arch": "gfx90a", "warpSize": 64}]}
    refused = error_status()
    status = sc.refused_status(refused, dict(current, kernelOverlay={"variable": "TRITON_CACHE_DIR"}), None, NOW)
    assert (status["resolvedDigest"], status["targets"]) == ("", [])
    assert "kernelOverlay" not in status
    assert [c["type"] for c in status["conditions"]] == ["Ready", "Error", "SignatureVerified"]
    assert len(refused["conditions"]) == 2
