# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ImageVolume mode, the reconcile's side, pure: a cache with `mountMode: imageVolume` gets no PVC, PV or Job. Pods that
ask for it get a `volumes[].image` volume of the digest-pinned reference from the webhook
(webhook/admission/cache_mount.py) and the kubelet pulls and mounts it read-only; the reconcile only resolves the
image (digest, GPU targets) and says so in the status, where the webhook's view reads them. The status also says who
uses the image: the nodes whose kubelet reports it pulled (Node status.images) and the pods whose image volumes mount
it, or an older digest of it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    pinned_reference,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_ANNOTATION,
    RESOLVED,
    RUNNING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import has_pulled
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.pod_use import pod_user, workload_pod

# The status phase of an imageVolume cache whose image is resolved: nothing is extracted, pods pull it themselves.
# At most this many pulled nodes and mounting pods in a result without node_details and in a resource's status (as
# many as its problems), whatever the cluster's size; the counts say how many there are.
MAX_LISTED = 10


def _mounted_digests(pod, repository):
    """The digests of the repository the pod's image volumes mount."""
    references = ((volume.get("image") or {}).get("reference") or ""
                  for volume in (pod.get("spec") or {}).get("volumes") or [])
    return [reference[len(repository) + 1:] for reference in references if reference.startswith(repository + "@")]


def image_users(reference, pods, nodes):
    """(names of the nodes that pulled the pinned reference, the workload pods mounting it or an older digest of its
    repository), each pod as pod_use.pod_user with its digest; those on the pinned digest first."""
    repository, digest = reference.split("@", 1)
    pulled = sorted(node["metadata"]["name"] for node in nodes if has_pulled(node, reference))
    users = []
    for pod in filter(workload_pod, pods):
        digests = _mounted_digests(pod, repository)
        if digests:
            user = pod_user(pod)
            users.append(dict(user, node=user["node"] or "", digest=digest if digest in digests else digests[0]))
    users.sort(key=lambda user: (user["digest"] != digest, user["namespace"], user["name"]))
    return pulled, users


def use_counts(digest, compatible_nodes, pulled, users):
    """GKM's counts of an imageVolume cache: nodes are the compatible ones; a node is in use while a running pod mounts
    the pinned digest there, not in use when it pulled the image and no such pod runs; running pods on an older digest
    are outdated. Nothing is extracted, so no node is in error. The pods' own placement decides where they run (the
    cache's podTemplate places extraction Jobs, of which this mode has none), so in-use nodes are not limited to the
    compatible ones."""
    running = [user for user in users if user["phase"] == RUNNING]
    current = [user for user in running if user["digest"] == digest]
    in_use = {user["node"] for user in current}
    return {"nodes": len(compatible_nodes), "node_in_use": len(in_use), "node_not_in_use": len(set(pulled) - in_use),
            "node_error": 0, "pod_running": len(current), "pod_outdated": len(running) - len(current)}


def cache_status(spec, eligibility, pods, nodes):
    """The status of an imageVolume cache (the shape status.cache_status returns) from the plan's eligibility and the
    facts' pods and nodes: no slot entries, since no node holds anything; `nodes` counts the nodes whose GPUs fit,
    where the webhook lets its pods run, GPU nodes that do not fit are Incompatible entries as in PVC mode, and
    `image_volume` lists the nodes that pulled the image and the pods mounting it (use_counts counts them)."""
    reference = pinned_reference(spec.image, spec.digest)
    compatible = [node["metadata"]["name"] for node in eligibility.eligible]
    pulled, users = image_users(reference, pods, nodes)
    return {
        "phase": RESOLVED,
        "counts": use_counts(spec.digest, compatible, pulled, users),
        "entries": [{"namespace": "", "node": node, "phase": "Incompatible", "message": eligibility.excluded[node][-1]}
                    for node in eligibility.incompatible],
        "unschedulable": [],
        "image_volume": {"reference": reference, "compatible_nodes": len(compatible),
                         "pulled_nodes": pulled, "pulled_node_count": len(pulled),
                         "pods": users, "pod_count": len(users)},
    }


def bounded(image_volume):
    """The image_volume part of a status with at most MAX_LISTED pulled nodes and pods (their counts stay whole)."""
    return dict(image_volume, pulled_nodes=image_volume["pulled_nodes"][:MAX_LISTED],
                pods=image_volume["pods"][:MAX_LISTED])


def resource_status(image_volume):
    """A cache resource's status.imageVolume: the reference, and the bounded lists with their counts."""
    short = bounded(image_volume)
    return {"reference": image_volume["reference"], "pulledNodeCnt": image_volume["pulled_node_count"],
            "pulledNodes": short["pulled_nodes"], "podCnt": image_volume["pod_count"], "pods": short["pods"]}


def ready_message(image_volume, counts):
    return ("mountMode imageVolume: no PVC or Job; pods annotated %s mount %s as an image volume on the %d "
            "node(s) whose GPU fits; %d node(s) pulled it, %d running pod(s) mount it, %d an older digest" % (
                CACHE_ANNOTATION, image_volume["reference"], image_volume["compatible_nodes"],
                image_volume["pulled_node_count"],
                counts.get("pod_running", 0), counts.get("pod_outdated", 0)))
