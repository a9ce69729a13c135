# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the marks on our PVCs say, read the same way by the planner, the status, make-before-break and the webhook.

A slot PVC is marked with the digest its Job extracted (`gkm.io/extracted-digest`, written once the Job completed and
verified it); a serving PVC is labelled `gkm.io/serving`. Pure.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DIGEST_LABEL,
    EXTRACTED_DIGEST_ANNOTATION,
    SERVING_LABEL,
)


def extracted_mark(digest):
    """The annotation that marks a PVC extracted at `digest` ('sha256:...')."""
    return {EXTRACTED_DIGEST_ANNOTATION: digest}


def holds_extracted(pvc, digest=None):
    """True when the PVC is marked extracted at `digest` (full or short; by default the PVC's own digest label)."""
    metadata = (pvc or {}).get("metadata") or {}
    digest = (digest or (metadata.get("labels") or {}).get(DIGEST_LABEL) or "").split(":", 1)[-1]
    marker = (metadata.get("annotations") or {}).get(EXTRACTED_DIGEST_ANNOTATION) or ""
    return bool(digest) and marker.split(":", 1)[-1].startswith(digest)


def is_serving(obj):
    """True for a serving PVC or PV (the one named as the cache per namespace, or its alias)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(SERVING_LABEL) == "true"
