"""A compiled Triton cache as the content of an MCV image: its files, manifest.json and config labels.

The manifest entries and labels follow the collection's rules (plugins/module_utils/kernels/image.py, which a
capture uses too), from the kernels' own metadata and the compile's build record. MCV's `dummy_key` is its own
approximation of Triton's key and is not written.

Group files are rewritten for GROUP_ROOT, a fixed path, so an image does not depend on where its builder's store
is and a reader can tell which path the groups name. No Triton is imported here.
"""

import json
import os
import posixpath

from ansible_collections.gkm.cluster.plugins.module_utils.kernels import image as mcv
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import (  # noqa: F401 (the tests' names)
    GROUP_ROOT,
    LABEL_COMPILE_SECONDS,
    LABEL_GROUP_ROOT,
    LABEL_TRITON_KEY,
    LABEL_TRITON_VERSION,
    mcv_manifest_entry,
)

from . import layout, scan


def select_kernels(kernels, count=None, seed=0):
    """`count` of the scanned kernels (all when None), the same ones for the same seed: the list sorted by hash,
    rotated by the seed. Two images of one target with different seeds then hold different kernel sets."""
    ordered = sorted(kernels, key=lambda kernel: kernel["facts"]["hash"])
    if count is None or count >= len(ordered):
        return ordered
    start = seed % len(ordered)
    return (ordered[start:] + ordered[:start])[:count]


def _read(path):
    with open(path, "rb") as handle:
        return handle.read()


def cache_content(cache_dir, count=None, seed=0, group_root=GROUP_ROOT):
    """({path relative to the cache: bytes}, [layout.kernel_facts], debug flags) of the chosen kernels.

    Each kernel's files as compiled, its group file re-pointed at group_root/<hash dir>/. Refuses a kernel whose
    metadata is unreadable or whose directory is not its hash's: such a cache was not written by Triton.
    """
    kernels = scan.scan(cache_dir)
    for kernel in kernels:
        if not kernel["facts"] or not kernel["hash_matches_dir"]:
            raise layout.LayoutError("%s in %s is not a kernel Triton wrote" % (kernel["hash_dir"], cache_dir))
    files, facts, debug = {}, [], []
    for kernel in select_kernels(kernels, count, seed):
        kernel_dir = os.path.join(cache_dir, kernel["hash_dir"])
        for name in kernel["files"]:
            data = _read(os.path.join(kernel_dir, name))
            if layout.is_group_file(name):
                children = layout.rewrite_group(layout.parse_group(data.decode()),
                                                posixpath.join(group_root, kernel["hash_dir"]))
                data = layout.group_text(children).encode()
            elif name == kernel["name"] + ".json":
                debug.append(bool(json.loads(data).get("debug")))
            files[posixpath.join(kernel["hash_dir"], name)] = data
        facts.append(kernel["facts"])
    return files, facts, debug


def manifest_entries(facts, debug):
    return [mcv_manifest_entry(fact, flag) for fact, flag in zip(facts, debug)]


def labels(kind, facts, size_bytes, build, group_root=GROUP_ROOT):
    """The image config's labels: MCV's for `kind` (triton or vllm), then ours."""
    seconds = {kernel.get("hash"): kernel.get("seconds") for kernel in build.get("kernels") or ()}
    compile_seconds = None
    if facts and all(isinstance(seconds.get(fact["hash"]), (int, float)) for fact in facts):
        compile_seconds = sum(seconds[fact["hash"]] for fact in facts)
    return mcv.labels(kind, facts, size_bytes, build.get("triton_key"), build.get("triton_version"), group_root,
                      compile_seconds)
