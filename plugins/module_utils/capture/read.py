# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""(I/O: the API's pods/exec and pods/log) The kernels a pod compiled, read out of its running container as a tar
stream, or from a finished pod's kernel-use sidecar log as a capture frame (kernels/capture_frame.py), and unpacked
by the extractor's own code, so every entry passes its rules (names, sizes, no links, no devices).

Why pods/exec: the module runs with the admin's credentials, which may exec; the pod's writable Triton directory is
an emptyDir that only its own containers see, and a tar of it is the whole content in one stream, no Job and no
node access. A pod that finished (Succeeded, Failed, or its workload containers terminated) cannot be exec'd into:
when it was opted in, its sidecar wrote the kernels it compiled to its own log when stopped, read back here through
pods/log; the frame's hash and size are checked, its entries then pass the extractor's rules like the tar's.

What is read: the pod's kernel overlay of the cache (webhook/admission/kernel_overlay.py's emptyDir at OVERLAY_PATH)
when it has one, and then only the kernel directories kernels/overlay.compiled_here names (the kernels the pod
compiled itself, its misses); a pod given no cache (no overlay) compiled every kernel of its TRITON_CACHE_DIR, when
that lies in an emptyDir of the container.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gzip
import io
import json
import os
import posixpath

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import kernel_use_container
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import FINISHED_PHASES
from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive, rules
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.capture_frame import (
    DEFAULT_MAX_BYTES,
    FRAME_KEY,
    FrameError,
    open_frame,
)
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay import compiled_here
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.plan import TRITON_CACHE_ENV
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import sha256_digest
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.kernel_overlay import (
    OVERLAY_PATH,
    overlay_name,
)

# A pod's own compiles are some MB; the tar stream is refused past this (and the extractor's own limits apply).
MAX_TAR_BYTES = 512 * 1024 * 1024
MAX_FILES = 100000
# containerd's default max_container_log_line_size: a longer line is kept as partial lines of this size.
CRI_LINE_BYTES = 16384


def _below(path, root):
    path, root = posixpath.normpath(path), posixpath.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def finished(pod):
    """Whether the pod's workload is over: its phase Succeeded or Failed, or every container of spec.containers
    terminated (its sidecars may still be stopping)."""
    status = pod.get("status") or {}
    if status.get("phase") in FINISHED_PHASES:
        return True
    states = status.get("containerStatuses") or []
    return bool(states) and all("terminated" in (s.get("state") or {}) for s in states)


def log_source(pod, cache):
    """The kernel-use sidecar of `cache` in a finished pod, whose log holds the capture frame; CaptureError when the
    pod has none (no overlay of that cache: nothing wrote its kernels down)."""
    metadata = pod.get("metadata") or {}
    container = kernel_use_container(cache)
    if not any(c.get("name") == container for c in (pod.get("spec") or {}).get("initContainers") or []):
        raise CaptureError("pod %s/%s finished and has no kernel-use sidecar of %s: a finished pod's kernels are read "
                           "from that sidecar's log (a pod given the cache's overlay), and this one has none"
                           % (metadata.get("namespace"), metadata.get("name"), cache))
    return container


def frame_of(log_text):
    """The last capture frame of a sidecar's log, as a dict, or None."""
    for line in reversed((log_text or "").splitlines()):
        if FRAME_KEY not in line:
            continue
        try:
            document = json.loads(line)
        except ValueError:
            # A frame cut short (the log rotated, or a limit) is not JSON: said as such rather than as "no frame".
            return {FRAME_KEY: 1, "data": None, "sha256": None}
        if isinstance(document, dict) and document.get(FRAME_KEY) == 1:
            return document
    return None


