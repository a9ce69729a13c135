# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ImageVolume mode, the reconcile's side, pure: a cache with `mountMode: imageVolume` gets no PVC, PV or Job. Pods
that ask for it get a `volumes[].image` volume of the digest-pinned reference from the webhook (webhook/cache_mount.py)
and the kubelet pulls and mounts it read-only; the reconcile only resolves the image (digest, GPU targets) and says
so in the status, where the webhook's view reads them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

PVC = "PVC"
IMAGE_VOLUME = "imageVolume"
MOUNT_MODES = (PVC, IMAGE_VOLUME)
# The status phase of an imageVolume cache whose image is resolved: nothing is extracted, pods pull it themselves.
RESOLVED = "Resolved"


def pinned_reference(image, digest):
    """`repository@digest` of an image reference given by tag or digest ('host:5000/a/b:v1' -> 'host:5000/a/b@...')."""
    repository = image.split("@", 1)[0]
    last = repository.rsplit("/", 1)[-1]
    if ":" in last:
        repository = repository[:len(repository) - len(last)] + last.split(":", 1)[0]
    return "%s@%s" % (repository, digest)


def cache_status(spec, eligibility):
    """The status of an imageVolume cache (the shape status.cache_status returns) from the plan's eligibility: no
    slot entries, since no node holds anything; `nodes` counts the nodes whose GPUs fit, where the webhook lets its
    pods run, and GPU nodes that do not fit are Incompatible entries as in PVC mode."""
    compatible = len(eligibility.eligible)
    counts = {"nodes": compatible, "node_in_use": 0, "node_not_in_use": 0, "node_error": 0,
              "pod_running": 0, "pod_outdated": 0}
    return {
        "phase": RESOLVED,
        "counts": counts,
        "entries": [{"namespace": "", "node": node, "phase": "Incompatible", "message": eligibility.excluded[node][-1]}
                    for node in eligibility.incompatible],
        "unschedulable": [],
        "image_volume": {"reference": pinned_reference(spec.image, spec.digest), "compatible_nodes": compatible},
    }


def ready_message(image_volume):
    return ("mountMode imageVolume: no PVC or Job; pods annotated gkm.io/cache mount %s as an image volume on the %d "
            "node(s) whose GPU fits" % (image_volume["reference"], image_volume["compatible_nodes"]))
