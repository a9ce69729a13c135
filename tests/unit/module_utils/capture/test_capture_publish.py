"""capture/publish.py and sign.py: what is pushed is what the collection's verification accepts (oci/signature.py),
for the signing key only and for the exact digest; an in-memory registry stands for the registry here (the real one
is the integration test's)."""

import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.capture import package, sign
from ansible_collections.gkm.cluster.plugins.module_utils.capture.check import check_kernel
from ansible_collections.gkm.cluster.plugins.module_utils.capture.publish import publish
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import (
    Manifest,
    NotFound,
    parse_reference,
    sha256_digest,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.signature import SignatureError, verify_image_signature
from tests.helpers.kcache_images import key_pair
from tests.helpers.kernel_dirs import kernel


class MemoryRegistry:
    """Blobs and manifests by digest and tag, with the client methods publish and the verification use."""

    def __init__(self):
        self.blobs, self.manifests = {}, {}

    def push_blob(self, container, data):
        self.blobs[sha256_digest(data)] = data
        return sha256_digest(data)

    def push_manifest(self, container, reference, body, media_type):
        self.manifests[reference] = self.manifests[sha256_digest(body)] = body
        return sha256_digest(body)

    def get_manifest(self, container, reference=None):
        if reference not in self.manifests:
            raise NotFound(reference)
        body = self.manifests[reference]
        return Manifest(sha256_digest(body), None, json.loads(body), body)

    def fetch_blob(self, container, descriptor, max_bytes=None):
        return self.blobs[descriptor["digest"]]

    def referrers(self, container, digest):
        return []


def _pushed(tag=None):
    directory, files = kernel(1)
    checked, facts = check_kernel(directory, files)
    built = package.image({directory: checked}, {directory: facts})
    registry, container = MemoryRegistry(), parse_reference("registry.local:5000/caches/llama")
    private, public = key_pair()
    digest = publish(registry, container, "registry.local:5000/caches/llama", built, private, tag)
    return registry, container, built, digest, public


def test_the_pushed_image_is_signed_as_the_collection_verifies_it():
    registry, container, built, digest, public = _pushed(tag="captured")
    assert digest == built["digest"] and registry.manifests["captured"] == built["manifest"]
    assert {sha256_digest(built["layer"]), sha256_digest(built["config"])} <= set(registry.blobs)
    assert verify_image_signature(registry, container, digest, public) == "v2"


def test_another_key_or_another_digest_does_not_verify():
    registry, container, _built, digest, public = _pushed()
    with pytest.raises(SignatureError, match="none verifies"):
        verify_image_signature(registry, container, digest, key_pair()[1])
    other = "sha256:" + "0" * 64
    registry.manifests[other.replace(":", "-") + ".sig"] = registry.manifests[digest.replace(":", "-") + ".sig"]
    with pytest.raises(SignatureError, match="none verifies"):
        verify_image_signature(registry, container, other, public)


def test_a_key_that_is_not_a_pem_private_key_is_refused():
    with pytest.raises(sign.CaptureError, match="not a PEM private key"):
        sign.load_private_key(key_pair()[1])
