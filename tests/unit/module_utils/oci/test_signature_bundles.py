"""A cosign v3 bundle counts as a signature only when its in-toto statement is cosign's signature statement.

The key that signs an image often signs its attestations too (an SBOM, a provenance); those are DSSE envelopes
over in-toto statements naming the same digest, attached as the same kind of referrer. Only the statement whose
predicateType is cosign's signature type says "this image is signed" (issue 31, class 4).
"""

import base64
import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.oci import signature

cryptography = pytest.importorskip("cryptography")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.oci.public_key import PublicKey  # noqa: E402

IN_TOTO = "application/vnd.in-toto+json"
DIGEST = "sha256:" + "d" * 64
SIGNATURE_TYPE = "https://sigstore.dev/cosign/sign/v1"


@pytest.fixture(scope="module")
def keys():
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, PublicKey(pem)


def bundle(private, predicate_type, digest=DIGEST, payload_type=IN_TOTO, predicate=None, **extra):
    statement = dict({"_type": "https://in-toto.io/Statement/v1",
                      "subject": [{"name": "registry.example/caches/vllm", "digest": {"sha256": digest.split(":")[1]}}],
                      "predicateType": predicate_type, "predicate": predicate or {}}, **extra)
    if predicate_type is None:
        del statement["predicateType"]
    payload = json.dumps(statement).encode()
    sig = private.sign(signature.pae(payload_type, payload), ec.ECDSA(hashes.SHA256()))
    return {"dsseEnvelope": {"payload": base64.b64encode(payload).decode(), "payloadType": payload_type,
                             "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}]}}


def test_cosign_s_signature_statement_verifies(keys):
    private, key = keys
    assert signature._bundle_verifies(bundle(private, SIGNATURE_TYPE), DIGEST, key)


def test_a_signature_statement_of_another_digest_does_not_verify(keys):
    private, key = keys
    assert not signature._bundle_verifies(bundle(private, SIGNATURE_TYPE, digest="sha256:" + "e" * 64), DIGEST, key)


@pytest.mark.parametrize("predicate_type", [
    "https://spdx.dev/Document",
    "https://cyclonedx.org/bom",
    "https://slsa.dev/provenance/v1",
    "https://cosign.sigstore.dev/attestation/v1",
    "https://sigstore.dev/cosign/sign/v1/extra",
    "",
    None,
    ["https://sigstore.dev/cosign/sign/v1"],
], ids=["spdx-sbom", "cyclonedx-sbom", "slsa-provenance", "custom-attestation", "longer-type", "empty", "missing",
        "not-a-string"])
def test_a_bundle_of_another_attestation_signed_by_the_key_does_not_verify(keys, predicate_type):
    private, key = keys
    assert not signature._bundle_verifies(bundle(private, predicate_type), DIGEST, key)


def test_a_signature_statement_in_an_envelope_of_another_payload_type_does_not_verify(keys):
    private, key = keys
    assert not signature._bundle_verifies(bundle(private, SIGNATURE_TYPE, payload_type="application/json"), DIGEST, key)


def test_a_message_signature_over_the_digest_still_verifies(keys):
    private, key = keys
    digest = bytes.fromhex(DIGEST.split(":")[1])
    sig = private.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))
    message = {"messageSignature": {"messageDigest": {"algorithm": "SHA2_256",
                                                      "digest": base64.b64encode(digest).decode()},
                                    "signature": base64.b64encode(sig).decode()}}
    assert signature._bundle_verifies(message, DIGEST, key)
