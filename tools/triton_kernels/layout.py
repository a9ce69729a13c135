"""Triton's on-disk cache, read without Triton: pure functions over file names and JSON documents.

A cache directory (TRITON_CACHE_DIR) holds one directory per compiled kernel, named by the base32 form of the
kernel's hash. Inside: the kernel's IR at each stage, its binary, its metadata `<name>.json`, and a group file
`__grp__<name>.json` = {"child_paths": {file name: absolute path}}. Triton counts a kernel as cached only when the
group file exists and every path it lists exists (triton/runtime/cache.py, FileCacheManager.get_group); the paths
are the ones the files had when they were written, so a cache moved elsewhere no longer resolves.

Nothing here touches the disk except through the `exists` callables passed in, so the unit tests can feed paths.
Standard library only and self-contained: the workload image ships this package alone (tools/images/workload.sh), so
the few facts it shares with the collection's kernels/image.py (a kernel's facts, its hash directory's name) are kept
in step by tests/unit/tools/test_triton_kernels_layout.py.
"""

import base64
import json
import posixpath

GROUP_PREFIX = "__grp__"

# The stage files a kernel hash directory holds, by backend: (IR stages in order, assembly, binary).
STAGES = {
    "cuda": (("source", "ttir", "ttgir", "llir"), "ptx", "cubin"),
    "hip": (("source", "ttir", "ttgir", "llir"), "amdgcn", "hsaco"),
}

# Where each state leaves Triton: only "resolves" is a hit that reads this cache's own files.
RESOLVES = "resolves"  # every child path exists inside this kernel's directory: a hit
FOREIGN = "foreign"  # every child path exists, but some lie outside this directory: a hit reading other files
DANGLING = "dangling"  # a child path does not exist: Triton recompiles (a miss)
BROKEN = "broken"  # the group file is not JSON or has no child_paths: Triton recompiles


class LayoutError(ValueError):
    """A cache entry that cannot be read as Triton's layout."""


def is_group_file(name):
    return name.startswith(GROUP_PREFIX) and name.endswith(".json")


def group_member(name):
    """`__grp__add_kernel.json` -> `add_kernel.json`: the metadata file the group is named after."""
    if not is_group_file(name):
        raise LayoutError("%r is not a group file" % name)
    return name[len(GROUP_PREFIX):]


def hash_directory_name(kernel_hash):
    """The directory Triton stores a kernel under: the hex sha256 hash as unpadded base32 (runtime/cache.py)."""
    return base64.b32encode(bytes.fromhex(kernel_hash)).decode().rstrip("=")


def parse_group(text):
    """The {file name: path} of a group file's text; LayoutError when Triton would not read it either."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise LayoutError("group file is not JSON: %s" % exc) from exc
    children = document.get("child_paths") if isinstance(document, dict) else None
    if not isinstance(children, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in children.items()):
        raise LayoutError("group file has no child_paths mapping")
    return children


def group_state(children, kernel_dir, exists):
    """RESOLVES, FOREIGN or DANGLING for a group's children as seen from `kernel_dir` (where the group file is)."""
    if not all(exists(path) for path in children.values()):
        return DANGLING
    if all(posixpath.dirname(posixpath.normpath(path)) == posixpath.normpath(kernel_dir)
           for path in children.values()):
        return RESOLVES
    return FOREIGN


def rewrite_group(children, kernel_dir):
    """The group re-pointed at `kernel_dir`: each child at `kernel_dir/<its name>`, as Triton itself writes them.

    Refuses a child name that is not a plain file name, and a recorded path whose last part is not the child's
    name: such a group was not written by Triton's file cache, and rewriting it could point outside the cache.
    """
    rewritten = {}
    for name, path in children.items():
        if not name or "/" in name or name in (".", "..") or name.startswith(GROUP_PREFIX):
            raise LayoutError("group child %r is not a plain file name" % name)
        if posixpath.basename(path) != name:
            raise LayoutError("group child %r is recorded at %r, not under its own name" % (name, path))
        rewritten[name] = posixpath.join(kernel_dir, name)
    return rewritten


def group_text(children):
    """A group file's text, in the shape Triton writes it."""
    return json.dumps({"child_paths": children})


def file_kind(name, backend=None):
    """What a file in a kernel hash directory is: group, metadata, an IR stage, assembly, binary, or other."""
    if is_group_file(name):
        return "group"
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        return "other"
    if ext == "json":
        return "metadata"
    for known, (irs, asm, binary) in STAGES.items():
        if backend not in (None, known):
            continue
        if ext in irs:
            return "ir:" + ext
        if ext == asm:
            return "asm:" + ext
        if ext == binary:
            return "binary:" + ext
    if ext == "so":
        return "launcher"
    return "other"


def parse_metadata(text):
    """A kernel's `<name>.json` metadata as a dict; LayoutError unless it names its hash, target and name."""
    try:
        metadata = json.loads(text)
    except ValueError as exc:
        raise LayoutError("metadata is not JSON: %s" % exc) from exc
    if not isinstance(metadata, dict):
        raise LayoutError("metadata is not a JSON object")
    target = metadata.get("target")
    if not isinstance(target, dict) or not {"backend", "arch", "warp_size"} <= set(target):
        raise LayoutError("metadata has no target {backend, arch, warp_size}")
    for key in ("hash", "name"):
        if not isinstance(metadata.get(key), str):
            raise LayoutError("metadata has no %s" % key)
    return metadata


def kernel_facts(metadata):
    """The facts an image's labels and manifest.json carry, from one kernel's metadata."""
    target = metadata["target"]
    facts = {
        "name": metadata["name"],
        "hash": metadata["hash"],
        "backend": str(target["backend"]),
        "arch": target["arch"],
        "warp_size": int(target["warp_size"]),
        "triton_version": metadata.get("triton_version"),
        "num_warps": metadata.get("num_warps"),
        "num_stages": metadata.get("num_stages"),
        "shared": metadata.get("shared"),
    }
    if "ptx_version" in metadata and metadata["ptx_version"] is not None:
        facts["ptx_version"] = metadata["ptx_version"]
    return facts


def triton_versions(all_facts):
    return sorted({f["triton_version"] for f in all_facts if f.get("triton_version")})
