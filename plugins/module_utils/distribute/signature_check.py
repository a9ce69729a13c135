# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who checked the signature of a cache resource's image, as a status condition. Pure.

A GKMCache labelled ``gkm.io/signature-format`` asks for a signature check, which Kyverno's admission
webhook does (the kyverno role's policies); the distribution itself does not verify. Kyverno records what it
verified in the annotation ``kyverno.io/verify-images`` (image reference -> ``pass``). Without that record
nothing checked the image, and the condition says so plainly instead of staying silent. The condition reports;
it is not a gate (an annotation can be written by anyone who may edit the resource).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

FORMAT_LABEL = "gkm.io/signature-format"
KYVERNO_RECORD = "kyverno.io/verify-images"
CONDITION = "SignatureVerified"


def _repository_and_digest(reference):
    """(repository, digest) of an image reference; a tag beside a digest does not change what it names."""
    name, _at, digest = reference.partition("@")
    slash = name.rfind("/")
    if ":" in name[slash + 1:]:
        name = name[:name.rfind(":")]
    return name, digest


def _kyverno_passed(annotations, image):
    """Kyverno's record names the image it verified by repository and digest (it drops the tag)."""
    try:
        record = json.loads(annotations.get(KYVERNO_RECORD) or "{}")
    except ValueError:
        return False
    if not isinstance(record, dict):
        return False
    wanted = _repository_and_digest(image)
    return bool(wanted[1]) and any(_repository_and_digest(str(reference)) == wanted and str(result).lower() == "pass"
                                   for reference, result in record.items())


def signature_condition(resource, now):
    """The SignatureVerified condition of a labelled cache resource, or None for an unlabelled one."""
    metadata = resource.get("metadata") or {}
    signature_format = (metadata.get("labels") or {}).get(FORMAT_LABEL)
    if not signature_format:
        return None
    image = (resource.get("spec") or {}).get("image") or ""
    if _kyverno_passed(metadata.get("annotations") or {}, image):
        status, reason = "True", "VerifiedByKyverno"
        message = "Kyverno verified the %s signature of %s when the resource was admitted" % (signature_format, image)
    else:
        status, reason = "False", "NotVerified"
        kyverno = ("Kyverno does not see cluster-scoped resources" if resource.get("kind") == "ClusterGKMCache" else
                   "Kyverno recorded no verification (is it running, with the kyverno role's policies?)")
        message = ("labelled %s=%s, but nothing checked the signature of %s: %s and the distribution does not "
                   "verify signatures; the image is extracted unchecked" % (FORMAT_LABEL, signature_format, image,
                                                                            kyverno))
    return {"type": CONDITION, "status": status, "reason": reason, "message": message, "lastTransitionTime": now}
