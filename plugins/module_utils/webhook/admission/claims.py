# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Admission decisions of the PVC-mutation webhook: AdmissionReview v1 in, AdmissionReview v1 out.

Pure: the only input besides the review is a CacheView (webhook_view.py). For a pod labelled
gkm.io/pvc-mutation=true, each PVC volume whose claimName names a cache visible from the pod's
namespace is rewritten to the pod's node's extracted PVC of the cache's current digest, or, until that one is
extracted, of the previous digest the node still holds (make before break); a node with neither is denied.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    PVC_MUTATION_LABEL,
)

ADMISSION_API_VERSION = "admission.k8s.io/v1"

# Outcomes, also the values of the server's requests_total{outcome=...} metric.
PATCHED = "patched"
ALLOWED = "allowed"
DENIED = "denied"
INVALID = "invalid"


class Decision:
    """The HTTP status and body to answer with, plus the outcome for metrics and logs.

    message may be given as a function: a patch's description is only built when it is logged.
    """

    __slots__ = ("_message", "body", "http_status", "outcome")

    def __init__(self, http_status, body, outcome, message=""):
        self.http_status = http_status
        self.body = body
        self.outcome = outcome
        self._message = message

    @property
    def message(self):
        return self._message() if callable(self._message) else self._message


def _invalid(message):
    return Decision(400, {"error": message}, INVALID, message)


def _review(response):
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": response}


def _allow(uid, reason):
    return Decision(200, _review({"uid": uid, "allowed": True}), ALLOWED, reason)


def _deny(uid, message):
    response = {"uid": uid, "allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": message}}
    return Decision(200, _review(response), DENIED, message)


def _patch(uid, operations, message):
    patch = base64.b64encode(json.dumps(operations, separators=(",", ":")).encode()).decode()
    response = {"uid": uid, "allowed": True, "patchType": "JSONPatch", "patch": patch}
    return Decision(200, _review(response), PATCHED, message)


def _dict(value):
    return value if isinstance(value, dict) else {}


