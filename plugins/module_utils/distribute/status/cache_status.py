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
    holds_extracted,
    is_serving,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    DIGEST_LABEL,
    ERROR,
    EXTRACTED,
    EXTRACTING,
    INCOMPATIBLE,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
    OUTDATED,
    PENDING,
    RUNNING,
    SPEC_HASH_ANNOTATION,
    UNSCHEDULABLE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import failure_record
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.job_pods import (
    IMAGE_NOT_PULLABLE,
    JOB_NAME_LABEL,
    pods_problem,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import (
    HELD,
    KEPT_UNTIL_REPLACED,
    PREVIOUS,
    WAITING_FOR_WAVE,
    SlotState,
    job_condition,
    pod_mounts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.serving import SERVING

# Scheduler message fragments -> the option that changes the outcome.
_FIXES = (
    ("untolerated taint", "pod_template.spec.tolerations"),
    ("didn't match Pod's node affinity/selector", "pod_template.spec.nodeSelector / pod_template.spec.affinity"),
    ("node affinity conflict", "storage_class_name / create_pvs (the volume is bound to another node)"),
    ("unbound immediate PersistentVolumeClaims", "storage_class_name / create_pvs"),
    ("didn't find available persistent volumes", "storage_class_name / create_pvs"),
    ("Insufficient", "free capacity on the nodes (the extraction Job requests cpu 100m, memory 128Mi)"),
    ("were unschedulable", "uncordon the nodes or narrow node_selector"),
    ("no preemption victims", "pod_template.spec.priorityClassName"),
)


def scheduler_fix(message):
    """The options that would let the scheduler place the pod, from its FailedScheduling message."""
    fixes = []
    for fragment, fix in _FIXES:
        if fragment in (message or "") and fix not in fixes:
            fixes.append(fix)
    return fixes


def _unschedulable(pod):
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message") or condition.get("reason") or "unschedulable"
    return None


def _index_job_pods(pods):
    by_job = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) == MANAGER and labels.get(JOB_NAME_LABEL):
            by_job.setdefault((pod["metadata"].get("namespace"), labels[JOB_NAME_LABEL]), []).append(pod)
    return by_job


def slot_phase(slot, pvc, job, job_pods):
    """(phase, message, fixes, reason) of one current slot from its live PVC, Job and the Job's pods.

    A tools image that cannot be pulled is an Error at once: waiting longer cannot help.
    """
    if slot.outcome == "blocked":
        return PENDING, slot.reason, [], None
    if slot.outcome == HELD:
        return PENDING, slot.reason, [], WAITING_FOR_WAVE
    if slot.digest and holds_extracted(pvc, slot.digest):
        return EXTRACTED, None, [], None
    # Recorded when its Job failed: the record outlives the Job (a live Job of another template is a retry).
    job_hash = ((job or {}).get("metadata", {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
    recorded = failure_record.recorded(pvc, slot.digest, job_hash)
    if recorded is not None:
        return ERROR, recorded.message, [*recorded.fix, failure_record.RETRY_FIX], recorded.reason
    if job is None:
        return PENDING, "the extraction Job does not exist yet", [], None
    if job_condition(job, "Complete"):
        return EXTRACTED, None, [], None
    failed = failure_record.job_failure(job, job_pods)
    if failed is not None:
        return ERROR, failed.message, failed.fix, failed.reason
    problem = pods_problem(job_pods)
    for pod in job_pods:
        message = _unschedulable(pod)
        if message:
            return PENDING, message, scheduler_fix(message), UNSCHEDULABLE
    if problem is not None:
        if problem.reason == IMAGE_NOT_PULLABLE:
            return ERROR, problem.message, problem.fix, problem.reason
        return PENDING, problem.message, problem.fix, problem.reason
    if any((pod.get("status") or {}).get("phase") == "Running" for pod in job_pods):
        return EXTRACTING, None, [], None
    return PENDING, "waiting for the extraction pod to start", [], None


def _entry(slot, phase, message=None, fixes=None, users=None, reason=None):
    entry = {"namespace": slot.namespace, "node": slot.node, "digest": slot.digest, "pvc": slot.pvc,
             "job": slot.job, "phase": phase}
    if slot.pv:
        entry["pv"] = slot.pv
    if reason:
        entry["reason"] = reason
    if message:
        entry["message"] = message
    if fixes:
        entry["fix"] = fixes
    users = slot.users or users
    if users:
        entry["mounted_by"] = ["%s/%s" % (u["namespace"], u["name"]) for u in users]
    return entry


def cache_status(slots, eligible_nodes, incompatible, excluded, live, pods, untolerated_taints=None):
    """The status dict of one cache.

    slots: SlotStates (plan.slots, or slots_from_live for a cache known only from the cluster).
    eligible_nodes: names of the nodes that should hold the cache. live: {kind: [objects]} of the cache.
    untolerated_taints: {taint: node count} from the planner; the scheduler's own message stops naming
    taints on large clusters, so an unschedulable Job is reported with these as well.
    """
    pvcs = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in live.get("PersistentVolumeClaim", [])}
    jobs = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in live.get("Job", [])}
    job_pods = _index_job_pods(pods)
    # Who mounts each PVC, so every entry says it (undeploy lists these pods before it removes anything).
    mounts = pod_mounts(pods)
    entries, unschedulable, serving = [], [], []
    current_claims, outdated_claims = set(), set()
    for slot in slots:
        if slot.outcome in ("outdated", PREVIOUS):
            entries.append(_entry(slot, OUTDATED, slot.reason, users=mounts.get((slot.namespace, slot.pvc)),
                                  reason=KEPT_UNTIL_REPLACED if slot.outcome == PREVIOUS else None))
            if slot.pvc:
                outdated_claims.add((slot.namespace, slot.pvc))
            continue
        if slot.outcome == SERVING:
            # Not a slot of its own: its pods run on the nodes' slots, so they count as running pods.
            current_claims.add((slot.namespace, slot.pvc))
            users = mounts.get((slot.namespace, slot.pvc)) or []
            serving.append({"namespace": slot.namespace, "pvc": slot.pvc, "pv": slot.pv, "digest": slot.digest,
                            "mounted_by": ["%s/%s" % (u["namespace"], u["name"]) for u in users]})
            continue
        if slot.outcome == "current":
            current_claims.add((slot.namespace, slot.pvc))
        job_key = (slot.namespace, slot.job)
        phase, message, fixes, reason = slot_phase(slot, pvcs.get((slot.namespace, slot.pvc)), jobs.get(job_key),
                                                   job_pods.get(job_key, []))
        entries.append(_entry(slot, phase, message, fixes, users=mounts.get((slot.namespace, slot.pvc)),
                              reason=reason))
        if reason == UNSCHEDULABLE:
            diagnosis = {"namespace": slot.namespace, "job": slot.job, "message": message, "fix": fixes}
            if untolerated_taints and "taint" in message:
                diagnosis["untolerated_taints"] = dict(untolerated_taints)
            unschedulable.append(diagnosis)
    for node in incompatible:
        entries.append({"namespace": "", "node": node, "phase": INCOMPATIBLE, "message": excluded[node][-1]})

    nodes = set(eligible_nodes)
    node_phases = {}
    for entry in entries:
        if entry["phase"] in (OUTDATED, INCOMPATIBLE):
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
    pvcs, jobs = objects.get("PersistentVolumeClaim", []), objects.get("Job", [])
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
                               jobs_by_slot.get((namespace, node, digest)),
                               reason=None if outcome == "current" else "digest %s is not the newest" % digest))
        if node and outcome == "current":
            nodes.add(node)
    return slots, sorted(nodes)


def _slot_key(obj):
    labels = obj["metadata"].get("labels") or {}
    # Objects labelled by hand or by an older version may lack the digest: they still belong to the cache.
    return (obj["metadata"].get("namespace"), labels.get(NODE_LABEL, ""), labels.get(DIGEST_LABEL, ""))
