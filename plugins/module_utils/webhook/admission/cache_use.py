# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which caches a pod (or a workload's pod template) uses, pure.

Three ways, in every mode:
- a volume whose persistentVolumeClaim.claimName is a cache's name in the pod's namespace: the serving PVC (or the
  single PVC of a ReadOnlyMany cache), and what gkm.io/pvc-mutation DaemonSet pods name before their rewrite;
- the annotation `gkm.io/cache: <cache>` with `gkm.io/cache-mount-path: <absolute path>`: the webhook adds the volume
  (an image volume in imageVolume mode, the serving PVC otherwise) and mounts it in the containers
  (`gkm.io/cache-containers: a,b` limits which; all of them by default);
- the annotation `gkm.io/cache-overlay: disabled` keeps the plain mount of a Triton cache, by annotation or by claim
  (no kernel overlay: webhook/admission/kernel_overlay.py), for a workload that manages its own Triton directory;
- the annotation `gkm.io/cache-steering: disabled` keeps the pod's placement as written (the mount is still added);
  on a Deployment, StatefulSet or DaemonSet, `gkm.io/cache-steering: template` asks for its pod template to be steered
  as well (webhook/admission/steering.py).
"""

from __future__ import absolute_import, division, print_function

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_ANNOTATION,
    CONTAINERS_ANNOTATION,
    MOUNT_PATH_ANNOTATION,
    OVERLAY_ANNOTATION,
    OVERLAY_DISABLED,
    STEERING_ANNOTATION,
)

__metaclass__ = type

STEERING_DISABLED = "disabled"
STEERING_TEMPLATE = "template"

# How a pod came to use a cache.
BY_CLAIM = "claimName"
BY_ANNOTATION = "annotation"


class CacheUse:
    """A cache the pod uses: its CacheTarget (None when the annotation names no cache visible from the namespace),
    how (BY_CLAIM or BY_ANNOTATION); for a claim, the pod's first volume naming it; for the annotation, where to
    mount it and in which containers (None: all)."""

    __slots__ = ("containers", "mount_path", "name", "target", "via", "volume")

    def __init__(self, name, target, via, mount_path=None, containers=None, volume=None):
        self.name = name
        self.target = target
        self.via = via
        self.mount_path = mount_path
        self.containers = containers
        self.volume = volume


def _mapping(value):
    return value if isinstance(value, dict) else {}


def steering_disabled(metadata):
    return _mapping(metadata.get("annotations")).get(STEERING_ANNOTATION) == STEERING_DISABLED


def overlay_disabled(metadata):
    return _mapping(metadata.get("annotations")).get(OVERLAY_ANNOTATION) == OVERLAY_DISABLED


def template_steering(metadata):
    """True when a workload's own metadata asks for its pod template to be steered."""
    return _mapping(metadata.get("annotations")).get(STEERING_ANNOTATION) == STEERING_TEMPLATE


def cache_uses(metadata, spec, namespace, view):
    """[CacheUse] of the pod or template (metadata, spec), each cache once; claims first, in volume order."""
    uses, seen = [], set()
    for volume in spec.get("volumes") if isinstance(spec.get("volumes"), list) else ():
        claim = _mapping(_mapping(volume).get("persistentVolumeClaim")).get("claimName")
        if isinstance(claim, str) and claim not in seen:
            target = view.resolve(namespace, claim)
            if target is not None:
                seen.add(claim)
                uses.append(CacheUse(claim, target, BY_CLAIM, volume=_mapping(volume).get("name")))
    annotations = _mapping(metadata.get("annotations"))
    name = annotations.get(CACHE_ANNOTATION)
    if isinstance(name, str) and name and name not in seen:
        containers = annotations.get(CONTAINERS_ANNOTATION)
        uses.append(CacheUse(name, view.resolve(namespace, name), BY_ANNOTATION, annotations.get(MOUNT_PATH_ANNOTATION),
                             [c.strip() for c in containers.split(",") if c.strip()] if isinstance(containers, str)
                             else None))
    return uses
