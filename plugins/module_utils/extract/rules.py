# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Entry rules of the extraction, pure: which tar entries are safe to write, where, and with which mode;
the Triton group-file rewrite.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import tarfile

# Linux limits: one path component, and a whole path given to a system call (with its NUL).
NAME_MAX = 255
PATH_MAX = 4096
_WHITEOUT_PREFIX = ".wh."
# The extraction refuses a layer holding more than the image declares (its cache-size-bytes label) times
# this factor plus this margin: the same headroom the distribution gives the cache's volume, so a layer
# over it would not fit the volume sized from the label anyway.
DECLARED_SIZE_FACTOR = 1.5
DECLARED_SIZE_MARGIN = 32 * 1024 * 1024
_CACHE_ROOTS = re.compile(r"^io\.[A-Za-z0-9_-]+\.(cache|manifest)$")
REGULAR_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)


class ExtractError(Exception):
    """The layer is unsafe, broken or over a limit; nothing was changed."""


class Limits:
    """Extraction limits. max_ratio bounds uncompressed bytes per compressed byte of the layer."""

    def __init__(self, max_bytes=8 * 1024 ** 3, max_files=100000, max_ratio=250):
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.max_ratio = max_ratio


# ---------------------------------------------------------------- entry rules (pure)


def safe_member_path(name, what="entry"):
    """The normalized relative path of a tar member name; ExtractError when it is unsafe."""
    if "\x00" in name:
        raise ExtractError("%s %r contains a NUL byte" % (what, name))
    if name.startswith("/"):
        raise ExtractError("%s %r is an absolute path; layer paths must be relative" % (what, name))
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ExtractError("%s %r has a '..' component, which could write outside dest" % (what, name))
    # Per-component checks only for the rare names that could fail them: this runs once per tar entry.
    if len(name) > NAME_MAX // 4 or _WHITEOUT_PREFIX in name:
        for part in parts:
            size = len(part.encode("utf-8", "surrogateescape"))
            if size > NAME_MAX:
                raise ExtractError("rule name_max: %s %.80r... has a name of %d bytes; Linux allows %d bytes per "
                                   "path component" % (what, name, size, NAME_MAX))
            if part.startswith(_WHITEOUT_PREFIX):
                raise ExtractError("rule whiteout: %s %r is an OCI whiteout (.wh.*), which hides files of a lower "
                                   "layer; a kernel cache is a single layer with nothing below it, so its image is "
                                   "malformed" % (what, name))
    return "/".join(parts)


def check_path_length(root_bytes, path):
    """Refuse a path that the kernel would refuse below a root of `root_bytes` bytes (ENAMETOOLONG), by its rule."""
    if root_bytes + 1 + 4 * len(path) < PATH_MAX:  # UTF-8 takes at most 4 bytes a character
        return
    length = root_bytes + 1 + len(path.encode("utf-8", "surrogateescape"))
    if length >= PATH_MAX:
        raise ExtractError("rule path_max: entry %.80r... makes a path of %d bytes below the destination; Linux "
                           "allows %d" % (path, length, PATH_MAX - 1))


def byte_budget(limits, layer_size, declared_bytes):
    """(most uncompressed bytes the files of the layer may hold, the rule that sets it).

    The smallest of max_bytes, the expansion ratio times the compressed size and the image's declared size
    with its margin: a member whose header announces more is refused before any byte of it is written.
    """
    budgets = [(limits.max_bytes, "max_bytes=%d" % limits.max_bytes)]
    if limits.max_ratio and layer_size:
        budgets.append((layer_size * limits.max_ratio, "max_expansion_ratio=%d x %d compressed bytes"
                        % (limits.max_ratio, layer_size)))
    if declared_bytes is not None:
        budgets.append((int(declared_bytes * DECLARED_SIZE_FACTOR) + DECLARED_SIZE_MARGIN,
                        "declared_size (the image's cache-size-bytes label %d, x%s + %d bytes of margin)"
                        % (declared_bytes, DECLARED_SIZE_FACTOR, DECLARED_SIZE_MARGIN)))
    return min(budgets)


def in_cache_scope(path):
    """True for io.<kind>.cache/... and io.<kind>.manifest/..., the parts MCV extracts."""
    return bool(_CACHE_ROOTS.match(path.split("/", 1)[0]))


def entry_kind(member):
    """'file', 'dir', 'symlink' or 'hardlink'; ExtractError for devices, FIFOs and other types."""
    if member.type in REGULAR_TYPES:
        return "file"
    if member.type == tarfile.DIRTYPE:
        return "dir"
    if member.type == tarfile.SYMTYPE:
        return "symlink"
    if member.type == tarfile.LNKTYPE:
        return "hardlink"
    if member.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        raise ExtractError("entry %r is a device node; kernel caches hold only files and directories" % member.name)
    if member.type == tarfile.FIFOTYPE:
        raise ExtractError("entry %r is a FIFO; kernel caches hold only files and directories" % member.name)
    raise ExtractError("entry %r has unsupported tar type %r" % (member.name, member.type))


def file_mode(mode):
    """0555 when any execute bit is set, else 0444: no setuid/setgid/sticky, no write bit for anyone, so a published
    file is read-only even for its owner (issue 31, class 1)."""
    return 0o555 if mode & 0o111 else 0o444


def check_symlink_target(path, target, symlink_paths):
    """Refuse a symlink whose target leaves the tree or passes through another symlink.

    Resolution is done on the names: because no path component on the way may itself be a
    symlink (only the last one may), this is exactly what the kernel will resolve.
    """
    if not target:
        raise ExtractError("symlink %r has an empty target" % path)
    if target.startswith("/"):
        raise ExtractError("symlink %r points to the absolute path %r, outside dest" % (path, target))
    position = path.split("/")[:-1]
    steps = [part for part in target.split("/") if part not in ("", ".")]
    for index, part in enumerate(steps):
        if part == "..":
            if not position:
                raise ExtractError("symlink %r -> %r leaves dest" % (path, target))
            position.pop()
            continue
        position.append(part)
        if index < len(steps) - 1 and "/".join(position) in symlink_paths:
            raise ExtractError("symlink %r -> %r passes through another symlink (%s); refused because chained "
                               "links can leave dest" % (path, target, "/".join(position)))


def rewrite_group_file(data, final_dir, name):
    """A __grp__*.json with every child path pointed at the same file name in `final_dir`."""
    try:
        document = json.loads(data)
        children = document["child_paths"]
        if not isinstance(children, dict) or not all(isinstance(v, str) for v in children.values()):
            raise ValueError("child_paths must map file names to paths")
    except (ValueError, KeyError, TypeError) as exc:
        raise ExtractError(
            "Triton group file %r is malformed (%s): expected {\"child_paths\": {...}}" % (name, exc)) from exc
    document["child_paths"] = {
        key: os.path.join(final_dir, value.rstrip("/").rsplit("/", 1)[-1]) for key, value in children.items()
    }
    return json.dumps(document).encode()
