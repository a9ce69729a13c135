"""ImageVolume mode's signature gate through the real API server and the real registry: no Job runs, so
cache_reconcile verifies the resolved digest's cosign signature with the key before the status records it.

A GKMCache labelled gkm.io/signature-format=cosign-v2 whose image is signed with the key is Resolved and
SignatureVerified by the reconcile; moved to a digest signed with another key it is an Error that keeps the verified
digest (pods go on mounting it); an unsigned image is recorded while no check is asked for, and refused, with no
digest left, once the label asks. Check mode changes nothing.
"""

import uuid

import pytest

from tests.helpers import kcache_images
from tests.helpers.modules import AuditWrites, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GROUP, VERSION = "gkm.io", "v1alpha1"
LABEL = "gkm.io/signature-format"


@pytest.fixture(scope="module")
def keys():
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    trusted, other = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    public_key = trusted.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return trusted, other, public_key


def manifest(name, namespace, image, labels=None):
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"image": image, "mountMode": "imageVolume"}}


def reconcile(sim, name, namespace, public_key, check=False, **args):
    return run_module("cache_reconcile", sim.kubeconfig, check=check, kind="GKMCache", name=name,
                      namespace=namespace, registry_plain_http=True, signature_public_key=public_key, **args)


def condition(status, kind="SignatureVerified"):
    return next(c for c in status["conditions"] if c["type"] == kind)


@pytest.fixture
def create(crds, namespace):
    """Creates GKMCaches in the test's namespace; deletes them afterwards, so no playbook meets them later."""
    created = []

    def create_cache(name, image, labels=None):
        crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches",
                                             manifest(name, namespace, image, labels))
        created.append(name)

    yield create_cache
    for name in created:
        crds.delete_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name)


def live_status(crds, namespace, name):
    return crds.get_namespaced_custom_object_status(GROUP, VERSION, namespace, "gkmcaches", name)["status"]


def test_a_signed_digest_is_recorded_and_a_refused_one_is_not(sim, crds, registry, namespace, create, keys):
    trusted, other, public_key = keys
    repository = "iv-signature/%s" % uuid.uuid4().hex[:6]
    good = kcache_images.build_image(registry.host, repository, "v1",
                                     kcache_images.CacheSpec(backend="hip", seed=5, compiled=True))
    foreign = kcache_images.build_image(registry.host, repository, "v2",
                                        kcache_images.CacheSpec(backend="hip", seed=6, compiled=True))
    kcache_images.sign_cosign_v2(good, trusted)
    kcache_images.sign_cosign_v2(foreign, other)
    name = "signed"
    create(name, good.ref, {LABEL: "cosign-v2"})

    resolved = reconcile(sim, name, namespace, public_key)
    assert not resolved.get("failed"), resolved.get("msg")
    status = live_status(crds, namespace, name)
    assert (status["phase"], status["resolvedDigest"]) == ("Resolved", good.digest), status
    verified = condition(status)
    assert (verified["status"], verified["reason"]) == ("True", "VerifiedByReconcile"), verified
    assert "at %s" % good.digest in verified["message"]

    # Check mode: the refusal is reported, and every write the API server saw was a dry run.
    audit = AuditWrites()
    planned = reconcile(sim, name, namespace, public_key, check=True,
                        definition=manifest(name, namespace, foreign.ref, {LABEL: "cosign-v2"}))
    assert planned.get("failed") and foreign.digest in planned["msg"], planned
    writes = audit.since("/namespaces/%s/" % namespace)
    assert all("dryRun=All" in write for write in writes), writes
    assert live_status(crds, namespace, name) == status

    crds.patch_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name,
                                        {"spec": {"image": foreign.ref}})
    refused = reconcile(sim, name, namespace, public_key)
    assert refused.get("failed"), refused
    message = refused["msg"]
    assert "refused %s/%s@%s" % (registry.host, repository, foreign.digest) in message, message
    assert "none verifies with the given public key for digest %s" % foreign.digest in message, message
    assert "status.resolvedDigest stays %s" % good.digest in message and "Fix: sign that digest" in message, message
    after = live_status(crds, namespace, name)
    assert (after["phase"], after["resolvedDigest"], after["targets"]) == ("Error", good.digest, status["targets"])
    failed = condition(after)
    assert (failed["status"], failed["reason"], failed["message"]) == ("False", "VerificationFailed", message)
    assert condition(after, "Ready")["reason"] == "SignatureNotVerified"


def test_an_unsigned_image_is_recorded_without_a_check_and_refused_with_one(
        sim, crds, registry, namespace, create, keys):
    public_key = keys[2]
    unsigned = kcache_images.build_image(registry.host, "iv-signature/%s" % uuid.uuid4().hex[:6], "v1",
                                         kcache_images.CacheSpec(backend="hip", seed=7, compiled=True))
    name = "unsigned"
    create(name, unsigned.ref)

    plain = reconcile(sim, name, namespace, public_key)
    assert not plain.get("failed"), plain.get("msg")
    status = live_status(crds, namespace, name)
    assert (status["phase"], status["resolvedDigest"]) == ("Resolved", unsigned.digest), status
    assert "SignatureVerified" not in [c["type"] for c in status["conditions"]]

    crds.patch_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", name,
                                        {"metadata": {"labels": {LABEL: "cosign-v2"}}})
    refused = reconcile(sim, name, namespace, public_key)
    assert refused.get("failed"), refused
    assert "is not signed: no cosign v2 signature found" in refused["msg"], refused["msg"]
    assert "status.resolvedDigest is empty" in refused["msg"], refused["msg"]
    after = live_status(crds, namespace, name)
    assert (after["phase"], after["resolvedDigest"], after["targets"]) == ("Error", "", []), after
    assert (condition(after)["status"], condition(after)["reason"]) == ("False", "VerificationFailed")
