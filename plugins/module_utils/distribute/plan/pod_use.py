# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pods count as users of a cache's volumes, and what a status says of each, pure: PVC mode's claims
(plan.pod_mounts) and imageVolume mode's image volumes (image_volume.py) count the same pods."""

from __future__ import absolute_import, division, print_function

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    MANAGED_BY_LABEL,
    MANAGER,
)

__metaclass__ = type


FINISHED_PHASES = ("Succeeded", "Failed")


def workload_pod(pod):
    """True for a pod that can still read a cache: not finished, and not one of our own Jobs' pods."""
    if (pod["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGER:
        return False
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


def pod_user(pod):
    """What a status says of a pod using a cache: namespace, name, node (None before it is scheduled) and phase."""
    return {
        "namespace": pod["metadata"].get("namespace"),
        "name": pod["metadata"]["name"],
        "node": (pod.get("spec") or {}).get("nodeName"),
        "phase": (pod.get("status") or {}).get("phase"),
    }
