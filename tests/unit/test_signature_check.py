"""The SignatureVerified condition: who checked a cache resource's image, said plainly."""

import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute import signature_check as sc

IMAGE = "registry.example/caches/vllm@sha256:" + "a" * 64
NOW = "2026-11-24T12:00:00Z"


def cache(kind="GKMCache", labels=None, annotations=None, image=IMAGE):
    return {"kind": kind, "metadata": {"name": "c", "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"image": image}}


def test_an_unlabelled_cache_gets_no_condition():
    assert sc.signature_condition(cache(), NOW) is None


def test_kyverno_s_record_of_a_pass_for_the_image_is_verified():
    resource = cache(labels={sc.FORMAT_LABEL: "cosign-v3"},
                     annotations={sc.KYVERNO_RECORD: json.dumps({IMAGE: "pass"})})
    condition = sc.signature_condition(resource, NOW)
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "SignatureVerified", "True", "VerifiedByKyverno")
    assert "cosign-v3" in condition["message"] and condition["lastTransitionTime"] == NOW


def test_kyverno_s_record_without_the_tag_matches_the_tagged_pinned_image():
    tagged = "registry.example:5000/caches/vllm:v1@sha256:" + "a" * 64
    resource = cache(labels={sc.FORMAT_LABEL: "cosign-v2"}, image=tagged,
                     annotations={sc.KYVERNO_RECORD: json.dumps({"registry.example:5000/caches/vllm@sha256:" + "a" * 64:
                                                                 "pass"})})
    assert sc.signature_condition(resource, NOW)["status"] == "True"


@pytest.mark.parametrize("annotations", [
    {},
    {sc.KYVERNO_RECORD: json.dumps({"registry.example/caches/other@sha256:" + "b" * 64: "pass"})},
    {sc.KYVERNO_RECORD: json.dumps({IMAGE: "fail"})},
    {sc.KYVERNO_RECORD: "not json"},
    {sc.KYVERNO_RECORD: json.dumps(["pass"])},
    {sc.KYVERNO_RECORD: json.dumps({"registry.example/caches/vllm:v1": "pass"})},
], ids=["no-record", "other-image", "not-pass", "unreadable", "not-a-map", "no-digest"])
def test_a_labelled_cache_without_kyverno_s_pass_says_nothing_checked_it(annotations):
    condition = sc.signature_condition(cache(labels={sc.FORMAT_LABEL: "cosign-v2"}, annotations=annotations), NOW)
    assert (condition["status"], condition["reason"]) == ("False", "NotVerified")
    assert "nothing checked the signature of %s" % IMAGE in condition["message"]
    assert "extracted unchecked" in condition["message"] and "is it running" in condition["message"]


def test_a_labelled_cluster_cache_names_why_kyverno_did_not_check_it():
    condition = sc.signature_condition(cache(kind="ClusterGKMCache", labels={sc.FORMAT_LABEL: "cosign-v2"}), NOW)
    assert condition["status"] == "False"
    assert "Kyverno does not see cluster-scoped resources" in condition["message"]
