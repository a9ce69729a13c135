# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The group overlay a pod annotated gkm.io/cache gets beside the cache's mount, as JSONPatch operations, pure.

An `emptyDir` `gkm-kernels-<cache>`; an init container running the tools image's overlay entry point
(kernels/overlay_main.py) with the cache mounted read-only at the annotated path, the path the workload's containers
see it at, and the emptyDir at OVERLAY_PATH; and in each container given the cache, the emptyDir at OVERLAY_PATH and
the variable (kernels/plan.py: TRITON_CACHE_DIR for a Triton image) set to it. Triton then finds every kernel of the
cache through the overlay's group files and compiles a kernel the cache lacks into the emptyDir (docs/kernels.md).

The operations follow those of cache_mount.mount_operations(spec, use) in the same patch: they append to the pod's
volumes and to each such container's volumeMounts, which those operations made sure exist.
A container that mounts the cache itself at another path than the annotation's is left as written (the groups would
name a path it does not see). A container that already sets the variable keeps its value when it points outside the
cache's mount (and gets no overlay); a value at or below the mount path, the plain mount's way that misses, is
replaced.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.cache_mount import (
    MAX_VOLUME_NAME,
    MountError,
    volume_name,
)

OVERLAY_PREFIX = "gkm-kernels-"
OVERLAY_PATH = "/var/run/gkm/kernels"
ENTRY_POINT = "ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay_main"
TERMINATION_LOG = "/dev/termination-log"
INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
# Pod Security `restricted` holds for the init container whatever the pod's own securityContext says.
INIT_SECURITY = {"runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                 "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def overlay_name(cache):
    return (OVERLAY_PREFIX + cache)[:MAX_VOLUME_NAME].rstrip("-")


def _list(value):
    return value if isinstance(value, list) else None


def _named(items, name):
    return any(isinstance(item, dict) and item.get("name") == name for item in items or ())


def _below(path, root):
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root + "/")


def init_container(cache, mount_path, tools_image):
    name = overlay_name(cache)
    return {
        "name": name,
        "image": tools_image,
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "command": ["python3", "-m", ENTRY_POINT, mount_path, OVERLAY_PATH, "--termination-log", TERMINATION_LOG],
        "volumeMounts": [{"name": volume_name(cache), "mountPath": mount_path, "readOnly": True},
                         {"name": name, "mountPath": OVERLAY_PATH}],
        "securityContext": INIT_SECURITY,
        "resources": INIT_RESOURCES,
    }


def _env_operations(index, container, variable, mount_path):
    """(operations, overlaid) for one container: the variable added, replaced, or left as the user set it."""
    env = _list(container.get("env"))
    for position, item in enumerate(env or ()):
        if not isinstance(item, dict) or item.get("name") != variable:
            continue
        value = item.get("value")
        if isinstance(value, str) and value.startswith("/") and _below(value, mount_path):
            return [{"op": "replace", "path": "/spec/containers/%d/env/%d" % (index, position),
                     "value": {"name": variable, "value": OVERLAY_PATH}}], True
        return [], False
    value = {"name": variable, "value": OVERLAY_PATH}
    if env is None:
        return [{"op": "add", "path": "/spec/containers/%d/env" % index, "value": [value]}], True
    return [{"op": "add", "path": "/spec/containers/%d/env/-" % index, "value": value}], True


def overlay_operations(spec, use, variable, tools_image):
    """JSONPatch operations adding the overlay to a pod (spec at /spec) given the cache by annotation; [] when the
    pod has it already or no container is left to give it to. Raises MountError when a chosen container already
    mounts something at OVERLAY_PATH."""
    name = overlay_name(use.name)
    volumes = _list(spec.get("volumes"))
    init_containers = _list(spec.get("initContainers"))
    if _named(volumes, name) or _named(init_containers, name):
        return []
    operations = []
    for index, container in enumerate(c if isinstance(c, dict) else {} for c in _list(spec.get("containers")) or ()):
        if use.containers is not None and container.get("name") not in use.containers:
            continue
        mounts = [m for m in _list(container.get("volumeMounts")) or () if isinstance(m, dict)]
        if any(m.get("name") == volume_name(use.name) and posixpath.normpath(m.get("mountPath") or "/")
               != posixpath.normpath(use.mount_path) for m in mounts):
            # The pod mounts the cache itself at another path (mount_operations keeps that): the overlay's groups
            # name the annotated path, which this container does not see, so it is left as written.
            continue
        taken = [m.get("name") for m in mounts if _below(m.get("mountPath") or "/", OVERLAY_PATH)]
        if taken:
            raise MountError("container %s mounts volume %s at or below %s, where the cache's kernel overlay goes: "
                             "mount it elsewhere" % (container.get("name"), taken[0], OVERLAY_PATH))
        env_operations, overlaid = _env_operations(index, container, variable, use.mount_path)
        if not overlaid:
            continue
        operations.append({"op": "add", "path": "/spec/containers/%d/volumeMounts/-" % index,
                           "value": {"name": name, "mountPath": OVERLAY_PATH}})
        operations.extend(env_operations)
    if not operations:
        return []
    init = init_container(use.name, use.mount_path, tools_image)
    if init_containers is None:
        add_init = {"op": "add", "path": "/spec/initContainers", "value": [init]}
    else:
        add_init = {"op": "add", "path": "/spec/initContainers/-", "value": init}
    return [{"op": "add", "path": "/spec/volumes/-", "value": {"name": name, "emptyDir": {}}}, add_init, *operations]
