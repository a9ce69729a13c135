# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The extracted tree on disk: its listing and fingerprint, the marker file, the per-destination lock and
the atomic swap into place.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import hashlib
import json
import os
import shutil

from ansible_collections.gkm.cluster.plugins.module_utils.extract.rules import ExtractError

MARKER_NAME = ".gkm-cache.json"
# A published tree's directories: readable and traversable by every uid, writable by none (seal_directories).
SEALED_DIR_MODE = 0o555
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MARKER_VERSION = 1
TMP_INFIX = ".gkm-tmp-"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


# ---------------------------------------------------------------- tree, marker, swap


def tree_listing(root):
    """Sorted (path, kind, size or link target) of every file and symlink below root, marker excluded."""
    entries = []
    stack = [("", root)]
    while stack:
        rel, path = stack.pop()
        with os.scandir(path) as it:
            for entry in it:
                name = rel + entry.name
                if entry.is_symlink():
                    entries.append((name, "l", os.readlink(entry.path)))
                elif entry.is_dir():
                    stack.append((name + "/", entry.path))
                elif name != MARKER_NAME:
                    entries.append((name, "f", entry.stat().st_size))
    entries.sort()
    return entries


def tree_fingerprint(root):
    """(file count, bytes, sha256 of the listing) for root; changes when a file is added, removed or resized."""
    return listing_fingerprint(tree_listing(root))


def listing_fingerprint(listing):
    """tree_fingerprint of a sorted listing as tree_listing makes it (an extraction records its own)."""
    text = "".join("%s\0%s\0%s\n" % entry for entry in listing)
    files = [value for _name, kind, value in listing if kind == "f"]
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
    return len(files), sum(files), "sha256:" + digest


def read_marker(dest):
    """The marker dict in dest, or None when dest has none (or an unreadable one)."""
    try:
        with open(os.path.join(dest, MARKER_NAME), "rb") as f:
            marker = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("version") == MARKER_VERSION else None


def tree_intact(dest, marker):
    files, size, fingerprint = tree_fingerprint(dest)
    return (files, size, fingerprint) == (marker.get("files"), marker.get("bytes"), marker.get("tree"))


def seal_directories(root, directories):
    """Make root and its directories (relative paths) SEALED_DIR_MODE, deepest first; each opened relative to root's
    descriptor without following a link, so nothing planted in the tree is changed through one."""
    root_fd = os.open(root, _DIRECTORY_FLAGS)
    try:
        for relative in sorted(directories, key=lambda path: path.count("/"), reverse=True):
            fd = os.open(relative, _DIRECTORY_FLAGS, dir_fd=root_fd)
            try:
                os.fchmod(fd, SEALED_DIR_MODE)
            finally:
                os.close(fd)
        os.fchmod(root_fd, SEALED_DIR_MODE)
    finally:
        os.close(root_fd)


def remove_tree(path, ignore_errors=False):
    """shutil.rmtree of a tree whose directories may be sealed: their owner makes them writable again first (links
    are never followed: os.walk does not descend into them and chmod is asked not to follow)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            for directory, _subdirectories, _files in os.walk(path):
                os.chmod(directory, 0o700, follow_symlinks=False)
        shutil.rmtree(path)
    except OSError:
        if not ignore_errors:
            raise


def _exchange(a, b):
    """Atomically swap two directory entries; False when the platform cannot."""
    # Imported here: only replacing an existing tree needs it. The interpreter's own symbols include its C
    # library's, so no search for libc (find_library runs ldconfig in a subprocess).
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS):
        return False
    raise OSError(err, os.strerror(err), b)


def swap_into_place(new_tree, dest):
    """Make new_tree appear at dest in one step; returns the path now holding the old tree, or None."""
    try:
        if not os.path.lexists(dest):
            os.rename(new_tree, dest)
            return None
        if _exchange(new_tree, dest):
            return new_tree
        old = new_tree + ".old"
        os.rename(dest, old)
        os.rename(new_tree, dest)
        return old
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.EXDEV):
            raise ExtractError("cannot replace %s (%s): dest must be a directory inside a volume, not its mount "
                               "point; use a subdirectory such as %s/cache" % (dest, exc.strerror, dest)) from exc
        raise


def check_dest(dest):
    """Refuse a dest that is not ours to replace: a file, or a non-empty directory without our marker."""
    if not os.path.isabs(dest):
        raise ExtractError("dest %r must be an absolute path" % dest)
    if os.path.islink(dest) or (os.path.lexists(dest) and not os.path.isdir(dest)):
        raise ExtractError("dest %s exists and is not a directory; remove it or choose another dest" % dest)
    if os.path.isdir(dest) and os.listdir(dest) and read_marker(dest) is None:
        raise ExtractError("dest %s is a non-empty directory not written by this module (no %s); refusing to "
                           "replace it: empty it or choose another dest" % (dest, MARKER_NAME))


class DestLock:
    """An exclusive lock beside dest so two extractions of the same dest never interleave."""

    def __init__(self, dest):
        parent, name = os.path.split(dest.rstrip("/"))
        os.makedirs(parent, mode=0o755, exist_ok=True)
        self.path = os.path.join(parent, "." + name + ".gkm-lock")
        self.fd = None

    def __enter__(self):
        # Never through a link planted where the lock goes.
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def remove_stale_temporaries(dest):
    """Remove temporary trees left beside dest by an extraction that was killed (call under DestLock)."""
    parent, name = os.path.split(dest.rstrip("/"))
    prefix = "." + name + TMP_INFIX
    removed = 0
    for entry in os.listdir(parent):
        if entry.startswith(prefix):
            remove_tree(os.path.join(parent, entry), ignore_errors=True)
            removed += 1
    return removed
