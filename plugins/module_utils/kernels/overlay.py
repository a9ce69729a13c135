# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The group overlay: a writable Triton cache directory whose kernels are those of a read-only mounted cache.

Triton counts a kernel as cached when `<TRITON_CACHE_DIR>/<key dir>/__grp__<name>.json` parses and every path it lists
exists (triton/runtime/cache.py, FileCacheManager.get_group), and then reads the files from those paths. A cache
extracted under one path and mounted into a pod under another lists paths that do not exist there: every kernel
misses. The overlay gives the pod a writable directory (an emptyDir) holding, for each kernel of the mounted cache,
only its group files, re-pointed at the kernel's files where the pod sees them. Set as TRITON_CACHE_DIR it hits
every kernel the cache holds, reads them from the mount, and compiles a kernel the cache lacks into the writable
directory, the mount untouched. Nothing but group files (about 1 kB per kernel) is written; no binary is copied.

Standard library only, and nothing else of the collection: this runs in a pod's init container
(overlay_main.py). `overlay_group` is pure; `write_overlay` reads the source and writes the destination.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import posixpath
import stat

GROUP_PREFIX = "__grp__"
# Where an image of MCV's Triton format keeps its kernels, below the root the extractor writes (and the pod mounts).
TRITON_CACHE_ROOT = "io.triton.cache"
# Written last into the destination: which kernels came from the mount. A kernel directory in the destination that
# it does not list was compiled in the pod: a miss (what a hit/miss report and capture read).
MARKER = ".gkm-overlay.json"
# A group file lists a kernel's half-dozen stage files: far below this. A larger one is not Triton's.
MAX_GROUP_BYTES = 64 * 1024

# Why a group is left out of the overlay (Triton would miss it anyway, and then compiles it into the destination).
UNREADABLE = "unreadable"
NOT_TRITONS = "not Triton's group format"
MISSING_FILE = "a file it lists is not in the mounted cache"


class OverlayError(ValueError):
    """A group file that cannot be re-pointed; the message says why."""


def is_group_file(name):
    return name.startswith(GROUP_PREFIX) and name.endswith(".json")


def overlay_group(text, kernel_dir):
    """A group file's text re-pointed at `kernel_dir` (where the pod sees the kernel's files), in Triton's shape,
    and the {file name: path} it lists. Pure.

    Refuses what Triton's file cache never writes: text that is not {"child_paths": {name: path}}, a child name that
    is not a plain file name (or is itself a group), and a recorded path whose last part is not the child's name. A
    group passing these names only files directly inside `kernel_dir`, whatever paths it held before.
    """
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise OverlayError("not JSON: %s" % exc) from exc
    children = document.get("child_paths") if isinstance(document, dict) else None
    if not isinstance(children, dict):
        raise OverlayError("no child_paths mapping")
    rewritten = {}
    for name, path in children.items():
        if not isinstance(name, str) or not isinstance(path, str):
            raise OverlayError("child_paths must map file names to paths")
        if not name or "/" in name or "\0" in name or name in (".", "..") or name.startswith(GROUP_PREFIX):
            raise OverlayError("child %r is not a plain file name" % name)
        if posixpath.basename(path) != name:
            raise OverlayError("child %r is recorded at %r, not under its own name" % (name, path))
        rewritten[name] = posixpath.join(kernel_dir, name)
    return json.dumps({"child_paths": rewritten}), rewritten


def triton_cache_dir(mount_root):
    """The directory of Triton's kernels in a mounted cache: `<root>/io.triton.cache` when there is one (the layout of
    MCV's images, which the extractor keeps), else the root itself (a cache mounted at its kernels' level)."""
    nested = os.path.join(mount_root, TRITON_CACHE_ROOT)
    return nested if os.path.isdir(nested) else mount_root


def _read_group(path):
    with open(path, "rb") as handle:
        data = handle.read(MAX_GROUP_BYTES + 1)
    if len(data) > MAX_GROUP_BYTES:
        raise OverlayError("larger than %d bytes" % MAX_GROUP_BYTES)
    return data.decode("utf-8")


def _write(path, text):
    """Replace `path` with `text` whole: an init container run again after a restart rewrites the same files."""
    temporary = "%s.gkm-%d.tmp" % (path, os.getpid())
    with open(temporary, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _is_dir(path):
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_file(path):
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def write_overlay(source, destination):
    """Write into `destination` (created when missing; an emptyDir already exists) one directory per kernel of the
    Triton cache directory `source`, holding only its group files re-pointed at `source`'s files.

    A group is left out when it cannot be read as Triton's, or when a file it lists is not a regular file beside it
    in `source`: Triton would miss that kernel in any case, and leaving it out lets Triton compile it into
    `destination`. Symbolic links are never followed, in `source` or for its kernel directories.

    Returns {"source", "kernels", "groups", "bytes", "skipped": [{"hash_dir", "group", "reason"}]}; `destination`
    then holds MARKER, the same facts with the kernel directories written.
    """
    source, destination = os.path.abspath(source), os.path.abspath(destination)
    if not _is_dir(source):
        raise OSError("the mounted cache %s is not a directory" % source)
    os.makedirs(destination, exist_ok=True)
    result = {"source": source, "kernels": 0, "groups": 0, "bytes": 0, "skipped": []}
    written_dirs = []
    for entry in sorted(os.listdir(source)):
        kernel_dir = os.path.join(source, entry)
        # Triton's key directories are base32 names, never hidden ones: a hidden entry could only collide with MARKER.
        if entry.startswith(".") or not _is_dir(kernel_dir):
            continue
        overlays = []
        for name in sorted(os.listdir(kernel_dir)):
            if not is_group_file(name):
                continue
            try:
                text, children = overlay_group(_read_group(os.path.join(kernel_dir, name)), kernel_dir)
            except (OSError, UnicodeDecodeError):
                result["skipped"].append({"hash_dir": entry, "group": name, "reason": UNREADABLE})
                continue
            except OverlayError as exc:
                result["skipped"].append({"hash_dir": entry, "group": name, "reason": "%s: %s" % (NOT_TRITONS, exc)})
                continue
            if not all(_is_file(path) for path in children.values()):
                result["skipped"].append({"hash_dir": entry, "group": name, "reason": MISSING_FILE})
                continue
            overlays.append((name, text))
        if not overlays:
            continue
        target_dir = os.path.join(destination, entry)
        if not _is_dir(target_dir):
            os.mkdir(target_dir)
        for name, text in overlays:
            _write(os.path.join(target_dir, name), text)
            result["groups"] += 1
            result["bytes"] += len(text.encode("utf-8"))
        result["kernels"] += 1
        written_dirs.append(entry)
    _write(os.path.join(destination, MARKER), json.dumps(dict(result, hash_dirs=written_dirs), sort_keys=True))
    return result


def compiled_here(destination):
    """The kernel directories of `destination` that the overlay did not write: kernels compiled in the pod (misses).
    None when `destination` has no MARKER (no overlay was written there)."""
    try:
        with open(os.path.join(destination, MARKER)) as handle:
            overlaid = set(json.load(handle).get("hash_dirs") or ())
    except (OSError, ValueError, AttributeError):
        return None
    return sorted(entry for entry in os.listdir(destination)
                  if entry not in overlaid and _is_dir(os.path.join(destination, entry)))
