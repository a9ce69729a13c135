# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The required node affinity that keeps a pod to nodes where its caches are usable, pure.

A cache contributes alternatives (one list of matchExpressions each, any one of which will do): its readiness label
(distribute/node_readiness.py) for PVC modes (or the hostnames of the nodes holding the digest, while some hold it
without the label saying so), and one alternative per (backend, warp size) of its GPU targets with
the node GPU labels of oci/gpu_compat.py. The pod's own terms are kept: every term is combined with every choice of
one alternative per cache (nodeSelectorTerms are ORed, expressions within a term ANDed), so nothing the pod asked
for is lost.

Steering again must not stack up: before merging, the expressions steering writes for these caches (any on a
readiness key of theirs, and GPU expressions equal to the ones it would write) are taken out of the pod's terms.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    GPU_ARCH_LABEL,
    GPU_BACKEND_LABEL,
    GPU_WARP_SIZE_LABEL,
    HOSTNAME_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scheduling import required_affinity_matches
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import normalize_gpu

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _mapping(value):
    return value if isinstance(value, dict) else {}


def readiness_requirement(key, short_digest):
    """The node must hold the cache extracted at the digest the pod will mount; with short_digest None (a pod
    template, which outlives digests) at any digest: the label keeps the previous one until the new is extracted."""
    if short_digest is None:
        return {"key": key, "operator": "Exists"}
    return {"key": key, "operator": "In", "values": [short_digest]}


def _arch_values(backend, arch):
    # gpu_compat compares CUDA archs without "sm_": a node may carry either spelling.
    return sorted({arch, "sm_" + arch}) if backend == "cuda" else [arch]


def gpu_alternatives(targets):
    """[[expressions]] a node's GPU labels must meet for one of the targets; targets sharing backend and warp size
    share one alternative (their archs are listed together)."""
    archs = {}
    for target in targets or ():
        gpu = normalize_gpu(target)
        archs.setdefault((gpu["backend"], gpu["warp_size"]), set()).update(_arch_values(gpu["backend"], gpu["arch"]))
    return [[
        {"key": GPU_BACKEND_LABEL, "operator": "In", "values": [backend]},
        {"key": GPU_ARCH_LABEL, "operator": "In", "values": sorted(archs[(backend, warp_size)])},
        {"key": GPU_WARP_SIZE_LABEL, "operator": "In", "values": [str(warp_size)]},
    ] for backend, warp_size in sorted(archs)]


class CacheRequirement:
    """What one cache asks of a node: `alternatives` ([[expressions]], one of which must hold; [] asks nothing) and
    the readiness key steering owns for it (None for a cache without a readiness label)."""

    __slots__ = ("alternatives", "readiness_key")

    def __init__(self, alternatives, readiness_key=None):
        self.alternatives = alternatives
        self.readiness_key = readiness_key

    def owns(self, expression):
        if self.readiness_key and expression.get("key") == self.readiness_key:
            return True
        return any(expression == owned for alternative in self.alternatives for owned in alternative)


def holders_requirement(hostnames):
    """The node must be one of these: the nodes holding the digest when the readiness label does not show them all
    (a serving PVC kept at an old digest). One expression, not one matchFields term per node: matchFields takes a
    single value."""
    return {"key": HOSTNAME_LABEL, "operator": "In", "values": sorted(hostnames)}


def cache_requirement(readiness_key, short_digest, targets, holders=None):
    """readiness_key None for a mode without one (imageVolume, ReadOnlyMany); short_digest None for any digest;
    targets [] when unknown; holders: hostnames that replace the readiness label, None to use the label."""
    gpu = gpu_alternatives(targets)
    if readiness_key is None:
        return CacheRequirement(gpu)
    readiness = readiness_requirement(readiness_key, short_digest) if holders is None else holders_requirement(holders)
    return CacheRequirement([[readiness, *alternative] for alternative in gpu] or [[readiness]], readiness_key)


def required_terms(spec):
    """The pod spec's required nodeSelectorTerms ([] when it has none)."""
    required = _mapping(_mapping(_mapping(spec.get("affinity")).get("nodeAffinity")).get(REQUIRED))
    terms = required.get("nodeSelectorTerms")
    return [_mapping(term) for term in terms] if isinstance(terms, list) else []


def _without_owned(term, requirements):
    expressions = [e for e in term.get("matchExpressions") or [] if isinstance(e, dict)
                   and not any(requirement.owns(e) for requirement in requirements)]
    stripped = {key: value for key, value in term.items() if key != "matchExpressions"}
    if expressions:
        stripped["matchExpressions"] = expressions
    return stripped


def _with(term, expressions):
    combined = list(term.get("matchExpressions") or [])
    combined.extend(e for e in expressions if e not in combined)
    return dict(term, matchExpressions=combined)


def merged_terms(terms, requirements):
    """The nodeSelectorTerms that keep the pod's own placement and add the caches' requirements."""
    choices = [[expression for alternative in combination for expression in alternative]
               for combination in itertools.product(*[r.alternatives for r in requirements if r.alternatives])]
    merged = []
    for term in terms or [{}]:
        if terms and not term.get("matchExpressions") and not term.get("matchFields"):
            merged.append(term)  # an empty term selects no node; adding to it would widen the pod's placement
            continue
        base = _without_owned(term, requirements)
        for choice in choices:
            candidate = _with(base, choice) if choice else base
            if candidate and candidate not in merged:
                merged.append(candidate)
    return merged


def affinity_operations(spec, spec_path, terms):
    """JSONPatch operations that set the required node affinity of the spec at spec_path to terms, keeping every
    other part of its affinity; [] when it already is."""
    if terms == required_terms(spec):
        return []
    required = {"nodeSelectorTerms": terms}
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict):
        return [{"op": "add", "path": spec_path + "/affinity", "value": {"nodeAffinity": {REQUIRED: required}}}]
    if not isinstance(affinity.get("nodeAffinity"), dict):
        return [{"op": "add", "path": spec_path + "/affinity/nodeAffinity", "value": {REQUIRED: required}}]
    # "add" on an existing member replaces it (RFC 6902); preferred terms and pod (anti-)affinity stay.
    return [{"op": "add", "path": spec_path + "/affinity/nodeAffinity/" + REQUIRED, "value": required}]


def node_fits(node, spec, terms):
    """True when the scheduler could place a pod with this spec (nodeName, nodeSelector) and terms on the node;
    taints and resources are left to the scheduler."""
    metadata = node["metadata"]
    if spec.get("nodeName") and spec["nodeName"] != metadata["name"]:
        return False
    labels = metadata.get("labels") or {}
    selector = _mapping(spec.get("nodeSelector"))
    if any(labels.get(key) != value for key, value in selector.items()):
        return False
    return required_affinity_matches(node, {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}} if terms
                                     else None)
