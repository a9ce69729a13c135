"""A Triton cache directory read from disk (no Triton needed): each kernel's files, metadata and group state."""

import contextlib
import os

from . import layout


def scan(cache_dir):
    """One dict per kernel hash directory holding a group file, sorted by kernel name then hash directory.

    Each: hash_dir, name, state (layout.RESOLVES / FOREIGN / DANGLING / BROKEN), files {name: kind}, bytes,
    facts (layout.kernel_facts, None when the metadata is unreadable), hash_matches_dir.
    Directories without a group file (Triton's launcher and utils builds) are left out.
    """
    cache_dir = os.path.abspath(cache_dir)
    kernels = []
    for entry in sorted(os.listdir(cache_dir)):
        kernel_dir = os.path.join(cache_dir, entry)
        if not os.path.isdir(kernel_dir):
            continue
        names = sorted(os.listdir(kernel_dir))
        for group_name in (n for n in names if layout.is_group_file(n)):
            kernels.append(_kernel(kernel_dir, entry, names, group_name))
    return sorted(kernels, key=lambda k: (k["name"] or "", k["hash_dir"]))


def _read(path):
    """The file's text, read without moving its access time where the kernel allows it (O_NOATIME: the file's owner
    or CAP_FOWNER). The kernel-use sidecar counts a group file whose access time moved as a kernel Triton read
    (plugins/module_utils/kernels/usage.py): an inspect of an overlay must not count as hits."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOATIME)
    except PermissionError:
        descriptor = os.open(path, os.O_RDONLY)
    with os.fdopen(descriptor) as handle:
        return handle.read()


def _kernel(kernel_dir, entry, names, group_name):
    member = layout.group_member(group_name)
    facts = None
    with contextlib.suppress(OSError, layout.LayoutError):
        facts = layout.kernel_facts(layout.parse_metadata(_read(os.path.join(kernel_dir, member))))
    backend = facts["backend"] if facts else None
    try:
        children = layout.parse_group(_read(os.path.join(kernel_dir, group_name)))
        state = layout.group_state(children, kernel_dir, os.path.exists)
    except layout.LayoutError:
        state = layout.BROKEN
    files = {name: layout.file_kind(name, backend) for name in names}
    size = sum(os.path.getsize(os.path.join(kernel_dir, name)) for name in names)
    return {
        "hash_dir": entry, "name": member[:-len(".json")], "state": state, "files": files, "bytes": size,
        "facts": facts,
        "hash_matches_dir": bool(facts) and layout.hash_directory_name(facts["hash"]) == entry,
    }


def tree_bytes(root):
    """Files and bytes below `root`."""
    count = total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            count += 1
            total += os.path.getsize(os.path.join(base, name))
    return count, total