def log_frame(kube, namespace, name, container, max_bytes=DEFAULT_MAX_BYTES):
    """The gzip bytes of the capture frame the sidecar `container` wrote to its log (its last two lines: the frame,
    then its last report), checked by capture_frame.open_frame."""
    where = "pod %s/%s" % (namespace, name)
    encoded = (max_bytes + 2) // 3 * 4 + 1024
    # The runtime stores a longer line as partial lines, and tailLines counts those: as many as the frame can take.
    lines = -(-encoded // CRI_LINE_BYTES) + 2
    _status, text = kube.request(
        "GET", "/api/v1/namespaces/%s/pods/%s/log" % (namespace, name),
        query=[("container", container), ("tailLines", str(lines)), ("limitBytes", str(2 * encoded + 65536))],
        what="the capture frame of %s" % where, accept="*/*", text=True)
    document = frame_of(text)
    if document is None:
        raise CaptureError("%s finished and its sidecar %s wrote no capture frame: it was not opted in when it was "
                           "created, or its sidecar has not stopped yet" % (where, container))
    try:
        return open_frame(document, max_bytes)
    except FrameError as error:
        raise CaptureError("the capture frame of %s: %s" % (where, error)) from error


def pod_source(pod, cache):
    """(container, directory, overlaid) to read in the pod, pure. Raises CaptureError for a pod that is not running
    or has no Triton directory of its own."""
    metadata, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    where = "%s/%s" % (metadata.get("namespace"), metadata.get("name"))
    running = {s.get("name") for s in status.get("containerStatuses") or [] if "running" in (s.get("state") or {})}
    if status.get("phase") != "Running":
        raise CaptureError("pod %s is %s: its kernels are read from a running container (pods/exec), or once it "
                           "finished from its sidecar's log (docs/kernels.md, capture)" % (where, status.get("phase")))
    empty_dirs = {v.get("name") for v in spec.get("volumes") or [] if "emptyDir" in v}
    for container in spec.get("containers") or []:
        if container.get("name") not in running:
            continue
        mounts = container.get("volumeMounts") or []
        if any(m.get("name") == overlay_name(cache) and m.get("mountPath") == OVERLAY_PATH for m in mounts):
            return container["name"], OVERLAY_PATH, True
        variable = [e.get("value") for e in container.get("env") or [] if e.get("name") == TRITON_CACHE_ENV]
        if variable and isinstance(variable[0], str) and any(
                m.get("name") in empty_dirs and _below(variable[0], m.get("mountPath") or "/") for m in mounts):
            return container["name"], variable[0], False
    raise CaptureError("pod %s has no running container with the kernel overlay of %s or a %s in an emptyDir: "
                       "there is nothing it compiled to read" % (where, cache, TRITON_CACHE_ENV))


def exec_tar(api_client, namespace, name, container, directory, max_bytes=MAX_TAR_BYTES):
    """The tar stream of `directory` in the container (`tar -c -C directory .`), read whole."""
    from kubernetes import client
    from kubernetes.stream import stream

    response = stream(client.CoreV1Api(api_client).connect_get_namespaced_pod_exec, name, namespace,
                      container=container, command=["tar", "-c", "-f", "-", "-C", directory, "."], stdin=False,
                      stdout=True, stderr=True, tty=False, binary=True, _preload_content=False)
    data, errors = bytearray(), bytearray()
    try:
        while response.is_open():
            response.update(timeout=5)
            data += response.read_stdout() or b""
            errors += response.read_stderr() or b""
            if len(data) > max_bytes:
                raise CaptureError("the tar of %s in pod %s/%s is over %d bytes"
                                   % (directory, namespace, name, max_bytes))
        data += response.read_stdout() or b""
        code = response.returncode
    finally:
        response.close()
    if code:
        message = bytes(errors[:500]).decode("utf-8", "replace")
        raise CaptureError("tar of %s in pod %s/%s exited %s: %s" % (directory, namespace, name, code, message))
    return bytes(data)


def _extract(layer, dest):
    limits = rules.Limits(max_bytes=MAX_TAR_BYTES, max_files=MAX_FILES)
    try:
        archive.extract_layer(io.BytesIO(layer).read, sha256_digest(layer), len(layer), dest,
                              limits=limits, whole_layer=True, rewrite_groups=False)
    except rules.ExtractError as error:
        raise CaptureError("the pod's kernels break the extractor's rules: %s" % error) from error


def _every_directory(dest):
    return sorted(entry for entry in os.listdir(dest)
                  if not entry.startswith(".") and os.path.isdir(os.path.join(dest, entry)))


def unpack_frame(packed, dest):
    """A capture frame's gzip tar unpacked into `dest` by the extractor (its rules on every entry), and its kernel
    directories: the frame holds only the kernels the pod compiled."""
    _extract(packed, dest)
    return _every_directory(dest)


def unpack(tar_bytes, dest, overlaid):
    """The pod's kernels unpacked into `dest` by the extractor (its rules on every entry; no group rewritten), and
    the kernel directories the pod compiled: compiled_here's when `overlaid`, else every directory."""
    _extract(gzip.compress(tar_bytes, compresslevel=1, mtime=0), dest)
    if overlaid:
        compiled = compiled_here(dest)
        if compiled is None:
            raise CaptureError("the pod's overlay directory has no .gkm-overlay.json: its init container did not "
                               "write the overlay, so which kernels it compiled is unknown")
        return compiled
    return _every_directory(dest)


def load_kernels(root, hash_dirs):
    """{hash dir: {file name: bytes}} of the kernel directories below `root`; CaptureError for anything in one that is
    not a regular file (a link, a directory): Triton writes only files there."""
    kernels = {}
    for hash_dir in hash_dirs:
        directory = os.path.join(root, hash_dir)
        files = {}
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if not os.path.isfile(path) or os.path.islink(path):
                raise CaptureError("%s/%s is not a regular file: a Triton kernel directory holds only files"
                                   % (hash_dir, name))
            with open(path, "rb") as handle:
                files[name] = handle.read()
        kernels[hash_dir] = files
    return kernels
