# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A Triton cache as an image in MCV's format, pure: its layout, manifest.json entries and config labels.

Derived from the kernels' own metadata (`<name>.json`), in the shape MCV writes them (kserve/mcv,
pkg/cache/triton.go): `cache.<kind>.image/entry-count`, `summary` and `cache-size-bytes`, and a manifest entry per
kernel (hash, backend, arch as a string, warp_size, ptx_version with 0 for none, num_stages, num_warps, debug). What
MCV has no field for goes into labels of ours (LABEL_*): the Triton version, the digest of `triton_key()` and the path
the group files name. Both the images of tools/triton_kernels (tests, samples) and a capture (capture/package.py)
are made with these rules. Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# The group files of an image name the kernels' files below this fixed path, whatever path they were compiled at.
GROUP_ROOT = "/opt/gkm/triton-cache"
LABEL_TRITON_VERSION = "io.gkm.cache/triton-version"
LABEL_TRITON_KEY = "io.gkm.cache/triton-key"
LABEL_GROUP_ROOT = "io.gkm.cache/group-root"
# The seconds the image's kernels took to compile cold, summed: what a pod that finds them saves, estimated.
LABEL_COMPILE_SECONDS = "io.gkm.cache/compile-seconds"
# Where MCV's Triton image keeps its kernels and its manifest.
CACHE_DIR = "io.triton.cache"
MANIFEST_PATH = "io.triton.manifest/manifest.json"


class KernelMetadataError(ValueError):
    """A kernel's metadata that is not Triton's."""


def kernel_facts(metadata):
    """The facts an image carries of one kernel, from its parsed metadata; KernelMetadataError unless it names its
    hash, name and target."""
    target = metadata.get("target") if isinstance(metadata, dict) else None
    if not isinstance(target, dict) or not {"backend", "arch", "warp_size"} <= set(target):
        raise KernelMetadataError("metadata has no target {backend, arch, warp_size}")
    for key in ("hash", "name"):
        if not isinstance(metadata.get(key), str):
            raise KernelMetadataError("metadata has no %s" % key)
    facts = {"name": metadata["name"], "hash": metadata["hash"], "backend": str(target["backend"]),
             "arch": target["arch"], "warp_size": int(target["warp_size"]),
             "triton_version": metadata.get("triton_version"), "num_warps": metadata.get("num_warps"),
             "num_stages": metadata.get("num_stages"), "debug": bool(metadata.get("debug"))}
    if metadata.get("ptx_version") is not None:
        facts["ptx_version"] = metadata["ptx_version"]
    return facts


def mcv_manifest_entry(facts, debug=None):
    """One kernel in MCV's manifest.json shape (its TritonCacheMetadata)."""
    return {"hash": facts["hash"], "backend": facts["backend"], "arch": str(facts["arch"]),
            "warp_size": facts["warp_size"], "ptx_version": facts.get("ptx_version") or 0,
            "num_stages": facts["num_stages"], "num_warps": facts["num_warps"],
            "debug": bool(facts.get("debug") if debug is None else debug)}


def summary_targets(all_facts):
    """The distinct targets of the kernels, sorted, the arch a string: the `cache.<kind>.image/summary` targets."""
    seen = {(f["backend"], str(f["arch"]), f["warp_size"]) for f in all_facts}
    return [{"backend": b, "arch": a, "warp_size": w} for b, a, w in sorted(seen)]


def labels(kind, facts, size_bytes, triton_key=None, triton_version=None, group_root=GROUP_ROOT,
           compile_seconds=None):
    """The image config's labels: MCV's for `kind` (triton or vllm), then ours. The Triton version is the kernels'
    own (joined when they differ), else `triton_version`; `compile_seconds`, the kernels' cold compile summed, only
    when the builder timed every kernel (a capture does not)."""
    found = {
        "cache.%s.image/entry-count" % kind: str(len(facts)),
        "cache.%s.image/cache-size-bytes" % kind: str(size_bytes),
        "cache.%s.image/summary" % kind: json.dumps({"targets": summary_targets(facts)}),
        LABEL_GROUP_ROOT: group_root,
    }
    versions = sorted({f["triton_version"] for f in facts if f.get("triton_version")}) or [triton_version]
    if versions[0]:
        found[LABEL_TRITON_VERSION] = ",".join(versions)
    if triton_key:
        found[LABEL_TRITON_KEY] = triton_key
    if compile_seconds is not None:
        found[LABEL_COMPILE_SECONDS] = "%.3f" % compile_seconds
    return found
