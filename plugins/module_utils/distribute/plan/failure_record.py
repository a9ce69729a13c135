# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A failed extraction recorded on its slot's PVC, pure, so that the failure outlives the Job (docs/upgrades.md).

A failed Job is deleted by its TTL (a day); without a record the planner would then create it again: a silent
retry of a node a rolling upgrade rolled back. The planner records the failure on the PVC of the failed slot:
the label `gkm.io/extraction-failed: <short digest>` (selectable, so one `kubectl delete pvc -l` retries every
failed node) and the annotation `gkm.io/extraction-failure` (JSON: reason, message, fix, as the Job said them).
The PVC is the record's place because the planner reads it on every run anyway, its name is the slot's digest
(a new digest is a new slot, without the record), it exists in both modes (playbook and resource), and it is
the object the failure is about. A recorded slot gets no Job; deleting the PVC is the retry, and so is a change of
the Job's template (tools image, pod template, volume owner step: the record names the Job's spec hash).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    EXTRACTION_FAILED_LABEL,
    EXTRACTION_FAILURE_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.job_pods import JOB_NAME_LABEL, pods_problem

MAX_MESSAGE = 1024
UNKNOWN_REASON = "ExtractionFailed"
RETRY_FIX = "delete the PVC to retry: kubectl delete pvc -n <namespace> -l %s,%s=<cache>" % (
    EXTRACTION_FAILED_LABEL, CACHE_LABEL)


class Failure:
    """Why a slot's extraction failed: reason, message, fixes, the spec hash of the Job that failed (job);
    recorded, the annotation it was read from."""

    __slots__ = ("fix", "job", "message", "reason", "recorded")

    def __init__(self, reason, message, fix=(), job=None, recorded=None):
        self.reason = reason
        self.message = message
        self.fix = list(fix)
        self.job = job
        self.recorded = recorded

    def annotation(self):
        if self.recorded is not None:
            return self.recorded  # written back as read: a record is never rewritten
        return json.dumps({"reason": self.reason, "message": (self.message or "")[:MAX_MESSAGE], "fix": self.fix,
                           "job": self.job}, sort_keys=True)


def job_failure(job, job_pods):
    """The Failure of a Job that failed (its newest pod's problem, else the Job's own condition), else None."""
    failed = job_condition(job, "Failed") if job is not None else None
    if failed is None:
        return None
    problem = pods_problem(job_pods)
    if problem is not None:
        return Failure(problem.reason, problem.message, problem.fix)
    reason = failed.get("reason") or UNKNOWN_REASON
    return Failure(reason, "%s: %s" % (reason, failed.get("message") or "the Job failed"))


def pods_of(job, pods):
    """The Job's pods among `pods`."""
    namespace, name = job["metadata"].get("namespace"), job["metadata"]["name"]
    return [pod for pod in pods if pod["metadata"].get("namespace") == namespace
            and (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name]


def has_record(pvc):
    return EXTRACTION_FAILED_LABEL in (((pvc or {}).get("metadata") or {}).get("labels") or {})


def recorded(pvc, short, job_hash=None):
    """The Failure recorded on the PVC for the slot's short digest (and, when given, for the Job of that spec
    hash), else None. An unreadable record is no record: the slot is tried again."""
    metadata = (pvc or {}).get("metadata") or {}
    if (metadata.get("labels") or {}).get(EXTRACTION_FAILED_LABEL) != short:
        return None
    annotation = (metadata.get("annotations") or {}).get(EXTRACTION_FAILURE_ANNOTATION) or ""
    try:
        said = json.loads(annotation)
    except ValueError:
        return None
    if not isinstance(said, dict) or (job_hash is not None and said.get("job") != job_hash):
        return None
    return Failure(said.get("reason") or UNKNOWN_REASON, said.get("message") or "the extraction failed",
                   [fix for fix in said.get("fix") or [] if isinstance(fix, str)], said.get("job"), annotation)


def record(pvc, short, failure):
    """The desired PVC with the failure recorded (a copy; labels and annotations are not shared with the input)."""
    metadata = dict(pvc["metadata"], labels=dict(pvc["metadata"].get("labels") or {}),
                    annotations=dict(pvc["metadata"].get("annotations") or {}))
    metadata["labels"][EXTRACTION_FAILED_LABEL] = short
    metadata["annotations"][EXTRACTION_FAILURE_ANNOTATION] = failure.annotation()
    return dict(pvc, metadata=metadata)
