# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Command-line entry point of the scrub Job: remove cache slot directories from a node's disk.

    python -m ansible_collections.gkm.cluster.plugins.module_utils.extract.scrub_main \\
        --root /gkm-root _cluster/vllm/serving/5f1d... team-a/vector-add/team-a/9ac0...

Each path is relative to --root (the cache root, mounted from the node). Every path is checked
before anything is removed: relative, no '.', '..' or empty parts. The walk opens each directory
relative to its parent's descriptor without following symbolic links, and the slot is removed with
shutil.rmtree on that descriptor, so a link planted anywhere under the root is removed as a link and
never followed out of it. Then the slot's empty parents go, up to but not including the root.

Prints {"removed": [...], "absent": [...], "parents_removed": [...], "refused": {path: reason}} as JSON.
Exit status: 0 done, 1 a path was refused or could not be removed, 2 bad arguments.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import errno
import json
import os
import shutil
import stat
import sys

DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class ScrubError(Exception):
    """A path that must not be touched, or a removal that failed; the message names the path."""


def path_parts(relative):
    """The components of a path strictly under the root; raises ScrubError for anything else."""
    if not relative or "\0" in relative:
        raise ScrubError("%r: empty or contains a NUL byte" % relative)
    if relative.startswith("/"):
        raise ScrubError("%r: absolute; paths are relative to the root" % relative)
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ScrubError("%r: '.', '..' and empty parts are refused" % relative)
    return parts


def _open_directory(name, parent_fd, shown):
    try:
        return os.open(name, DIRECTORY_FLAGS, dir_fd=parent_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise ScrubError("%s: not a directory or a symbolic link; not followed" % shown) from error
        raise


def _remove_entry(name, parent_fd):
    """Remove the slot itself: a directory tree (links inside unlinked, never followed) or a stray non-directory."""
    mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
    if stat.S_ISDIR(mode):
        shutil.rmtree(name, dir_fd=parent_fd)
    else:
        os.unlink(name, dir_fd=parent_fd)


def _remove_empty_parents(parts, fds, report):
    """rmdir the slot's parents from the deepest open one up; the first non-empty one ends the climb."""
    for depth in range(len(fds) - 1, 0, -1):
        try:
            os.rmdir(parts[depth - 1], dir_fd=fds[depth - 1])
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return
            if error.errno != errno.ENOENT:
                raise
        else:
            report["parents_removed"].append("/".join(parts[:depth]))


def scrub_path(root_fd, relative, report):
    parts = path_parts(relative)
    fds = [root_fd]
    try:
        present = True
        for index, name in enumerate(parts[:-1]):
            try:
                fds.append(_open_directory(name, fds[-1], "/".join(parts[:index + 1])))
            except FileNotFoundError:
                present = False
                break
        if present:
            try:
                _remove_entry(parts[-1], fds[-1])
                report["removed"].append(relative)
            except FileNotFoundError:
                present = False
        if not present:
            report["absent"].append(relative)
        _remove_empty_parents(parts, fds, report)
    finally:
        for fd in fds[1:]:
            os.close(fd)


def scrub(root, relatives):
    """Remove every path under root; all are validated first, so one bad path removes nothing."""
    for relative in relatives:
        path_parts(relative)
    report = {"removed": [], "absent": [], "parents_removed": [], "refused": {}}
    root_fd = os.open(root, DIRECTORY_FLAGS)
    try:
        for relative in relatives:
            try:
                scrub_path(root_fd, relative, report)
            except (ScrubError, OSError) as error:
                report["refused"][relative] = str(error)
    finally:
        os.close(root_fd)
    return report


def build_parser():
    parser = argparse.ArgumentParser(prog="gkm-cache-scrub", description="Remove cache slot directories under "
                                     "a root without following symbolic links, then their empty parents.")
    parser.add_argument("--root", required=True, help="the cache root directory (the node's host_path_root)")
    parser.add_argument("paths", nargs="+", help="slot directories relative to the root")
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        report = scrub(args.root, args.paths)
    except (ScrubError, OSError) as error:
        json.dump({"failed": True, "msg": str(error)}, sys.stdout)
        sys.stdout.write("\n")
        return 2 if isinstance(error, ScrubError) else 1
    json.dump(report, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 1 if report["refused"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