def pod_node(spec):
    """The node a pod will run on as far as admission can tell, or None.

    spec.nodeName wins; otherwise the required node affinity must pin every nodeSelectorTerm
    to nodes by `matchFields: metadata.name In [...]` (what the DaemonSet controller writes),
    and together the terms must allow exactly one node.
    """
    node_name = spec.get("nodeName")
    if isinstance(node_name, str) and node_name:
        return node_name
    required = _dict(_dict(_dict(spec.get("affinity")).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return None
    allowed = set()
    for term in terms:
        term_nodes = _term_nodes(_dict(term))
        if term_nodes is None:
            return None
        allowed |= term_nodes
    return allowed.pop() if len(allowed) == 1 else None


def _term_nodes(term):
    """Node names one nodeSelectorTerm allows by metadata.name In, or None if it does not restrict them."""
    fields = term.get("matchFields")
    nodes = None
    for requirement in fields if isinstance(fields, list) else ():
        requirement = _dict(requirement)
        values = requirement.get("values")
        if requirement.get("key") != "metadata.name" or requirement.get("operator") != "In":
            continue
        if not isinstance(values, list):
            continue
        names = {value for value in values if isinstance(value, str)}
        nodes = names if nodes is None else nodes & names
    return nodes


def _pod_label(metadata, namespace):
    name = metadata.get("name") or "{0}<generated>".format(metadata.get("generateName") or "")
    return '"{0}/{1}"'.format(namespace, name)


def _cache_claims(volumes, namespace, view):
    """(volume index, volume name, CacheClaim) for each PVC volume that names a per-node cache."""
    claims = []
    for index, volume in enumerate(volumes if isinstance(volumes, list) else ()):
        volume = _dict(volume)
        claim_name = _dict(volume.get("persistentVolumeClaim")).get("claimName")
        if not isinstance(claim_name, str) or not claim_name:
            continue
        claim = view.resolve(namespace, claim_name)
        if claim is not None and not claim.read_only:
            claims.append((index, volume.get("name"), claim))
    return claims


def review_request(review):
    """(request, None) for a well-formed AdmissionReview (already JSON-decoded), else (None, its 400 Decision)."""
    if not isinstance(review, dict) or review.get("kind") != "AdmissionReview":
        return None, _invalid("expected an AdmissionReview object")
    if review.get("apiVersion") != ADMISSION_API_VERSION:
        return None, _invalid("expected apiVersion {0}, got {1!r}".format(ADMISSION_API_VERSION,
                                                                          review.get("apiVersion")))
    request = review.get("request")
    if not isinstance(request, dict):
        return None, _invalid("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return None, _invalid("the AdmissionReview request has no uid")
    return request, None


def decision(uid, operations, denial, note):
    """The answer to request uid: denied when there is a denial, else patched when there are operations."""
    if denial:
        return _deny(uid, denial)
    if operations:
        return _patch(uid, operations, note)
    return _allow(uid, note)


def admit(review, view):
    """Decide on one AdmissionReview (already JSON-decoded) for the PVC mutation alone. Never raises on bad input."""
    request, invalid = review_request(review)
    if invalid is not None:
        return invalid
    return decision(request["uid"], *pvc_mutation(request, view))


def pvc_mutation(request, view):
    """(JSONPatch operations, denial message or None, note) of the claim rewrite for one well-formed request."""
    kind = _dict(request.get("kind"))
    if kind.get("group") != "" or kind.get("kind") != "Pod" or request.get("subResource"):
        return [], None, "not a pod"
    if request.get("operation") != "CREATE":
        return [], None, "not a create"
    pod = _dict(request.get("object"))
    metadata = _dict(pod.get("metadata"))
    if _dict(metadata.get("labels")).get(PVC_MUTATION_LABEL) != "true":
        return [], None, "pod not labelled {0}=true".format(PVC_MUTATION_LABEL)
    namespace = request.get("namespace") or metadata.get("namespace") or ""
    spec = _dict(pod.get("spec"))
    claims = _cache_claims(spec.get("volumes"), namespace, view)
    if not claims:
        return [], None, "no volume names a per-node cache"

    pod_label = _pod_label(metadata, namespace)
    node = pod_node(spec)
    if node is None:
        caches = ", ".join(sorted({claim.describe() for _index, _volume, claim in claims}))
        return [], (
            "pod {0} mounts {1}, whose ReadWriteOnce storage has one PVC per node, but its node is "
            "not known at admission: run the workload as a DaemonSet (its pods are pinned with a "
            "matchFields metadata.name affinity) or set spec.nodeName").format(pod_label, caches), ""

    operations = []
    rewrites = []
    missing = []
    for index, volume_name, claim in claims:
        pvc = claim.pvc_for(node)
        if pvc is None:
            missing.append(claim)
            continue
        operations.append({
            "op": "replace",
            "path": "/spec/volumes/{0}/persistentVolumeClaim/claimName".format(index),
            "value": pvc,
        })
        rewrites.append((volume_name, pvc))
    if missing:
        reasons = "; ".join(_missing_message(claim, node) for claim in missing)
        # The note is the bare reasons: decide.py puts them on a pod it lets wait Pending instead.
        return [], reasons + " (pod {0}; a DaemonSet controller retries on its own)".format(pod_label), reasons
    return operations, None, lambda: "pod {0} on node {1}: {2}".format(
        pod_label, node, ", ".join("volume {0} -> {1}".format(*rewrite) for rewrite in rewrites))


def _missing_message(claim, node):
    excluded = claim.excluded_reason(node)
    if excluded:
        # Waiting or distributing again cannot help: the node itself keeps the cache off.
        return '{0} is not for node "{1}": {2}'.format(claim.describe(), node, excluded)
    if claim.digest is None:
        state = "has not been distributed to any node yet"
    else:
        state = 'is not extracted for node "{0}" (digest {1}) yet'.format(node, claim.digest)
    return (
        '{0} {1}: run gkm.cluster.cache_distribute for it so node "{2}" gets its PVC '
        "(gkm.cluster.cache_info shows whether the node is eligible)"
    ).format(claim.describe(), state, node)
