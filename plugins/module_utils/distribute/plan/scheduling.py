# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Scheduling predicates, pure: which nodes a cache's extraction Job can run on, and why not.

Taints and tolerations, node selectors, required node affinity and GPU compatibility, evaluated the
way the scheduler evaluates them, so a plan names the reason a node is left out.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    GPU_LABELS,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import (
    GPUSpecError,
    gpus_compatible,
    gpus_from_node_labels,
)

# The reason of a node without GPU labels; node_status.py sorts reasons by it.
NO_GPU_LABELS = "no %s labels" % GPU_LABELS
TOLERATIONS_FIX = "pod_template.spec.tolerations"
AFFINITY_FIELD = "pod_template.spec.affinity"


TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class PlanError(ValueError):
    """The desired state cannot be planned against this cluster; the message says what to change.

    reason: the machine-readable cause a cache resource's status carries.
    """

    def __init__(self, message, reason="Unplannable"):
        super(PlanError, self).__init__(message)
        self.reason = reason


def toleration_problems(tolerations):
    """What the API server would refuse in the pod template's tolerations, each naming its field and the fix.

    Checked before any node is judged: an invalid toleration tolerates nothing, which would otherwise be
    reported as untolerated taints.
    """
    problems = []
    for index, toleration in enumerate(tolerations or []):
        field = "%s[%d]" % (TOLERATIONS_FIX, index)
        if not isinstance(toleration, dict):
            problems.append("%s must be a mapping (key, operator, value, effect)" % field)
            continue
        operator = toleration.get("operator") or "Equal"
        if operator not in TOLERATION_OPERATORS:
            problems.append("%s.operator %r is not an operator: use Equal or Exists" % (field, operator))
        elif operator == "Exists" and toleration.get("value"):
            problems.append("%s.value must be empty when operator is Exists: remove the value or use Equal"
                            % field)
        if not toleration.get("key") and operator != "Exists":
            problems.append("%s.key is required unless operator is Exists" % field)
        effect = toleration.get("effect")
        if effect and effect not in TAINT_EFFECTS:
            problems.append("%s.effect %r is not an effect: use one of %s" % (field, effect, ", ".join(TAINT_EFFECTS)))
    return problems


def _requirement_problems(requirements, field):
    """What is malformed in a node selector term's matchExpressions or matchFields."""
    if not isinstance(requirements, list):
        return ["%s must be a list" % field]
    problems = []
    for index, requirement in enumerate(requirements):
        at = "%s[%d]" % (field, index)
        if not isinstance(requirement, dict):
            problems.append("%s must be a mapping (key, operator, values)" % at)
        elif not isinstance(requirement.get("values") or [], list):
            problems.append("%s.values must be a list" % at)
    return problems


def affinity_problems(affinity):
    """What is malformed in the part of the pod template's affinity the planner reads (the required node affinity),
    each naming its field. The CRDs' schema refuses these when a cache is written; this guards a resource written
    before they did, so it fails on its own instead of in a loop shared with other caches."""
    value, field = affinity, AFFINITY_FIELD
    # Down to the required node affinity: each level a mapping, an absent one requiring nothing.
    for key in ("nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", None):
        if value is None:
            return []
        if not isinstance(value, dict):
            return ["%s must be a mapping" % field]
        if key:
            value, field = value.get(key), "%s.%s" % (field, key)
    terms, field = value.get("nodeSelectorTerms") or [], field + ".nodeSelectorTerms"
    if not isinstance(terms, list):
        return ["%s must be a list" % field]
    problems = []
    for index, term in enumerate(terms):
        at = "%s[%d]" % (field, index)
        if not isinstance(term, dict):
            problems.append("%s must be a mapping (matchExpressions, matchFields)" % at)
            continue
        for key in ("matchExpressions", "matchFields"):
            problems += _requirement_problems(term.get(key) or [], "%s.%s" % (at, key))
    return problems


def spec_problems(affinity, tolerations):
    """affinity_problems and toleration_problems, and tolerations that are not a list."""
    if not isinstance(tolerations or [], list):
        return ["%s must be a list" % TOLERATIONS_FIX]
    return affinity_problems(affinity) + toleration_problems(tolerations)


# ---------------------------------------------------------------- scheduling predicates


def _tolerates(toleration, taint):
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key")
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


# The node lifecycle controller taints a node while a condition lasts (a missed heartbeat, resource pressure):
# health for now, not where the cache belongs. A node that skips one heartbeat keeps its extracted slots, and a
# new slot's Job waits for the node (the scheduler's reason is its status); a Node deleted releases them.
NODE_CONDITION_TAINTS = frozenset("node.kubernetes.io/%s" % condition for condition in (
    "not-ready", "unreachable", "memory-pressure", "disk-pressure", "pid-pressure", "network-unavailable"))


def node_taints(node):
    """The node's taints but the condition ones, plus the one a cordon implies (the scheduler treats both
    alike)."""
    spec = node.get("spec") or {}
    taints = [taint for taint in spec.get("taints") or [] if taint.get("key") not in NODE_CONDITION_TAINTS]
    if spec.get("unschedulable") and not any(t.get("key") == "node.kubernetes.io/unschedulable" for t in taints):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return taints


