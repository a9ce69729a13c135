# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""mountMode imageVolume: the reconcile verifies the image's signature itself, before it records the digest.

In this mode no extraction Job runs (image_volume.py), so the Jobs' check (verification.py) never happens and the
kubelet pulls whatever digest status.resolvedDigest names (the webhook mounts it, webhook/server/steering_view.py). When
the cache asks for a check (label gkm.io/signature-format) and the operator gave the key (signature_public_key),
the reconcile runs the extractor's own check (oci/signature.py: a cosign signature that verifies with the key and
names this very digest) on the resolved digest, on the controller, before the status records it. A refused digest
is never recorded: the status keeps the digest it had if that one still verifies with the key, else none.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    pinned_reference,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_ANNOTATION,
    SIGNATURE_FORMAT_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.verification import (
    LABEL_PARAM,
    REQUIRED_PARAM,
    SIGNATURE_NOT_VERIFIED,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import OCIError, RegistryClient
from ansible_collections.gkm.cluster.plugins.module_utils.oci.signature import SignatureError, verify_image_signature

# The distribution parameter cache_reconcile fills with the digest the resource's status records (None: none).
RECORDED_DIGEST_PARAM = "recorded_digest"


class SignatureRefused(GkmError):
    """The resolved digest's signature does not verify; kept_digest is the recorded digest that still does, or None."""

    reason = SIGNATURE_NOT_VERIFIED

    def __init__(self, message, image, digest, kept_digest):
        super(SignatureRefused, self).__init__(message, {"reason": self.reason, "image": image, "digest": digest,
                                                         "kept_digest": kept_digest})
        self.kept_digest = kept_digest


def refusal_message(image, signature_format, why, kept_digest, required=False):
    """What the Error status says of a refused digest: the image and digest, why, what pods mount now, the fix."""
    if kept_digest:
        now = ("status.resolvedDigest stays %s, recorded before and still verified with the key, so pods annotated "
               "%s go on mounting that digest" % (kept_digest, CACHE_ANNOTATION))
    else:
        now = ("no digest is recorded (status.resolvedDigest is empty), so pods annotated %s are denied "
               "until a digest verifies" % CACHE_ANNOTATION)
    asked = ("as the admin requires (signature_required)" if required else
             "as the label %s asks" % SIGNATURE_FORMAT_LABEL)
    return ("mountMode imageVolume: the reconcile refused %s: its signature does not verify with the public key "
            "(signature_public_key) %s (cosign %s): %s; %s. Fix: sign that digest with the key "
            "of signature_public_key (caches_signature_public_key) in that format, or give the key it was signed "
            "with" % (image, asked, signature_format, why, now))


def _refusal(image, digest, verification, options):
    """Why no signature of digest verifies with the key (the extractor's words), or None when one does."""
    signature_format, public_key_pem = verification
    try:
        client, container = RegistryClient.for_reference(image, **options)
        verify_image_signature(client, container, digest, public_key_pem, signature_format)
    except (OCIError, SignatureError) as error:
        return str(error)
    return None


def verify(params, image, digest, verification, options):
    """Return once a signature of the digest-pinned image verifies with verification's key and format; raise
    SignatureRefused otherwise, keeping the digest params[RECORDED_DIGEST_PARAM] if it still verifies. options: the
    registry clients' (inputs/image.image_registry_options: one deadline with the image's resolve)."""
    why = _refusal(image, digest, verification, options)
    if why is None:
        return
    recorded = params.get(RECORDED_DIGEST_PARAM)
    kept = None
    if recorded and recorded != digest and _refusal(pinned_reference(image, recorded), recorded, verification,
                                                    options) is None:
        kept = recorded
    required = bool(params.get(REQUIRED_PARAM)) and not params.get(LABEL_PARAM)
    raise SignatureRefused(refusal_message(image, verification[0], why, kept, required), image, digest, kept)
