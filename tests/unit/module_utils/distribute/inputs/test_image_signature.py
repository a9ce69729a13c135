"""mountMode imageVolume: what the Error status says when the reconcile refuses the resolved digest's signature."""

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import image_signature

IMAGE = "registry.example:5000/caches/vllm@sha256:" + "b" * 64
KEPT = "sha256:" + "a" * 64
WHY = "image caches/vllm has 1 cosign v2 signature(s), but none verifies with the given public key for digest ..."


def test_the_refusal_names_the_image_its_digest_the_format_why_and_the_fix():
    message = image_signature.refusal_message(IMAGE, "v2", WHY, None)
    assert "the reconcile refused %s: its signature does not verify" % IMAGE in message
    assert "gkm.io/signature-format asks (cosign v2): " + WHY in message
    assert "status.resolvedDigest is empty" in message and "are denied until a digest verifies" in message
    assert message.endswith("Fix: sign that digest with the key of signature_public_key (caches_signature_public_key) "
                            "in that format, or give the key it was signed with")


def test_the_refusal_says_which_recorded_digest_pods_go_on_mounting():
    message = image_signature.refusal_message(IMAGE, "v3", WHY, KEPT)
    assert "status.resolvedDigest stays %s" % KEPT in message and "go on mounting that digest" in message


def test_the_refusal_is_the_jobs_reason_and_carries_what_was_refused_and_kept():
    refusal = image_signature.SignatureRefused("message", IMAGE, "sha256:" + "b" * 64, KEPT)
    assert refusal.reason == "SignatureNotVerified" and refusal.kept_digest == KEPT
    assert refusal.result == {"reason": "SignatureNotVerified", "image": IMAGE, "digest": "sha256:" + "b" * 64,
                              "kept_digest": KEPT}
