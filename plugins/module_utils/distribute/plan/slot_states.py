# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What each slot of a plan is now, pure: from its live PVC (the extracted mark, a recorded failure), its Job and
the Job's pods, a phase (Pending, Extracting, Extracted, Error, Outdated, Incompatible) with the reason, message and
the option that fixes it. A Job whose pod the scheduler cannot place is Pending with the scheduler's own message."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import holds_extracted
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import slot_namespace
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
    EXTRACTED,
    EXTRACTING,
    INCOMPATIBLE,
    MANAGED_BY_LABEL,
    MANAGER,
    OUTDATED,
    PENDING,
    SPEC_HASH_ANNOTATION,
    UNSCHEDULABLE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import job_condition
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import failure_record
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.conflicts import CONFLICT
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.job_pods import (
    IMAGE_NOT_PULLABLE,
    JOB_NAME_LABEL,
    pods_problem,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import (
    DIGEST_LIMIT,
    HELD,
    KEPT_UNTIL_REPLACED,
    LIMITED,
    PREVIOUS,
    REFUSED,
    WAITING_FOR_WAVE,
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
DIGEST_LIMIT_FIX = "the pods named end, or extract_limits.max_digests (caches_extract_limits) is raised"


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
    if slot.outcome == LIMITED:
        return PENDING, slot.reason, [DIGEST_LIMIT_FIX], DIGEST_LIMIT
    if slot.outcome == REFUSED:
        return ERROR, slot.reason, [], CONFLICT
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


def slot_entries(slots, incompatible, excluded, live, pods, untolerated_taints=None):
    """(entries, unschedulable, serving) of a cache's slots: each slot's namespace, node, digest, objects and phase
    (with its reason, message and fix), who mounts it; the Jobs the scheduler cannot place, with the taints no
    toleration covers (untolerated_taints: {taint: node count}, the scheduler's message stops naming them on large
    clusters); the serving PVCs. The planner's rollout and the status both read these.

    slots: SlotStates (plan.slots, or status.cache_status.slots_from_live for a cache known only from the cluster).
    incompatible: nodes whose GPUs the image does not fit, with their reasons in excluded. live: {kind: [objects]}.
    """
    pvcs = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in live.get("PersistentVolumeClaim", [])}
    # A slot's Job by the slot's namespace: it runs in the system namespace, or in the slot's (slot_namespace); a node's
    # store's Job, under '', fills every namespace's slot there.
    jobs = {(slot_namespace(o), o["metadata"]["name"]): o for o in live.get("Job", [])}
    job_pods = _index_job_pods(pods)
    # Who mounts each PVC, so every entry says it (undeploy lists these pods before it removes anything).
    mounts = pod_mounts(pods)
    entries, unschedulable, serving = [], [], []
    for slot in slots:
        if slot.outcome in ("outdated", PREVIOUS):
            entries.append(_entry(slot, OUTDATED, slot.reason, users=mounts.get((slot.namespace, slot.pvc)),
                                  reason=KEPT_UNTIL_REPLACED if slot.outcome == PREVIOUS else None))
            continue
        if slot.outcome == SERVING:
            # Not a slot of its own: its pods run on the nodes' slots, so they count as running pods.
            users = mounts.get((slot.namespace, slot.pvc)) or []
            serving.append({"namespace": slot.namespace, "pvc": slot.pvc, "pv": slot.pv, "digest": slot.digest,
                            "mounted_by": ["%s/%s" % (u["namespace"], u["name"]) for u in users]})
            continue
        job = jobs.get((slot.namespace, slot.job)) or jobs.get(("", slot.job))
        pods_of_job = job_pods.get((job["metadata"].get("namespace"), slot.job), []) if job else []
        phase, message, fixes, reason = slot_phase(slot, pvcs.get((slot.namespace, slot.pvc)), job, pods_of_job)
        entries.append(_entry(slot, phase, message, fixes, users=mounts.get((slot.namespace, slot.pvc)),
                              reason=reason))
        if reason == UNSCHEDULABLE:
            diagnosis = {"namespace": slot.namespace, "job": slot.job, "message": message, "fix": fixes}
            if untolerated_taints and "taint" in message:
                diagnosis["untolerated_taints"] = dict(untolerated_taints)
            unschedulable.append(diagnosis)
    for node in incompatible:
        entries.append({"namespace": "", "node": node, "phase": INCOMPATIBLE, "message": excluded[node][-1]})

    return entries, unschedulable, serving
