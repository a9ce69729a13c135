# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A distributed cache's status, computed from the plan's slots and what the cluster reports.

Per namespace and node: the PVC, the Job and a phase (Pending, Extracting, Extracted, Error,
Incompatible, Outdated), with a reason, message and fix when something is wrong (job_pods.py reads the
Job's pods). Per cache: GKM's printer columns, every one of them computed: nodes,
node_in_use, node_not_in_use, node_error, pod_running, pod_outdated. A Job whose pod the scheduler
cannot place is reported with the scheduler's own message and the option that would fix it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import (
    is_serving,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import slot_namespace
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    DIGEST_LABEL,
    ERROR,
    EXTRACTED,
    EXTRACTING,
    INCOMPATIBLE,
    NODE_LABEL,
    OUTDATED,
    PENDING,
    RUNNING,
    SLOT_ACCESS_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.conflicts import CONFLICT
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import (
    KEPT_UNTIL_REPLACED,
    PREVIOUS,
    SlotState,
    pod_mounts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.serving import SERVING
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.slot_states import (
    slot_entries,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import image_volume


def cache_status(slots, eligible_nodes, incompatible, excluded, live, pods, untolerated_taints=None):
    """The status dict of one cache.

    slots: SlotStates (plan.slots, or slots_from_live for a cache known only from the cluster).
    eligible_nodes: names of the nodes that should hold the cache. live: {kind: [objects]} of the cache.
    untolerated_taints: {taint: node count} from the planner; the scheduler's own message stops naming
    taints on large clusters, so an unschedulable Job is reported with these as well.
    """
    entries, unschedulable, serving = slot_entries(slots, incompatible, excluded, live, pods, untolerated_taints)
    mounts = pod_mounts(pods)
    current_claims = {(s.namespace, s.pvc) for s in slots if s.outcome in ("current", SERVING)}
    outdated_claims = {(s.namespace, s.pvc) for s in slots if s.outcome in ("outdated", PREVIOUS) and s.pvc}

    nodes = set(eligible_nodes)
    node_phases = {}
    for entry in entries:
        # A namespace where the cache is refused holds it on no node, and says nothing of the others' nodes.
        if entry["phase"] in (OUTDATED, INCOMPATIBLE) or entry.get("reason") == CONFLICT:
            continue
        # A shared (ReadOnlyMany) PVC serves every node, so its phase applies to all of them.
        for node in [entry["node"]] if entry["node"] else nodes:
            node_phases.setdefault(node, set()).add(entry["phase"])
    error_nodes = {node for node, phases in node_phases.items() if ERROR in phases}
    extracted_nodes = {node for node, phases in node_phases.items() if phases == {EXTRACTED}}

    pod_running = pod_outdated = 0
    in_use = set()
    for claim, users in mounts.items():
        running = [u for u in users if u["phase"] == RUNNING]
        if claim in current_claims:
            pod_running += len(running)
            in_use.update(u["node"] for u in running if u["node"] in nodes)
        elif claim in outdated_claims:
            pod_outdated += len(running)
    counts = {
        "nodes": len(nodes),
        "node_in_use": len(in_use - error_nodes),
        "node_not_in_use": len(extracted_nodes - in_use),
        "node_error": len(error_nodes),
        "pod_running": pod_running,
        "pod_outdated": pod_outdated,
    }
    result = {
        "phase": _overall_phase(entries, counts),
        "counts": counts,
        "entries": entries,
        "unschedulable": unschedulable,
    }
    if serving:
        result["serving"] = serving
    return result


def _overall_phase(entries, counts):
    # A previous digest kept only until its release (make before break) says nothing about the current one; pods
    # still reading it count in pod_outdated.
    phases = {entry["phase"] for entry in entries if entry.get("reason") != KEPT_UNTIL_REPLACED}
    if ERROR in phases:
        return ERROR
    if not phases - {OUTDATED, INCOMPATIBLE} or phases & {PENDING, EXTRACTING}:
        return PENDING
    if OUTDATED in phases or counts["pod_outdated"]:
        return OUTDATED
    if counts["pod_running"]:
        return RUNNING
    return EXTRACTED


# ---------------------------------------------------------------- caches known only from the cluster


def _created(obj):
    return obj["metadata"].get("creationTimestamp") or ""


def group_by_cache(live):
    """{(cache, cache namespace): {kind: [objects]}} of everything the collection manages."""
    caches = {}
    for kind, objects in live.items():
        for obj in objects:
            labels = obj["metadata"].get("labels") or {}
            key = (labels.get(CACHE_LABEL), labels.get(CACHE_NAMESPACE_LABEL, ""))
            if key[0]:
                caches.setdefault(key, {}).setdefault(kind, []).append(dict(obj, kind=kind))
    return caches


def slots_from_live(objects):
    """SlotStates and node names of one cache from its live PVCs and Jobs, without its spec.

    The newest digest is taken as current; PVCs of other digests are outdated.
    """
    jobs = objects.get("Job", [])
    # The PVCs the system namespace's Jobs write through are no slots (render.render_access).
    pvcs = [pvc for pvc in objects.get("PersistentVolumeClaim", [])
            if SLOT_ACCESS_LABEL not in (pvc["metadata"].get("labels") or {})]
    newest = max(pvcs + jobs, key=_created, default=None)
    if newest is None:
        return [], []
    current = _slot_key(newest)[2]
    jobs_by_slot = {_slot_key(job): job["metadata"]["name"] for job in jobs}
    slots, nodes = [], set()
    for pvc in sorted(pvcs, key=lambda o: (o["metadata"].get("namespace"), o["metadata"]["name"])):
        namespace, node, digest = _slot_key(pvc)
        outcome = "current" if digest == current else "outdated"
        if outcome == "current" and is_serving(pvc):
            outcome = SERVING
        slots.append(SlotState(outcome, namespace, node, digest, pvc["metadata"]["name"],
                               jobs_by_slot.get((namespace, node, digest)) or jobs_by_slot.get(("", node, digest)),
                               reason=None if outcome == "current" else "digest %s is not the newest" % digest))
        if node and outcome == "current":
            nodes.add(node)
    return slots, sorted(nodes)


def _slot_key(obj):
    labels = obj["metadata"].get("labels") or {}
    # Objects labelled by hand or by an older version may lack the digest: they still belong to the cache.
    return (slot_namespace(obj), labels.get(NODE_LABEL, ""), labels.get(DIGEST_LABEL, ""))


def status_of(spec, plan, facts):
    """The status of one cache from its plan and the facts: an imageVolume cache's (image_volume.py) or its slots'
    (cache_status), and why no node is eligible when none is."""
    eligibility = plan.eligibility
    if spec.image_volume and spec.state == "present":
        status = image_volume.cache_status(spec, eligibility, facts.pods, facts.nodes)
    else:
        status = cache_status(plan.slots, [n["metadata"]["name"] for n in eligibility.eligible],
                              eligibility.incompatible, eligibility.excluded, facts.objects, facts.pods,
                              eligibility.untolerated_taints)
    if spec.state == "present" and not eligibility.eligible:
        status["unplaced"] = _unplaced_message(plan)
    return status


def _unplaced_message(plan):
    by_reason = {}
    for node, reasons in sorted(plan.eligibility.excluded.items()):
        by_reason.setdefault("; ".join(reasons), []).append(node)
    details = " | ".join("%s: %s" % (", ".join(nodes[:5]) + (" (+%d)" % (len(nodes) - 5) if len(nodes) > 5 else ""),
                                     reason) for reason, nodes in by_reason.items())
    return "no node is eligible for the cache yet: %s" % (details or "the cluster has no nodes")
