"""A Triton cache made to resolve at a new place: copied there with every group file re-pointed (no Triton needed).

This is the copy a pod-local directory would get (an emptyDir under the pod's TRITON_CACHE_DIR): the source may be
read-only, the destination is writable, so a kernel the cache lacks is compiled next to the others.
"""

import os
import shutil

from . import layout


def relocate(source, destination):
    """Copy `source` (a cache directory) to `destination` (must not exist) and rewrite its group files there.

    Returns {"files", "bytes", "groups"}: what was copied and how many group files were rewritten. Symbolic links
    are not followed or copied: a cache holds regular files only.
    """
    source, destination = os.path.abspath(source), os.path.abspath(destination)
    if os.path.exists(destination):
        raise FileExistsError(destination)
    copied = {"files": 0, "bytes": 0, "groups": 0}
    os.makedirs(destination)
    for entry in sorted(os.listdir(source)):
        source_dir = os.path.join(source, entry)
        if os.path.islink(source_dir) or not os.path.isdir(source_dir):
            continue
        target_dir = os.path.join(destination, entry)
        os.mkdir(target_dir)
        for name in sorted(os.listdir(source_dir)):
            path = os.path.join(source_dir, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if layout.is_group_file(name):
                with open(path) as handle:
                    children = layout.rewrite_group(layout.parse_group(handle.read()), target_dir)
                with open(os.path.join(target_dir, name), "w") as handle:
                    handle.write(layout.group_text(children))
                copied["groups"] += 1
            else:
                shutil.copyfile(path, os.path.join(target_dir, name))
            copied["files"] += 1
            copied["bytes"] += os.path.getsize(path)
    return copied


def rewrite_in_place(cache_dir):
    """Re-point the group files of a cache that was moved (a writable copy already at its final place)."""
    cache_dir = os.path.abspath(cache_dir)
    rewritten = 0
    for entry in sorted(os.listdir(cache_dir)):
        kernel_dir = os.path.join(cache_dir, entry)
        if os.path.islink(kernel_dir) or not os.path.isdir(kernel_dir):
            continue
        for name in sorted(os.listdir(kernel_dir)):
            if not layout.is_group_file(name):
                continue
            path = os.path.join(kernel_dir, name)
            with open(path) as handle:
                children = layout.rewrite_group(layout.parse_group(handle.read()), kernel_dir)
            temporary = path + ".gkm-tmp"
            with open(temporary, "w") as handle:
                handle.write(layout.group_text(children))
            os.replace(temporary, path)
            rewritten += 1
    return rewritten


def overlay(source, destination):
    """Group files only: `destination` (writable, must not exist) gets one directory per kernel of `source` holding
    just its group files, re-pointed at `source`'s files where they are. Triton, given `destination` as its cache,
    finds every kernel (its groups resolve) and reads them from `source`, which may stay read-only; a kernel the
    cache lacks is compiled into `destination`. Nothing but the group files is copied.

    Returns {"groups", "bytes"}: the group files written and their size.

    The prototype the benchmark measures; pods run the collection's own, which also leaves out groups Triton would
    miss and records what it wrote (plugins/module_utils/kernels/overlay.py).
    """
    source, destination = os.path.abspath(source), os.path.abspath(destination)
    if os.path.exists(destination):
        raise FileExistsError(destination)
    written = {"groups": 0, "bytes": 0}
    os.makedirs(destination)
    for entry in sorted(os.listdir(source)):
        source_dir = os.path.join(source, entry)
        if os.path.islink(source_dir) or not os.path.isdir(source_dir):
            continue
        groups = [name for name in sorted(os.listdir(source_dir)) if layout.is_group_file(name)]
        if not groups:
            continue
        os.mkdir(os.path.join(destination, entry))
        for name in groups:
            with open(os.path.join(source_dir, name)) as handle:
                children = layout.rewrite_group(layout.parse_group(handle.read()), source_dir)
            text = layout.group_text(children)
            with open(os.path.join(destination, entry, name), "w") as handle:
                handle.write(text)
            written["groups"] += 1
            written["bytes"] += len(text.encode())
    return written