def untolerated_taints(node, tolerations):
    """Taints that keep a pod with these tolerations off the node (PreferNoSchedule only discourages)."""
    return [
        taint for taint in node_taints(node)
        if taint.get("effect") in ("NoSchedule", "NoExecute")
        and not any(_tolerates(toleration, taint) for toleration in tolerations or [])
    ]


def format_taint(taint):
    if taint.get("value"):
        return "%s=%s:%s" % (taint["key"], taint["value"], taint["effect"])
    return "%s:%s" % (taint["key"], taint["effect"])


def selector_mismatches(labels, selector):
    """Keys of `selector` whose value the labels do not carry."""
    return sorted(key for key, value in (selector or {}).items() if labels.get(key) != str(value))


def _expression_matches(expression, values_by_key):
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(value) for value in expression.get("values") or []]
    present = key in values_by_key
    value = values_by_key.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def _term_matches(term, node):
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term selects nothing, as in the scheduler
    labels = node["metadata"].get("labels") or {}
    node_fields = {"metadata.name": node["metadata"]["name"]}
    return all(_expression_matches(e, labels) for e in expressions) and all(
        _expression_matches(f, node_fields) for f in fields)


def required_affinity_matches(node, affinity):
    """Whether the node meets the required node affinity; a malformed one is a PlanError naming its field."""
    problems = affinity_problems(affinity)
    if problems:
        raise PlanError("; ".join(problems), reason="InvalidSpec")
    required = ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(_term_matches(term, node) for term in required.get("nodeSelectorTerms") or [])


def gpu_incompatibility(labels, targets):
    """(is_gpu_node, reason): reason is None when the node's GPUs can run one of the image's targets."""
    try:
        gpus = gpus_from_node_labels(labels)
    except GPUSpecError as error:
        return True, "GPU labels unusable: %s" % error
    if not gpus:
        return False, NO_GPU_LABELS + ": not a GPU node (use compatibility: ignore to include it)"
    compatible, incompatible = gpus_compatible(targets or [], gpus)
    if compatible:
        return True, None
    gpu = incompatible[0]
    wanted = ", ".join("%s/%s/%s" % (t["backend"], t["arch"], t["warp_size"]) for t in targets or [])
    return True, "GPU %s/%s/%s does not match the image's targets (%s)" % (
        gpu["backend"], gpu["arch"], gpu["warp_size"], wanted or "none")


class Eligibility:
    """Nodes that get the cache, and for every other node the reasons it does not.

    `incompatible` lists GPU nodes the placement selects whose GPUs cannot run the image (status phase
    Incompatible);
    `untolerated_taints` counts, per taint, the nodes that only taints keep the Job's pod off.
    """

    def __init__(self):
        self.eligible = []
        self.excluded = {}
        self.incompatible = []
        self.untolerated_taints = {}


def placement_problems(node, pod_selector, affinity, tolerations):
    """(reasons, untolerated taints): why a pod of this nodeSelector, required affinity and tolerations cannot go
    onto the node, both empty when it can. The planner and the operator's node events judge placement with it."""
    labels = node["metadata"].get("labels") or {}
    reasons = []
    mismatched = selector_mismatches(labels, pod_selector)
    if mismatched:
        reasons.append("labels do not match pod_template.spec.nodeSelector (%s)" % ", ".join(
            "%s=%s" % (key, pod_selector[key]) for key in mismatched))
    if not required_affinity_matches(node, affinity):
        reasons.append("does not match the required node affinity in pod_template.spec.affinity")
    taints = untolerated_taints(node, tolerations)
    reasons += ["untolerated taint %s (add a toleration to %s)" % (format_taint(taint), TOLERATIONS_FIX)
                for taint in taints]
    return reasons, taints


def node_eligibility(spec, nodes):
    result = Eligibility()
    tolerations = spec.pod_spec("tolerations", [])
    affinity = spec.pod_spec("affinity")
    problems = spec_problems(affinity, tolerations)
    if problems:
        raise PlanError("; ".join(problems), reason="InvalidSpec")
    pod_selector = spec.pod_spec("nodeSelector", {})
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        unselected = selector_mismatches(labels, spec.node_selector)
        if unselected:
            result.excluded[name] = ["not selected by node_selector (%s)" % ", ".join(
                "%s=%s" % (key, spec.node_selector[key]) for key in unselected)]
            continue
        reasons, taints = placement_problems(node, pod_selector, affinity, tolerations)
        placeable_but_for_taints = len(reasons) == len(taints)
        if placeable_but_for_taints:
            for taint in taints:
                taint_text = format_taint(taint)
                result.untolerated_taints[taint_text] = result.untolerated_taints.get(taint_text, 0) + 1
        if spec.compatibility != "ignore":
            is_gpu_node, reason = gpu_incompatibility(labels, spec.targets)
            if reason:
                reasons.append(reason)
                # A node the pod template's placement already keeps out is not a target, so not Incompatible.
                if is_gpu_node and placeable_but_for_taints:
                    result.incompatible.append(name)
        if reasons:
            result.excluded[name] = reasons
        else:
            result.eligible.append(node)
    if spec.compatibility == "fail" and result.incompatible:
        raise PlanError("compatibility is 'fail' and the image cannot run on GPU node(s) %s: %s" % (
            ", ".join(result.incompatible),
            "; ".join("%s: %s" % (n, result.excluded[n][-1]) for n in result.incompatible)), reason="Incompatible")
    return result
