# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The group overlay a pod gets beside a Triton cache's mount, as JSONPatch operations, pure: a pod annotated
gkm.io/cache (the webhook mounts the cache) and a pod naming the cache as a volume's claimName (it mounts it itself).

An `emptyDir` `gkm-kernels-<cache>`; an init container running the tools image's overlay entry point
(kernels/overlay_main.py) with the cache mounted read-only at the path the workload's containers see it at (the
annotated path, or the pod's own mount of its volume: path and subPath), and the emptyDir at OVERLAY_PATH; and in
each container given the cache, the emptyDir at OVERLAY_PATH and the variable (kernels/plan.py: TRITON_CACHE_DIR for
a Triton image) set to it. Triton then finds every kernel of the cache through the overlay's group files and
compiles a kernel the cache lacks into the emptyDir (docs/kernels.md).

The operations follow those of cache_mount.mount_operations(spec, use) in the same patch (by annotation): they append
to the pod's volumes and to each such container's volumeMounts, which those operations or the pod's own mounts of
the cache (by claim) made sure exist.
A container that mounts the cache at another path than the one the overlay is written for is left as written (the
groups would name a path it does not see). By annotation, a container that already sets the variable keeps its value
when it points outside the cache's mount (and gets no overlay); a value at or below the mount path, the plain mount's
way that misses, is replaced: the webhook chose that path. By claim the pod's author chose the mount and the variable
together, so any value of theirs is kept (that container gets no overlay).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import kernel_use_container
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.capture_frame import DEFAULT_MAX_BYTES
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.cache_mount import (
    MAX_VOLUME_NAME,
    MountError,
    volume_name,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.cache_use import BY_CLAIM

OVERLAY_PREFIX = "gkm-kernels-"
OVERLAY_PATH = "/var/run/gkm/kernels"
ENTRY_POINT = "ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay_main"
USE_ENTRY_POINT = "ansible_collections.gkm.cluster.plugins.module_utils.kernels.usage_main"
TERMINATION_LOG = "/dev/termination-log"
INIT_RESOURCES = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
# The kernel-use sidecar sleeps between looks at the overlay: measured 14 MB resident and 0.7 ms of CPU a look
# for 56 kernels (docs/kernels.md).
USE_RESOURCES = {"requests": {"cpu": "5m", "memory": "24Mi"}, "limits": {"memory": "48Mi"}}
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


def init_container(cache, source, tools_image):
    """The init container writing the overlay; source: (volume, mountPath, subPath or None) the containers see."""
    name = overlay_name(cache)
    volume, mount_path, sub_path = source
    cache_mount = {"name": volume, "mountPath": mount_path, "readOnly": True}
    if sub_path:
        cache_mount["subPath"] = sub_path
    return {
        "name": name,
        "image": tools_image,
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "command": ["python3", "-m", ENTRY_POINT, mount_path, OVERLAY_PATH, "--termination-log", TERMINATION_LOG],
        "volumeMounts": [cache_mount, {"name": name, "mountPath": OVERLAY_PATH}],
        "securityContext": INIT_SECURITY,
        "resources": INIT_RESOURCES,
    }


def use_sidecar(cache, tools_image, capture=False):
    """The kernel-use sidecar (kernels/usage_main.py): a native sidecar (restartPolicy Always) that starts once the
    overlay is written, reads the overlay directory read-only and prints what the pod found and compiled to its log,
    which the reconcile reads through pods/log. It runs until the pod's containers end, then prints its last look.
    capture: the pod opted in to capture into this cache; the sidecar then also prints the kernels it compiled as a
    capture frame when stopped (kernels/capture_frame.py), which cache_capture reads once the pod finished."""
    command = ["python3", "-m", USE_ENTRY_POINT, OVERLAY_PATH]
    if capture:
        command += ["--capture-max-bytes", str(DEFAULT_MAX_BYTES)]
    return {
        "name": kernel_use_container(cache),
        "image": tools_image,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "command": command,
        "volumeMounts": [{"name": overlay_name(cache), "mountPath": OVERLAY_PATH, "readOnly": True}],
        "securityContext": INIT_SECURITY,
        "resources": USE_RESOURCES,
    }


def _env_operations(index, container, variable, mount_path):
    """(operations, overlaid) for one container: the variable added, replaced, or left as the user set it. A value
    at or below mount_path is replaced (never when mount_path is None)."""
    env = _list(container.get("env"))
    for position, item in enumerate(env or ()):
        if not isinstance(item, dict) or item.get("name") != variable:
            continue
        value = item.get("value")
        if mount_path and isinstance(value, str) and value.startswith("/") and _below(value, mount_path):
            return [{"op": "replace", "path": "/spec/containers/%d/env/%d" % (index, position),
                     "value": {"name": variable, "value": OVERLAY_PATH}}], True
        return [], False
    value = {"name": variable, "value": OVERLAY_PATH}
    if env is None:
        return [{"op": "add", "path": "/spec/containers/%d/env" % index, "value": [value]}], True
    return [{"op": "add", "path": "/spec/containers/%d/env/-" % index, "value": value}], True


def _mounts(container):
    return [m for m in _list(container.get("volumeMounts")) or () if isinstance(m, dict)]


def _sees(mount, source):
    """True when this volume mount shows the cache where the overlay's groups name it."""
    volume, mount_path, sub_path = source
    return (mount.get("name") == volume and not mount.get("subPathExpr")
            and posixpath.normpath(mount.get("mountPath") or "/") == posixpath.normpath(mount_path)
            and (mount.get("subPath") or None) == sub_path)


def _claim_source(containers, volume):
    """(volume, mountPath, subPath or None) of the first plain mount of the pod's volume of the cache, in container
    order, or None. A subPathExpr is expanded from the container's own variables, which the init container lacks."""
    for container in containers:
        for mount in _mounts(container):
            if mount.get("name") == volume and isinstance(mount.get("mountPath"), str) \
                    and mount["mountPath"].startswith("/") and not mount.get("subPathExpr"):
                return volume, mount["mountPath"], mount.get("subPath") or None
    return None


def overlay_operations(spec, use, variable, tools_image, given=None, capture=False):
    """JSONPatch operations adding the overlay of one cache the pod uses (spec at /spec); [] when the pod has it
    already or no container is left to give it to.

    capture: the pod opted in to capture into this cache (use_sidecar).
    given: the indexes of the containers an earlier cache of the same patch overlaid; they are skipped (a container
    has one variable and one OVERLAY_PATH) and the ones overlaid here are added.
    By annotation: the containers it chooses; raises MountError when one already mounts something at OVERLAY_PATH.
    By claim (the pod mounts the cache itself): the containers that mount the pod's volume of it as the first one
    that does (same path and subPath); a container with OVERLAY_PATH taken or its own value of the variable is left
    as written, so that nothing admitted before is refused or changed under its author."""
    given = set() if given is None else given
    name = overlay_name(use.name)
    volumes = _list(spec.get("volumes"))
    init_containers = _list(spec.get("initContainers"))
    if _named(volumes, name) or _named(init_containers, name):
        return []
    containers = [c if isinstance(c, dict) else {} for c in _list(spec.get("containers")) or ()]
    by_claim = use.via == BY_CLAIM
    source = _claim_source(containers, use.volume) if by_claim else (volume_name(use.name), use.mount_path, None)
    if source is None:
        return []
    operations, overlaid = [], []
    for index, container in enumerate(containers):
        if index in given or (use.containers is not None and container.get("name") not in use.containers):
            continue
        mounts = _mounts(container)
        if by_claim:
            if not any(_sees(m, source) for m in mounts):
                continue
        elif any(m.get("name") == source[0] and not _sees(m, source) for m in mounts):
            # The pod mounts the cache itself at another path (mount_operations keeps that): the overlay's groups
            # name the annotated path, which this container does not see, so it is left as written.
            continue
        taken = [m.get("name") for m in mounts if _below(m.get("mountPath") or "/", OVERLAY_PATH)]
        if taken and by_claim:
            continue
        if taken:
            raise MountError("container %s mounts volume %s at or below %s, where the cache's kernel overlay goes: "
                             "mount it elsewhere" % (container.get("name"), taken[0], OVERLAY_PATH))
        env_operations, gets_it = _env_operations(index, container, variable, None if by_claim else use.mount_path)
        if not gets_it:
            continue
        overlaid.append(index)
        operations.append({"op": "add", "path": "/spec/containers/%d/volumeMounts/-" % index,
                           "value": {"name": name, "mountPath": OVERLAY_PATH}})
        operations.extend(env_operations)
    if not operations:
        return []
    # An earlier overlay of this patch made the list of init containers, if the pod had none.
    makes_list = init_containers is None and not given
    given.update(overlaid)
    init = [init_container(use.name, source, tools_image), use_sidecar(use.name, tools_image, capture)]
    if makes_list:
        add_init = [{"op": "add", "path": "/spec/initContainers", "value": init}]
    else:
        add_init = [{"op": "add", "path": "/spec/initContainers/-", "value": container} for container in init]
    return [{"op": "add", "path": "/spec/volumes/-", "value": {"name": name, "emptyDir": {}}}, *add_init, *operations]
