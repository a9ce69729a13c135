# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Verify cosign signatures of an image with a public key, in both storage formats.

- cosign v2: a manifest tagged `sha256-<hex>.sig` whose layers are simple-signing payloads, each
  signed in the `dev.cosignproject.cosign/signature` annotation.
- cosign v3: a sigstore bundle attached as an OCI 1.1 referrer (artifactType
  application/vnd.dev.sigstore.bundle...), holding a DSSE envelope over an in-toto statement whose
  subject is the image digest and whose predicateType is cosign's signature type (or a plain message signature
  over the digest). The same key may sign the image's attestations (an SBOM, a provenance), attached the same
  way over the same digest: those are not signatures, and are not counted as one.

The payload must name the exact image digest being extracted, so a signature of another image
(or another tag's old digest) is refused. Transparency-log entries are not checked: the key is
the trust anchor.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import json

from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import NotFound

SIMPLESIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
BUNDLE_PREFIX = "application/vnd.dev.sigstore.bundle"
FORMATS = ("auto", "v2", "v3")
IN_TOTO = "application/vnd.in-toto+json"
# The predicateType of the in-toto statement `cosign sign` puts in a v3 bundle; attestations carry their own.
COSIGN_SIGNATURE_PREDICATE = "https://sigstore.dev/cosign/sign/v1"


class SignatureError(Exception):
    """The image is unsigned, or no signature verifies with the given key."""


def _b64(value, what):
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise SignatureError("%s is not valid base64" % what) from None


def pae(payload_type, payload):
    """DSSE pre-authentication encoding: what a DSSE signature actually signs."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def verify_v2(client, container, image_digest, key):
    """Number of v2 signatures found and whether one verified (key and image digest)."""
    try:
        manifest = client.get_manifest(container, image_digest.replace(":", "-") + ".sig").document
    except NotFound:
        return 0, False
    found = 0
    for layer in manifest.get("layers") or []:
        signature = (layer.get("annotations") or {}).get(SIGNATURE_ANNOTATION)
        if layer.get("mediaType") != SIMPLESIGNING or not signature:
            continue
        found += 1
        payload = client.fetch_blob(container, layer)
        if not key.verifies(_b64(signature, "v2 signature"), data=payload):
            continue
        try:
            critical = json.loads(payload)["critical"]
        except (ValueError, KeyError, TypeError):
            continue
        if (critical.get("image") or {}).get("docker-manifest-digest") == image_digest:
            return found, True
    return found, False


def _bundle_verifies(bundle, image_digest, key):
    hex_digest = image_digest.split(":", 1)[1]
    envelope = bundle.get("dsseEnvelope")
    if envelope:
        payload = _b64(envelope.get("payload", ""), "DSSE payload")
        signed = pae(envelope.get("payloadType", ""), payload)
        if envelope.get("payloadType") != IN_TOTO:
            return False
        if not any(key.verifies(_b64(s.get("sig", ""), "DSSE signature"), data=signed)
                   for s in envelope.get("signatures") or []):
            return False
        try:
            statement = json.loads(payload)
            subjects = statement.get("subject") or []
        except (ValueError, AttributeError):
            return False
        if statement.get("predicateType") != COSIGN_SIGNATURE_PREDICATE:
            return False
        return any(isinstance(s, dict) and (s.get("digest") or {}).get("sha256") == hex_digest for s in subjects)
    message = bundle.get("messageSignature")
    if message:
        digest = _b64((message.get("messageDigest") or {}).get("digest", ""), "message digest")
        if binascii.hexlify(digest).decode() != hex_digest:
            return False
        return key.verifies(_b64(message.get("signature", ""), "message signature"), digest=digest)
    return False


def verify_v3(client, container, image_digest, key):
    """Number of sigstore-bundle referrers found and whether one verified."""
    found = 0
    for descriptor in client.referrers(container, image_digest):
        if not (descriptor.get("artifactType") or "").startswith(BUNDLE_PREFIX):
            continue
        manifest = client.get_manifest(container, descriptor["digest"]).document
        if (manifest.get("subject") or {}).get("digest") != image_digest:
            continue
        for layer in manifest.get("layers") or []:
            if not (layer.get("mediaType") or "").startswith(BUNDLE_PREFIX):
                continue
            found += 1
            try:
                bundle = json.loads(client.fetch_blob(container, layer))
            except ValueError:
                continue
            if isinstance(bundle, dict) and _bundle_verifies(bundle, image_digest, key):
                return found, True
    return found, False


def verify_image_signature(client, container, image_digest, public_key_pem, signature_format="auto"):
    """The format ('v2' or 'v3') of a signature of `image_digest` that verifies with the key.

    Raises SignatureError naming what was found when none verifies.
    """
    if signature_format not in FORMATS:
        raise SignatureError("signature_format must be one of %s" % ", ".join(FORMATS))
    # Imported here: only a verification needs cryptography (about 25 ms of CPU at the Job's start-up).
    from ansible_collections.gkm.cluster.plugins.module_utils.oci.public_key import PublicKey, PublicKeyError

    try:
        key = PublicKey(public_key_pem)
    except PublicKeyError as exc:
        raise SignatureError(str(exc)) from exc
    order = {"auto": ("v3", "v2"), "v2": ("v2",), "v3": ("v3",)}[signature_format]
    checks = {"v2": verify_v2, "v3": verify_v3}
    found = {}
    for name in order:
        found[name], verified = checks[name](client, container, image_digest, key)
        if verified:
            return name
    if not any(found.values()):
        raise SignatureError("image %s/%s@%s is not signed: no cosign %s signature found" % (
            container.registry, container.api_prefix, image_digest, " or ".join(order)))
    raise SignatureError("image %s has %s, but none verifies with the given public key for digest %s" % (
        container.api_prefix, ", ".join("%d cosign %s signature(s)" % (n, f) for f, n in found.items() if n),
        image_digest))
