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

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.claims import (
    decision,
    pvc_mutation,
    review_request,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.steering import steer


def decide(review, cache_view, steering_view):
    """The Decision on one AdmissionReview (already JSON-decoded); never raises on bad input."""
    request, invalid = review_request(review)
    if invalid is not None:
        return invalid
    steering = steer(request, steering_view)
    operations, denial, note = pvc_mutation(request, cache_view)
    if not operations:
        note = steering.note
    elif steering.operations:
        note = _joined(note, steering.note)
    return decision(request["uid"], operations + steering.operations, denial or steering.denial, note)


def _joined(mutation_note, steering_note):
    # The rewrite's description is built only when a patch is logged.
    return lambda: "%s; %s" % (mutation_note(), steering_note)
