"""A compiled Triton cache as the content of an MCV image: its files, manifest.json and config labels.

Everything is derived from the kernels' own metadata (`<name>.json`) and the compile's build record, in the
format MCV writes (kserve/mcv, pkg/cache/triton.go): the `cache.<kind>.image/entry-count`, `summary` and
`cache-size-bytes` labels, and a manifest entry per kernel with MCV's fields (hash, backend, arch as a string,
warp_size, ptx_version with 0 for none, num_stages, num_warps, debug). What MCV has no field for goes into labels of
ours beside them (LABEL_* below): the Triton version, the digest of `triton_key()` and the path the group files
name. MCV's `dummy_key` is its own approximation of Triton's key and is not written.

Group files are rewritten for GROUP_ROOT, a fixed path, so an image does not depend on where its builder's store
is and a reader can tell which path the groups name. No Triton is imported here.
"""

import json
import os
import posixpath

from . import layout, scan

GROUP_ROOT = "/opt/gkm/triton-cache"
LABEL_TRITON_VERSION = "io.gkm.cache/triton-version"
LABEL_TRITON_KEY = "io.gkm.cache/triton-key"
LABEL_GROUP_ROOT = "io.gkm.cache/group-root"
# The seconds the image's kernels took to compile cold, summed: what a pod that finds them saves, estimated.
LABEL_COMPILE_SECONDS = "io.gkm.cache/compile-seconds"


def mcv_manifest_entry(facts, debug=False):
    """One kernel in MCV's manifest.json shape (its TritonCacheMetadata), from layout.kernel_facts."""
    return {"hash": facts["hash"], "backend": facts["backend"], "arch": str(facts["arch"]),
            "warp_size": facts["warp_size"], "ptx_version": facts.get("ptx_version") or 0,
            "num_stages": facts["num_stages"], "num_warps": facts["num_warps"], "debug": bool(debug)}


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
    targets = [dict(target, arch=str(target["arch"])) for target in layout.summary_targets(facts)]
    found = {
        "cache.%s.image/entry-count" % kind: str(len(facts)),
        "cache.%s.image/cache-size-bytes" % kind: str(size_bytes),
        "cache.%s.image/summary" % kind: json.dumps({"targets": targets}),
        LABEL_GROUP_ROOT: group_root,
    }
    versions = layout.triton_versions(facts) or [build.get("triton_version")]
    if versions and versions[0]:
        found[LABEL_TRITON_VERSION] = ",".join(versions)
    if build.get("triton_key"):
        found[LABEL_TRITON_KEY] = build["triton_key"]
    seconds = {kernel.get("hash"): kernel.get("seconds") for kernel in build.get("kernels") or ()}
    if facts and all(isinstance(seconds.get(fact["hash"]), (int, float)) for fact in facts):
        found[LABEL_COMPILE_SECONDS] = "%.3f" % sum(seconds[fact["hash"]] for fact in facts)
    return found
