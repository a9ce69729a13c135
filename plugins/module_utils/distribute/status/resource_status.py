# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A GKMCache's or ClusterGKMCache's status subresource from what a reconcile's stages made (not from the module's
result), pure: phase, digest, GPU targets, the kernel overlay's variable, GKM's counts, the Ready and Upgraded
conditions, and a bounded summary (the per-node state is in the per-node objects); and whether a new status says
anything the old one did not."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import resource_terms
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import KERNEL_OVERLAY_STATUS, RESOLVED
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import image_volume
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import summary as status_summary
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.upgrade_status import (
    upgrade_condition,
    upgrade_status,
)

# The distribution module's counts under GKM's status names (its printer columns read these).
COUNT_NAMES = (
    ("nodes", "nodeCnt"),
    ("node_in_use", "nodeInUseCnt"),
    ("node_not_in_use", "nodeNotInUseCnt"),
    ("node_error", "nodeErrorCnt"),
    ("pod_running", "podRunningCnt"),
    ("pod_outdated", "podOutdatedCnt"),
)


# An imageVolume cache is Resolved, not Extracted: nothing is extracted, its pods pull the image.
READY_PHASES = ("Extracted", "Running", RESOLVED)


# Fields of a status that say when it was written rather than what it says.
_TIMESTAMP_FIELDS = ("lastReconcileTime",)


# The Ready message names a few nodes per reason; distinct reasons could still make it long.
MAX_CONDITION_MESSAGE = 1024


def summary_status(distribution, now):
    """The status subresource of a reconcile (a pipeline Distribution; now: an RFC 3339 timestamp), whose size does
    not grow with the cluster: counts, the worst problems, one line per exclusion reason and a rolling upgrade's
    counts (upgrade_status.py); the per-node state belongs to the per-node objects (node_objects.py) and labels."""
    status, spec, plan = distribution.status, distribution.spec, distribution.plan
    body = _status_head(status, spec, now)
    for condition in body["conditions"]:
        condition["message"] = condition["message"][:MAX_CONDITION_MESSAGE]
    incompatible = [entry["node"] for entry in status.get("entries") or [] if entry["phase"] == "Incompatible"]
    body.update(status_summary.bounded_fields(status, plan.eligibility.excluded or {}, incompatible))
    if status.get("image_volume"):
        # An imageVolume cache: the nodes that pulled the image and the pods mounting it, bounded as problems are.
        body["imageVolume"] = image_volume.resource_status(status["image_volume"])
    if plan.rollout is not None:
        # A cache with spec.upgradePolicy: where its rolling upgrade stands (counts; the nodes' labels say who).
        body["upgrade"] = upgrade_status(plan.rollout.to_dict())
        body["conditions"].append(upgrade_condition(body["upgrade"], now))
    return body


def image_volume_report(status):
    """cache_info's status of an imageVolume cache from its resource's status, which its reconcile wrote: the
    phase, GKM's counts, and the nodes that pulled the image and the pods mounting it (bounded as written)."""
    listed = status.get("imageVolume") or {}
    return {
        "phase": status.get("phase") or "Pending",
        "counts": {name: int(status.get(crd_name, 0)) for name, crd_name in COUNT_NAMES},
        "entries": [],
        "unschedulable": [],
        "image_volume": {"reference": listed.get("reference"), "pulled_nodes": list(listed.get("pulledNodes") or []),
                         "pulled_node_count": int(listed.get("pulledNodeCnt", 0)),
                         "pods": list(listed.get("pods") or []), "pod_count": int(listed.get("podCnt", 0))},
    }


def _status_head(status, spec, now):
    """Phase, digest, time, the Ready condition and GKM's counts."""
    counts = status.get("counts") or {}
    phase = status.get("phase") or "Pending"
    unschedulable = status.get("unschedulable") or []
    if status.get("image_volume"):
        message = image_volume.ready_message(status["image_volume"], counts)
    else:
        message = _ready_message(phase, counts, unschedulable, status.get("unplaced"))
    conditions = [{
        "type": "Ready",
        "status": "True" if phase in READY_PHASES else "False",
        "reason": phase,
        "message": resource_terms(message),
        "lastTransitionTime": now,
    }]
    body = {
        "phase": phase,
        "resolvedDigest": spec.digest or "",
        # The image's GPU targets: the steering webhook keeps pods to nodes whose GPU labels fit one of them.
        "targets": [{"backend": t["backend"], "arch": t["arch"], "warpSize": int(t["warp_size"])}
                    for t in spec.targets or []],
        "lastReconcileTime": now,
        "conditions": conditions,
    }
    body.update({crd_name: int(counts.get(name, 0)) for name, crd_name in COUNT_NAMES})
    if spec.overlay_variable:
        # Pods given the cache by annotation get the kernel overlay as this variable (the webhook reads it);
        # absent, they get the plain mount.
        body[KERNEL_OVERLAY_STATUS] = {"variable": spec.overlay_variable}
    return body


def _ready_message(phase, counts, unschedulable, unplaced):
    """unplaced: why no node is eligible (the planner's reasons and fixes), or None."""
    if unschedulable:
        first = unschedulable[0]
        fix = first.get("fix") or "see the message"
        message = "%d extraction Job(s) cannot be scheduled: %s (fix: %s)" % (
            len(unschedulable), first.get("message", ""), fix if isinstance(fix, str) else ", ".join(fix))
        return message + ("; " + unplaced if unplaced else "")
    if unplaced and phase not in ("Extracted", "Running"):
        return "%s: %s" % (phase, unplaced)
    message = "%s on %d node(s); %d in use, %d with errors" % (
        phase, counts.get("nodes", 0), counts.get("node_in_use", 0), counts.get("node_error", 0))
    return message + ("; " + unplaced if unplaced else "")


def status_differs(current, desired):
    """True when the status says something new; timestamps alone never justify a write."""
    def meaning(status):
        status = copy.deepcopy(status or {})
        for field in _TIMESTAMP_FIELDS:
            status.pop(field, None)
        for condition in status.get("conditions") or []:
            condition.pop("lastTransitionTime", None)
        return status

    return meaning(current) != meaning(desired)


def carry_transition_times(current, desired):
    """Keep a condition's lastTransitionTime while its status has not changed."""
    previous = {c.get("type"): c for c in (current or {}).get("conditions") or []}
    for condition in desired.get("conditions") or []:
        before = previous.get(condition["type"])
        if before and before.get("status") == condition["status"] and before.get("lastTransitionTime"):
            condition["lastTransitionTime"] = before["lastTransitionTime"]
    return desired
