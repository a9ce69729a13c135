# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The volume and mounts a pod annotated gkm.io/cache gets, as JSONPatch operations, pure.

imageVolume mode: `{name: gkm-cache-<cache>, image: {reference: <repo>@sha256:..., pullPolicy: IfNotPresent}}`, the
reference pinned to the digest the reconcile resolved (and verified), so a tag moving later changes nothing.
PVC modes: `{name: gkm-cache-<cache>, persistentVolumeClaim: {claimName: <cache>, readOnly: true}}`, the serving PVC.
Every chosen container gets `{name: gkm-cache-<cache>, mountPath: <annotated path>, readOnly: true}`.

Only pods get mounts, never pod templates: a template would pin a digest, and every new digest would then need a
rollout of the workload.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CONTAINERS_ANNOTATION,
    IMAGE_VOLUME,
    MOUNT_PATH_ANNOTATION,
)

VOLUME_PREFIX = "gkm-cache-"
MAX_VOLUME_NAME = 63


class MountError(ValueError):
    """The annotation cannot be honoured as written; the message says why and the fix."""


def volume_name(cache):
    return (VOLUME_PREFIX + cache)[:MAX_VOLUME_NAME].rstrip("-")


def volume(target):
    if target.mode == IMAGE_VOLUME:
        return {"name": volume_name(target.name),
                "image": {"reference": target.image_reference(), "pullPolicy": "IfNotPresent"}}
    return {"name": volume_name(target.name),
            "persistentVolumeClaim": {"claimName": target.serving_claim, "readOnly": True}}


def _list(value):
    return value if isinstance(value, list) else None


def _named(items, name):
    for index, item in enumerate(items or ()):
        if isinstance(item, dict) and item.get("name") == name:
            return index, item
    return None, None


def _append(path, items, value):
    if items is None:
        return {"op": "add", "path": path, "value": [value]}
    return {"op": "add", "path": path + "/-", "value": value}


def mount_operations(spec, use):
    """JSONPatch operations that give the pod (spec at /spec) the cache's volume and mounts; [] when it has them.
    Raises MountError for a missing or relative path, an unknown container, or a path another volume holds."""
    path = use.mount_path
    if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) == "/":
        raise MountError("annotation %s must be an absolute directory other than /, got %r: "
                         "set it to where the containers read the cache" % (MOUNT_PATH_ANNOTATION, path))
    desired = volume(use.target)
    operations = []
    volumes = _list(spec.get("volumes"))
    index, existing = _named(volumes, desired["name"])
    if existing is None:
        operations.append(_append("/spec/volumes", volumes, desired))
    elif existing != desired:
        # A pod made from a template we never patch holds this only if the user wrote it: the current digest wins.
        operations.append({"op": "replace", "path": "/spec/volumes/%d" % index, "value": desired})
    containers = [c if isinstance(c, dict) else {} for c in _list(spec.get("containers")) or ()]
    names = [c.get("name") for c in containers]
    unknown = sorted(set(use.containers or ()) - set(names))
    if unknown:
        raise MountError("annotation %s names %s, which the pod does not have (containers: %s)" % (
            CONTAINERS_ANNOTATION, ", ".join(unknown), ", ".join(str(n) for n in names)))
    mount = {"name": desired["name"], "mountPath": path, "readOnly": True}
    for index, container in enumerate(containers):
        if use.containers is not None and container.get("name") not in use.containers:
            continue
        mounts = _list(container.get("volumeMounts"))
        if _named(mounts, desired["name"])[1] is not None:
            continue
        taken = [m.get("name") for m in mounts or () if isinstance(m, dict)
                 and posixpath.normpath(m.get("mountPath") or "") == posixpath.normpath(path)]
        if taken:
            raise MountError("container %s already mounts volume %s at %s: choose another %s" % (
                container.get("name"), taken[0], path, MOUNT_PATH_ANNOTATION))
        operations.append(_append("/spec/containers/%d/volumeMounts" % index, mounts, mount))
    return operations
