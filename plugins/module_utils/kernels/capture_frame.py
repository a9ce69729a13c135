# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The kernels a pod compiled as one bounded, framed log line: how they outlive a finished pod.

A pod opted in with gkm.io/capture has its kernel-use sidecar (usage_main.py) write, when stopped, the kernel
directories overlay.compiled_here names as one JSON line {FRAME_KEY: 1, "sha256", "bytes", "data"}: a tar of
`<hash dir>/<file>` entries (regular files only, links never followed), gzip, base64, the sha256 of the gzip bytes.
Over the cap (the gzip's bytes) the line says so ({FRAME_KEY: 1, "skipped", "bytes", "max_bytes"}) and carries no data.
cache_capture reads the line back through pods/log (capture/read.py) and opens it here: the frame is checked (shape,
size, hash) and nothing more is trusted; its entries then go through the extractor's rules like a running pod's tar.

Standard library only: the sidecar runs it from the tools image.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import gzip
import hashlib
import io
import os
import stat
import tarfile

FRAME_KEY = "gkm_kernel_capture"
# The gzip bytes a frame may hold. A pod's own compiles are some hundred kB gzipped (6 kernels about 60 kB); the
# base64 line (4/3 of it) stays well below the kubelet's default log rotation (10 MiB), which would cut it.
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
OVER_CAP = "the compiled kernels are over the capture cap"


class FrameError(ValueError):
    """A frame that cannot be opened; the message says why."""


def _regular_files(directory):
    names = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if stat.S_ISREG(os.lstat(path).st_mode):
            names.append(name)
    return names


def make_frame(root, hash_dirs, max_bytes=DEFAULT_MAX_BYTES):
    """The frame of the kernel directories `hash_dirs` below `root`, as a dict to print as one JSON line."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for hash_dir in hash_dirs:
            for name in _regular_files(os.path.join(root, hash_dir)):
                with open(os.path.join(root, hash_dir, name), "rb") as handle:
                    data = handle.read()
                info = tarfile.TarInfo("%s/%s" % (hash_dir, name))
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
    packed = gzip.compress(buffer.getvalue(), compresslevel=6, mtime=0)
    if len(packed) > max_bytes:
        return {FRAME_KEY: 1, "skipped": OVER_CAP, "bytes": len(packed), "max_bytes": max_bytes}
    return {FRAME_KEY: 1, "sha256": hashlib.sha256(packed).hexdigest(), "bytes": len(packed),
            "kernels": len(hash_dirs), "data": base64.b64encode(packed).decode("ascii")}


def open_frame(document, max_bytes=DEFAULT_MAX_BYTES):
    """The gzip bytes of a frame, checked: its shape, its size against `max_bytes` (the reader's own cap, whatever
    the frame claims) and its sha256. FrameError otherwise, naming the cause; a skipped frame says why it was."""
    if not isinstance(document, dict) or document.get(FRAME_KEY) != 1:
        raise FrameError("not a capture frame")
    if "skipped" in document:
        raise FrameError("the pod's sidecar did not write its kernels: %s (%s of at most %s gzip bytes)" % (
            document.get("skipped"), document.get("bytes"), document.get("max_bytes")))
    data, digest = document.get("data"), document.get("sha256")
    if not isinstance(data, str) or not isinstance(digest, str):
        raise FrameError("the frame has no data or no sha256")
    if len(data) > (max_bytes + 2) // 3 * 4:
        raise FrameError("the frame is over %d bytes" % max_bytes)
    try:
        packed = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise FrameError("the frame's data is not base64 (cut short?)") from None
    if hashlib.sha256(packed).hexdigest() != digest or document.get("bytes") != len(packed):
        raise FrameError("the frame's data does not match its sha256 and size (cut short or altered)")
    return packed
