# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One answer per admission request: the PVC mutation (admission.py) and steering (steering.py) together, pure.

A Pod CREATE gets both on the same object, in one JSONPatch (they touch different paths: claim names, and the volume,
mounts and required node affinity), and is denied when either denies; with the rewrite's reason when it has one, as
it names the pod's node and why the cache is not there (steering would only say where the cache is). Steering reads
the pod as written, before the rewrite, because it recognizes a cache by the claim name the rewrite replaces.
Workloads get steering only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_PENDING_ANNOTATION
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.claims import (
    decision,
    pvc_mutation,
    review_request,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.steering import steer, waiting_on_its_node


def decide(review, cache_view, steering_view):
    """The Decision on one AdmissionReview (already JSON-decoded); never raises on bad input."""
    request, invalid = review_request(review)
    if invalid is not None:
        return invalid
    operations, denial, note = pvc_mutation(request, cache_view)
    if denial:
        waiting = waiting_on_its_node(request, steering_view)
        if waiting is not None:
            reason = "%s; the pod waits Pending until its node holds it" % note
            return decision(request["uid"], waiting.operations + _annotation(request["object"], reason), None,
                            "%s; %s" % (reason, waiting.note))
    steering = steer(request, steering_view)
    if not operations:
        note = steering.note
    elif steering.operations:
        note = _joined(note, steering.note)
    return decision(request["uid"], operations + steering.operations, denial or steering.denial, note)


def _joined(mutation_note, steering_note):
    # The rewrite's description is built only when a patch is logged.
    return lambda: "%s; %s" % (mutation_note(), steering_note)


def _annotation(pod, value):
    """JSONPatch operations setting the pod's CACHE_PENDING_ANNOTATION."""
    if not isinstance((pod.get("metadata") or {}).get("annotations"), dict):
        return [{"op": "add", "path": "/metadata/annotations", "value": {CACHE_PENDING_ANNOTATION: value}}]
    path = "/metadata/annotations/" + CACHE_PENDING_ANNOTATION.replace("/", "~1")
    return [{"op": "add", "path": path, "value": value}]
