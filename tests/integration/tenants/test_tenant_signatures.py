"""Signatures the admin requires (docs/security.md, class 4): the tenant's gkm.io/signature-format label only
chooses the format; whether a cache's image is checked is the admin's setting (signature_required, the caches role's
caches_require_signature). A tenant with edit creates, through its own token, an unlabelled GKMCache of an unsigned
image in mountMode imageVolume (no Job runs: the reconcile itself verifies the digest before recording it, so the
kwok nodes suffice); the reconcile runs as the collection runs it, with the admin's key."""

import uuid

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import API_VERSION
from tests.helpers import kcache_images
from tests.helpers.modules import run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]


@pytest.fixture(scope="module")
def keys():
    return kcache_images.key_pair()


@pytest.fixture(scope="module")
def images(registry, keys):
    """An unsigned image and one signed with the admin's key (cosign v3), in a repository of their own."""
    repository = "tenant-signatures/%s" % uuid.uuid4().hex[:6]
    unsigned = kcache_images.build_image(registry.host, repository, "unsigned",
                                         kcache_images.CacheSpec(backend="hip", seed=31))
    signed = kcache_images.build_image(registry.host, repository, "signed",
                                       kcache_images.CacheSpec(backend="hip", seed=32))
    kcache_images.sign_cosign_v3(signed, keys[0])
    return unsigned, signed


def create_cache(tenant, name, image, labels=None):
    tenant.kube.request("POST", tenant.gkmcaches_path(), body={
        "apiVersion": API_VERSION, "kind": "GKMCache", "metadata": {"name": name, "labels": labels or {}},
        "spec": {"image": image, "mountMode": "imageVolume"}})


def reconcile(sim, tenant, name, public_key, **args):
    return run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=tenant.namespace,
                      registry_plain_http=True, signature_public_key=public_key, **args)


def status(tenant, name):
    return tenant.kube.request("GET", tenant.gkmcaches_path(name))[1].get("status") or {}


def condition(current, kind):
    return next((c for c in current.get("conditions") or [] if c["type"] == kind), None)


def test_without_the_requirement_the_unlabelled_unsigned_cache_is_recorded_unchecked(sim, crds, tenant, images, keys):
    """What the tenant gets today: leaving the label out switches the check off."""
    create_cache(tenant, "unlabelled", images[0].ref)
    result = reconcile(sim, tenant, "unlabelled", keys[1])
    assert not result.get("failed"), result.get("msg")
    current = status(tenant, "unlabelled")
    assert current["resolvedDigest"] == images[0].digest
    assert condition(current, "SignatureVerified") is None


def test_with_the_requirement_the_unlabelled_unsigned_cache_is_refused(sim, crds, tenant, images, keys):
    create_cache(tenant, "unlabelled", images[0].ref)
    result = reconcile(sim, tenant, "unlabelled", keys[1], signature_required=True)
    assert result.get("failed"), result
    current = status(tenant, "unlabelled")
    assert current.get("phase") == "Error" and not current.get("resolvedDigest"), current
    verified = condition(current, "SignatureVerified")
    assert (verified["status"], verified["reason"]) == ("False", "VerificationFailed"), current
    assert images[0].digest in verified["message"] and "not signed" in verified["message"], verified["message"]


def test_with_the_requirement_an_unlabelled_signed_cache_is_verified_in_either_format(sim, crds, tenant, images, keys):
    create_cache(tenant, "signed", images[1].ref)
    result = reconcile(sim, tenant, "signed", keys[1], signature_required=True)
    assert not result.get("failed"), result.get("msg")
    current = status(tenant, "signed")
    assert current["resolvedDigest"] == images[1].digest
    verified = condition(current, "SignatureVerified")
    assert (verified["status"], verified["reason"]) == ("True", "VerifiedByReconcile"), verified


def test_with_the_requirement_and_no_key_the_cache_is_refused_naming_the_key(sim, crds, tenant, images):
    create_cache(tenant, "nokey", images[1].ref)
    result = reconcile(sim, tenant, "nokey", None, signature_required=True)
    assert result.get("failed"), result
    assert "signature_public_key" in result["msg"] and "signature_required" in result["msg"], result["msg"]
    current = status(tenant, "nokey")
    assert current.get("phase") == "Error" and not current.get("resolvedDigest"), current
