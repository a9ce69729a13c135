# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the webhook server's rollout is going, from its Deployment and pods (pure).

webhook_install waits for the server before it registers the webhook; these functions tell it when
the wait is over, when waiting is pointless (an image no node can pull, pods the namespace refuses),
and, at a timeout, what the pods are still waiting for.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Container waiting reasons that mean the image will not come without a change by the user.
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                 "ErrRegistryUnavailable", "ImageInspectError")
PULL_FIX = ("build and push the tools image with `make images REGISTRY=<registry host:port>` and set gkm_tools_image "
            "(webhook_install's image) to the reference it prints, or set gkm_registry_mirror to a registry that "
            "holds it")


def is_available(deployment, replicas):
    """True once the Deployment's current generation has `replicas` updated and available pods."""
    if not deployment:
        return False
    status = deployment.get("status") or {}
    return (status.get("observedGeneration", 0) >= (deployment.get("metadata") or {}).get("generation", 1)
            and status.get("updatedReplicas", 0) >= replicas
            and status.get("availableReplicas", 0) >= replicas)


def _waiting_containers(pod):
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting")
        if waiting:
            yield status.get("name"), waiting.get("reason") or "", waiting.get("message") or ""


def _pod_name(pod):
    return (pod.get("metadata") or {}).get("name", "?")


def _runs_image(pod, image):
    return any(container.get("image") == image for container in (pod.get("spec") or {}).get("containers") or [])


def blocking_problem(deployment, pods, image):
    """A message saying why the rollout cannot finish without the user, or None while it may still finish.

    Only pods that run `image` count: pods of an earlier, replaced image may still fail to pull.
    """
    for condition in ((deployment or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
            return "the Deployment cannot create its pods ({0}): {1}".format(
                condition.get("reason"), condition.get("message"))
    for pod in pods:
        if not _runs_image(pod, image):
            continue
        for _name, reason, message in _waiting_containers(pod):
            if reason in PULL_FAILURES:
                return "the webhook server's image {0} cannot be pulled on node {1} (pod {2}, {3}: {4}); {5}".format(
                    image, (pod.get("spec") or {}).get("nodeName") or "?", _pod_name(pod), reason, message, PULL_FIX)
    return None


def waiting_reasons(pods):
    """What each pod not ready yet waits for, in words, for a timeout message."""
    reasons = []
    for pod in pods:
        status = pod.get("status") or {}
        conditions = {condition.get("type"): condition for condition in status.get("conditions") or []}
        if (conditions.get("Ready") or {}).get("status") == "True":
            continue
        scheduled = conditions.get("PodScheduled") or {}
        if scheduled.get("status") == "False":
            reasons.append("pod {0} is not scheduled: {1} (see tolerations and node_selector)".format(
                _pod_name(pod), scheduled.get("message") or scheduled.get("reason")))
            continue
        waits = ["{0} {1}{2}".format(name, reason, ": " + message if message else "")
                 for name, reason, message in _waiting_containers(pod)]
        reasons.append("pod {0} on node {1}: {2}".format(
            _pod_name(pod), (pod.get("spec") or {}).get("nodeName") or "?",
            "; ".join(waits) or "{0}, not ready yet".format(status.get("phase", "Pending"))))
    return reasons
