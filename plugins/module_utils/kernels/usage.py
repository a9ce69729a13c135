# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a pod did with its kernel overlay: which cached kernels Triton read (hits) and which it compiled (misses).

Read from the overlay directory alone, without Triton: a kernel directory that MARKER does not list was compiled in
the pod (overlay.compiled_here); an overlaid kernel was read when one of its group files was opened since the
overlay wrote it. Triton opens `__grp__<name>.json` to look a kernel up, and the file's access time then moves past
its modification time (Linux's default `relatime` updates it once after each write; a filesystem mounted
`noatime` would show no hit). Only stat() is called on overlaid groups, which leaves their access time alone.
A compiled kernel is named by its group file and described by Triton's metadata beside it (`<name>.json`: its
target and Triton's version), which the collection compares with the cache's image (distribute/status/kernel_use.py).

Standard library only, like overlay.py: the pod's sidecar runs it (usage_main.py). Every figure is bounded here and
checked again by the reader, which trusts nothing a pod prints.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay import (
    GROUP_PREFIX,
    MARKER,
    MAX_GROUP_BYTES,
    compiled_here,
    is_group_file,
)

# The key of the JSON line the sidecar prints, which the collection looks for in its log.
REPORT_KEY = "gkm_kernel_use"
# Compiled kernels described one by one in a report; the count of misses is not bounded by it.
MAX_LISTED = 50


def _groups(directory):
    try:
        return sorted(name for name in os.listdir(directory) if is_group_file(name))
    except OSError:
        return []


def _was_read(path):
    try:
        status = os.lstat(path)
    except OSError:
        return False
    return status.st_atime_ns > status.st_mtime_ns


def _metadata(path):
    """Target and Triton version from a compiled kernel's metadata (`<name>.json`), {} when unreadable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_GROUP_BYTES + 1)
        document = json.loads(data.decode("utf-8")) if len(data) <= MAX_GROUP_BYTES else None
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict):
        return {}
    facts = {}
    target = document.get("target")
    if isinstance(target, dict) and target.get("backend") is not None:
        facts["target"] = "%s:%s" % (target.get("backend"), target.get("arch"))
    if isinstance(document.get("triton_version"), str):
        facts["triton_version"] = document["triton_version"]
    return facts


def observe(destination):
    """The report of an overlay directory, or None when it holds no MARKER (no overlay was written there).

    {REPORT_KEY: 1, "overlaid", "hits", "misses", "compiled": [{"name", "hash_dir", "target", "triton_version",
    "cached_name", "left_out"}]}: `cached_name` when the cache holds a kernel of that name under another key,
    `left_out` when the overlay left the cache's copy of this very key out (its files missing or not Triton's)."""
    try:
        with open(os.path.join(destination, MARKER)) as handle:
            marker = json.load(handle)
        overlaid = set(marker.get("hash_dirs") or ())
        left_out = {item.get("hash_dir") for item in marker.get("skipped") or () if isinstance(item, dict)}
    except (OSError, ValueError, AttributeError):
        return None
    compiled_dirs = compiled_here(destination) or []
    hits, cached_names = 0, set()
    for entry in sorted(overlaid):
        groups = _groups(os.path.join(destination, entry))
        cached_names.update(name[len(GROUP_PREFIX):-len(".json")] for name in groups)
        hits += any(_was_read(os.path.join(destination, entry, name)) for name in groups)
    compiled, misses = [], 0
    for entry in compiled_dirs:
        directory = os.path.join(destination, entry)
        groups = _groups(directory)
        # A directory without a group is a compile in progress, or Triton's launcher (built at run time, no group).
        if not groups:
            continue
        misses += 1
        if len(compiled) >= MAX_LISTED:
            continue
        name = groups[0][len(GROUP_PREFIX):-len(".json")]
        item = {"name": name, "hash_dir": entry, "cached_name": name in cached_names, "left_out": entry in left_out}
        item.update(_metadata(os.path.join(directory, name + ".json")))
        compiled.append(item)
    return {REPORT_KEY: 1, "overlaid": len(overlaid), "hits": hits, "misses": misses, "compiled": compiled}
