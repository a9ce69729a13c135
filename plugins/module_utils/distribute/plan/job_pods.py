# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an extraction Job's pods say went wrong, pure: from the pods' container states to a reason, a
message that names the node, and the fix.

The extractor writes its failure to the termination log, which the kubelet puts
in the container's terminated state; their exit code says which kind of failure it was (job_main.py).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SIGNATURE_FORMAT_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.verification import (
    SIGNATURE_NOT_VERIFIED,
)

# The label the Job controller puts on its pods.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
IMAGE_PULL_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CONTAINER_NOT_CREATED = ("CreateContainerConfigError", "CreateContainerError", "RunContainerError")

IMAGE_NOT_PULLABLE = "ToolsImageNotPullable"
CONTAINER_NOT_STARTED = "ContainerNotStarted"
EXTRACTION_REFUSED = "ExtractionRefused"
REGISTRY_UNREACHABLE = "RegistryUnreachable"
VOLUME_NOT_WRITABLE = "VolumeNotWritable"

# job_main.py's exit codes other than a plain refusal.
_EXIT_REASONS = {3: REGISTRY_UNREACHABLE, 4: VOLUME_NOT_WRITABLE, 5: SIGNATURE_NOT_VERIFIED}
_FIXES = {
    IMAGE_NOT_PULLABLE: ["extract_image (gkm_tools_image)", "gkm_registry_mirror"],
    VOLUME_NOT_WRITABLE: ["set_volume_owner", "storage_class_name"],
    SIGNATURE_NOT_VERIFIED: ["sign the image with the key of signature_public_key (caches_signature_public_key), "
                             "in the format of the label " + SIGNATURE_FORMAT_LABEL,
                             "signature_public_key (caches_signature_public_key)"],
    REGISTRY_UNREACHABLE: ["registry_plain_http / registry_ca_file / registry_validate_certs",
                           "the registry's address as the nodes see it"],
}


class Problem:
    """Why a Job's pod did not extract: reason (one of the constants above), message, fixes."""

    __slots__ = ("fix", "message", "reason")

    def __init__(self, reason, message):
        self.reason = reason
        self.message = message
        self.fix = list(_FIXES.get(reason, []))

    def __repr__(self):
        return "Problem(%r, %r)" % (self.reason, self.message)


def _statuses(pod):
    status = pod.get("status") or {}
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def _where(pod):
    return (pod.get("spec") or {}).get("nodeName") or "no node yet"


def container_problem(pod, container):
    """The Problem one container status shows, or None."""
    state = container.get("state") or {}
    waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
    node = _where(pod)
    if waiting.get("reason") in IMAGE_PULL_WAITING:
        return Problem(IMAGE_NOT_PULLABLE, (
            "cannot pull the tools image %s on node %s: %s; build and push it (make images REGISTRY=...) or set "
            "gkm_tools_image / gkm_registry_mirror" % (container.get("image"), node,
                                                       waiting.get("message") or waiting["reason"])))
    if waiting.get("reason") in CONTAINER_NOT_CREATED:
        return Problem(CONTAINER_NOT_STARTED, "container %s cannot start on node %s: %s" % (
            container.get("name"), node, waiting.get("message") or waiting["reason"]))
    if not terminated or not terminated.get("exitCode"):
        return None
    said = (terminated.get("message") or "").strip() or "exit code %s (%s)" % (
        terminated["exitCode"], terminated.get("reason") or "no message")
    reason = _EXIT_REASONS.get(terminated["exitCode"], EXTRACTION_REFUSED)
    return Problem(reason, "extraction failed on node %s: %s" % (node, said))


def _created(pod):
    return pod["metadata"].get("creationTimestamp") or ""


def pods_problem(pods):
    """The Problem of a Job's newest pod (a retry's pod supersedes the one before), or None."""
    if not pods:
        return None
    newest = max(pods, key=_created)
    for container in _statuses(newest):
        problem = container_problem(newest, container)
        if problem is not None:
            return problem
    return None
