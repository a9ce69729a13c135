# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who checked the signature of a cache resource's image, as a status condition. Pure.

A cache resource labelled ``gkm.io/signature-format`` asks for a signature check. Two can do it:
- the extraction Jobs, when the operator gave the public key (``signature_public_key``): each Job verifies
  the signature of the digest it extracts before writing anything (verification.py). This is the only check
  a ClusterGKMCache can get.
- Kyverno's admission webhook (the kyverno role's policies), for a GKMCache: it records what it verified in
  the annotation ``kyverno.io/verify-images`` (image reference -> ``pass``).
- In mountMode imageVolume no Job runs: with the key, the reconcile itself verifies the resolved digest before it
  records it (image_signature.py), and a refusal is the resource's Error status (refused_status).
With neither, nothing checked the image, and the condition says so plainly and names the fix. The Kyverno
record is a note, never a verification: the owner of a GKMCache may write any annotation on it, so the condition is
never True from it (Unknown, ReportedByKyverno, without the key; still VerificationPending beside the Jobs' check),
and only what the collection verified with the admin's key makes it True. A Job whose check fails extracts
nothing, and its slot is an Error with the extractor's message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_ANNOTATION,
    EXTRACTED,
    INCOMPATIBLE,
    KERNEL_OVERLAY_STATUS,
    OUTDATED,
    SIGNATURE_FORMAT_LABEL,
    SIGNATURE_VERIFIED_CONDITION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.verification import (
    SIGNATURE_NOT_VERIFIED,
)

KYVERNO_RECORD = "kyverno.io/verify-images"


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


def _kyverno_note(image):
    return ("the resource's %s annotation records a pass for %s, a note only: anyone who may edit the resource can "
            "write it" % (KYVERNO_RECORD, image))


def _reported_by_kyverno(signature_format, image):
    """(status, reason, message) without the key, when the annotation records a pass: a note, not a verification."""
    return "Unknown", "ReportedByKyverno", (
        "labelled %s=%s: %s, and the collection verified nothing (no public key). Fix: give the key in "
        "signature_public_key (the caches role's caches_signature_public_key)"
        % (SIGNATURE_FORMAT_LABEL, signature_format, _kyverno_note(image)))


def _current(entries):
    return [entry for entry in entries if entry.get("phase") not in (OUTDATED, INCOMPATIBLE)]


def _by_extraction(signature_format, image, entries):
    """(status, reason, message) of the Jobs' own check: refused, done on every slot, or still to come."""
    current = _current(entries)
    refused = [entry for entry in current if entry.get("reason") == SIGNATURE_NOT_VERIFIED]
    if refused:
        return "False", "VerificationFailed", "%d extraction Job(s) refused %s: %s" % (
            len(refused), image, refused[0].get("message") or "the signature does not verify")
    done = [entry for entry in current if entry.get("phase") == EXTRACTED]
    if current and len(done) == len(current):
        return "True", "VerifiedByExtraction", (
            "every extraction Job verified the %s signature of %s with the public key (signature_public_key) "
            "before extracting it (%d volume(s))" % (signature_format, image, len(done)))
    return "Unknown", "VerificationPending", (
        "the extraction Jobs verify the %s signature of %s with the public key before extracting; %d of %d "
        "volume(s) done" % (signature_format, image, len(done), len(current)))


def _by_reconcile(signature_format, image, digest):
    return "True", "VerifiedByReconcile", (
        "mountMode imageVolume: the reconcile verified the %s signature of %s at %s with the public key "
        "(signature_public_key) before recording that digest, the one pods annotated %s mount"
        % (signature_format, image, digest, CACHE_ANNOTATION))


def _unchecked(resource, signature_format, image, image_volume_digest):
    """(status, reason, message) when no one checked the image: what goes unchecked in its mode, and the fix."""
    kyverno = ("Kyverno does not see cluster-scoped resources" if resource.get("kind") == "ClusterGKMCache" else
               "Kyverno recorded no verification (is it running, with the kyverno role's policies?)")
    if image_volume_digest:
        checker, consequence, fix = (
            "the reconcile", "pods annotated %s mount %s unchecked" % (CACHE_ANNOTATION, image_volume_digest),
            "the reconcile verifies each digest before it records it")
    else:
        checker, consequence, fix = ("the extraction Jobs", "the image is extracted unchecked",
                                     "the Jobs verify before they extract")
    return "False", "NotVerified", (
        "labelled %s=%s, but nothing checked the signature of %s: %s and %s had no public key; %s. Fix: give the key "
        "in signature_public_key (the caches role's caches_signature_public_key), and %s"
        % (SIGNATURE_FORMAT_LABEL, signature_format, image, kyverno, checker, consequence, fix))


# What the messages call the format of a check the admin required of an unlabelled cache (either format).
REQUIRED_FORMAT = "cosign (v2 or v3)"


def signature_condition(resource, now, entries=(), key_given=False, image_volume_digest=None, required=False):
    """The SignatureVerified condition of a labelled cache resource, or of any when the admin requires a check
    (required: signature_required); None for an unlabelled one otherwise.

    entries: the status entries of the run (status.py); key_given: whether the run verified with the public key.
    image_volume_digest: in mountMode imageVolume, the digest the run recorded (no Jobs: with the key, the reconcile
    verified it first); None in PVC mode, where the Jobs verify.
    """
    metadata = resource.get("metadata") or {}
    signature_format = (metadata.get("labels") or {}).get(SIGNATURE_FORMAT_LABEL) or (
        REQUIRED_FORMAT if required else None)
    if not signature_format:
        return None
    image = (resource.get("spec") or {}).get("image") or ""
    kyverno_passed = _kyverno_passed(metadata.get("annotations") or {}, image)
    if key_given and image_volume_digest:
        status, reason, message = _by_reconcile(signature_format, image, image_volume_digest)
    elif key_given:
        status, reason, message = _by_extraction(signature_format, image, entries)
        if status == "Unknown" and kyverno_passed:
            message = "%s; %s" % (message, _kyverno_note(image))
    elif kyverno_passed:
        status, reason, message = _reported_by_kyverno(signature_format, image)
    else:
        status, reason, message = _unchecked(resource, signature_format, image, image_volume_digest)
    return {"type": SIGNATURE_VERIFIED_CONDITION, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now}


def refused_status(status, current, kept_digest, now):
    """The Error status of a reconcile that refused the resolved digest's signature (image_signature.py), with
    SignatureVerified False and, when the digest the status recorded still verifies (kept_digest), that digest and
    its targets and kernel overlay: pods go on mounting it, and no unverified digest reaches the status."""
    status = dict(status)
    if kept_digest:
        status.update(resolvedDigest=kept_digest, targets=list((current or {}).get("targets") or []))
        if (current or {}).get(KERNEL_OVERLAY_STATUS):
            status[KERNEL_OVERLAY_STATUS] = current[KERNEL_OVERLAY_STATUS]
    message = next(c["message"] for c in status["conditions"] if c["type"] == "Ready")
    status["conditions"] = status["conditions"] + [{"type": SIGNATURE_VERIFIED_CONDITION, "status": "False",
                                                    "reason": "VerificationFailed", "message": message,
                                                    "lastTransitionTime": now}]
    return status
