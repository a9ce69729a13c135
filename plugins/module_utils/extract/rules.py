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

_CACHE_ROOTS = re.compile(r"^io\.[A-Za-z0-9_-]+\.(cache|manifest)$")
_REGULAR_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)


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
    return "/".join(parts)


def in_cache_scope(path):
    """True for io.<kind>.cache/... and io.<kind>.manifest/..., the parts MCV extracts."""
    return bool(_CACHE_ROOTS.match(path.split("/", 1)[0]))


def entry_kind(member):
    """'file', 'dir', 'symlink' or 'hardlink'; ExtractError for devices, FIFOs and other types."""
    if member.type in _REGULAR_TYPES:
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
    """0755 when any execute bit is set, else 0644: no setuid/setgid/sticky, no group/other write."""
    return 0o755 if mode & 0o111 else 0o644


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
