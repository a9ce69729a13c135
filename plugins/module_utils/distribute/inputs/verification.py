# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The extraction Jobs' own signature check, pure: which format a cache asks for, the extractor's options.

A cache resource asks for a check with the label ``gkm.io/signature-format`` (``cosign-v2`` or
``cosign-v3``, the values of the kyverno role's policies). With the operator's public key
(``signature_public_key``) its Jobs verify before they extract: the key travels in the Jobs' Secret
(registry_secret.py) and the extractor checks that the signature names the very digest it extracts.
Kyverno never sees a ClusterGKMCache, so for it this is the only check; a GKMCache gets both when
Kyverno runs. cache_distribute, which has no resource, verifies every Job (either format) when given the key.

The label is the tenant's: it may only choose the format. Whether a cache is checked at all is the admin's
setting ``signature_required`` (the caches role's ``caches_require_signature``): with it an unlabelled cache is
checked in either format, and without the key nothing is distributed (issue 31, class 4).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SIGNATURE_FORMAT_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.key_text import key_id, read_pem

# Label value -> the extractor's --signature-format.
LABEL_FORMATS = {"cosign-v2": "v2", "cosign-v3": "v3"}
ANY_FORMAT = "auto"
PUBLIC_KEY_FILE = "cosign.pub"
# The distribution parameter cache_reconcile fills from the label.
LABEL_PARAM = "signature_format_label"
# The admin's option: every cache checked, whatever its label says.
REQUIRED_PARAM = "signature_required"
# The reason of an extraction refused for its signature (the Jobs' exit code 5, or the reconcile's own check).
SIGNATURE_NOT_VERIFIED = "SignatureNotVerified"


class VerificationError(GkmError, ValueError):
    """The label or the key cannot be used; the message names it."""

    reason = "InvalidSpec"


def format_label(resource):
    """The value of a cache resource's signature-format label, or None."""
    return ((resource.get("metadata") or {}).get("labels") or {}).get(SIGNATURE_FORMAT_LABEL) or None


def public_key_text(value):
    """The PEM text of signature_public_key (PEM text or a file path on the controller), or None."""
    if not value:
        return None
    text = read_pem(value, "signature_public_key", VerificationError)
    # Imported here: cryptography costs every run that checks no signature (the no-op rerun) its import time.
    from ansible_collections.gkm.cluster.plugins.module_utils.oci.public_key import PublicKey, PublicKeyError

    try:
        PublicKey(text)
    except PublicKeyError as error:
        raise VerificationError("signature_public_key: %s" % error) from error
    return text


def job_verification(params):
    """(extractor format, key PEM) the Jobs verify with, or None: a check needs both a request and the key.

    cache_reconcile passes the resource's label under LABEL_PARAM (None: no check asked for, unless the admin
    requires one: REQUIRED_PARAM, then either format); cache_distribute has no such parameter, and its key alone
    asks for a check of either format. A required check without the key raises: nothing goes unchecked.
    """
    required = bool(params.get(REQUIRED_PARAM))
    if LABEL_PARAM in params:
        label = params[LABEL_PARAM]
        if label and label not in LABEL_FORMATS:
            formats = " or ".join(sorted(LABEL_FORMATS))
            raise VerificationError("label %s=%s: use %s" % (SIGNATURE_FORMAT_LABEL, label, formats))
        signature_format = LABEL_FORMATS.get(label) or (ANY_FORMAT if required else None)
    else:
        signature_format = ANY_FORMAT
    public_key_pem = public_key_text(params.get("signature_public_key"))
    if required and not public_key_pem:
        raise VerificationError("signature_required (caches_require_signature) asks for a verified signature of "
                                "every cache, but no signature_public_key was given: nothing is distributed "
                                "unchecked. Fix: give the key in signature_public_key (caches_signature_public_key)")
    if not signature_format or not public_key_pem:
        return None
    return signature_format, public_key_pem


def extractor_args(verification, mount_path):
    """The extractor's options for a verification whose key is mounted under mount_path."""
    if verification is None:
        return []
    return ["--verify", "cosign", "--public-key", "%s/%s" % (mount_path, PUBLIC_KEY_FILE),
            "--signature-format", verification[0]]


def identity(verification):
    """What the extracted data was checked with, part of the PVC's spec hash: another key or format is
    another volume's content, extracted again."""
    if verification is None:
        return None
    return "%s %s" % (verification[0], key_id(verification[1]))
