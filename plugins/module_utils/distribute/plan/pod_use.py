# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pods count as users of a cache's volumes, and what a status says of each, pure: PVC mode's claims
(plan.pod_mounts) and imageVolume mode's image volumes (image_volume.py) count the same running pods; a claim is also
held by the finished pods that name it, until they are deleted (the API server's pvc-protection)."""

from __future__ import absolute_import, division, print_function

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    MANAGED_BY_LABEL,
    MANAGER,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import FINISHED_PHASES

__metaclass__ = type


def finished(pod):
    """True for a pod whose containers all ended for good (Succeeded or Failed)."""
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


def _ours(pod):
    return (pod["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGER


def workload_pod(pod):
    """True for a pod that can still read a cache: not finished, and not one of our own Jobs' pods."""
    return not _ours(pod) and not finished(pod)


def claim_holder(pod):
    """True for a pod that keeps a claim it names from going: a workload pod, or a finished one that was scheduled
    (a deleted PVC stays Terminating until such a pod is deleted too); never one of our own Jobs' pods."""
    return not _ours(pod) and (not finished(pod) or bool((pod.get("spec") or {}).get("nodeName")))


def claims_named(pod):
    """The claim names of a pod's persistentVolumeClaim volumes, in its order."""
    return [claim for claim in ((volume.get("persistentVolumeClaim") or {}).get("claimName")
                                for volume in (pod.get("spec") or {}).get("volumes") or []) if claim]


def holders_text(users):
    """What a kept slot's message says of the pods that hold it (pod_user dicts): those that mount it, and the
    finished ones, which hold it only until they are deleted."""
    reading = [user["name"] for user in users if user["phase"] not in FINISHED_PHASES]
    done = [user["name"] for user in users if user["phase"] in FINISHED_PHASES]
    parts = ["mounted by %s" % ", ".join(reading)] if reading else []
    if done:
        parts.append("named by finished pod(s) %s: deleting them releases it" % ", ".join(done))
    return "; ".join(parts)


def pod_user(pod):
    """What a status says of a pod using a cache: namespace, name, node (None before it is scheduled) and phase."""
    return {
        "namespace": pod["metadata"].get("namespace"),
        "name": pod["metadata"]["name"],
        "node": (pod.get("spec") or {}).get("nodeName"),
        "phase": (pod.get("status") or {}).get("phase"),
    }
