"""Compile the kernel set for one target into TRITON_CACHE_DIR and say, per kernel, whether Triton hit its cache.

Imports Triton: run under the Triton venv, with TRITON_CACHE_DIR set before the import (the CLI does this).
Hit or miss is what Triton itself reports to its compilation listener (`cache_hit`, set in triton.compile when
the kernel's group resolves), timed around the call.

`predict_all` says the same without compiling or writing anything: it computes each kernel's key the way
triton.compile does in 3.9.0 (the `compile` function's own steps, through Triton's internal `get_cache_key` and
`get_cache_invalidating_env_vars`, so it must be checked again when the pin moves) and reads the group file there.
"""

import hashlib
import os
import time

import triton
from triton.backends.compiler import GPUTarget

from . import layout
from .kernels import kernel_set
from .targets import DEFAULT_SET


def compile_each(backend, arch, warp_size, only=None, keep_going=False, set_name=DEFAULT_SET):
    """Yields one dict per kernel of the set `set_name` as it is compiled: label, name, hash, hit (Triton's own
    verdict), seconds. `only` limits by label. With keep_going, a compile that raises yields label, error and
    seconds instead (hit None: the listener is not called), and the next kernel is compiled: a warm-up reports
    every kernel, and Triton raises when its cache directory is read-only."""
    seen = {}

    def listener(src, metadata, metadata_group, times, cache_hit):
        seen["hit"] = bool(cache_hit)

    target = GPUTarget(backend, arch, warp_size)
    previous = triton.knobs.compilation.listener
    triton.knobs.compilation.listener = listener
    try:
        for spec in kernel_set(set_name):
            if only and spec.label not in only:
                continue
            seen.clear()
            started = time.perf_counter()
            try:
                compiled = triton.compile(spec.source(), target=target, options=dict(spec.options))
            except Exception as error:
                if not keep_going:
                    raise
                yield {"label": spec.label, "hit": None, "error": "%s: %s" % (type(error).__name__, error),
                       "seconds": round(time.perf_counter() - started, 4)}
                continue
            seconds = time.perf_counter() - started
            yield {"label": spec.label, "name": compiled.name, "hash": compiled.hash, "hit": seen.get("hit"),
                   "seconds": round(seconds, 4)}
    finally:
        triton.knobs.compilation.listener = previous


def compile_all(backend, arch, warp_size, only=None, set_name=DEFAULT_SET):
    """compile_each's dicts as a list; the first compile that raises ends it."""
    return list(compile_each(backend, arch, warp_size, only, set_name=set_name))


def triton_version():
    return triton.__version__


def triton_key_digest():
    """sha256 of `triton_key()` (Triton's version and the hash of its compiler sources and libtriton), which enters
    every kernel's key: two installs with one version number but other files miss each other's caches."""
    from triton.runtime.cache import triton_key

    return hashlib.sha256(triton_key().encode("utf-8")).hexdigest()


# Why a kernel would be compiled, by its group's state (layout): None when Triton would hit.
MISS_REASONS = {
    None: "no group file for this kernel's key: not in the cache (another Triton build, option, variable or source)",
    layout.DANGLING: "the group names files that do not exist: the cache was moved from where it was compiled",
    layout.BROKEN: "the group file is unreadable",
}


def _key_dir(spec, target):
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import make_backend
    from triton.runtime.cache import get_cache_key

    backend = make_backend(target)
    source = spec.source()
    options = backend.parse_options(dict(dict(spec.options), **source.parse_options()))
    key = get_cache_key(source, backend, options, env_vars=get_cache_invalidating_env_vars())
    kernel_hash = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return kernel_hash, layout.hash_directory_name(kernel_hash), source.name[:150]


def predict_all(backend, arch, warp_size, cache_dir, only=None, set_name=DEFAULT_SET):
    """One dict per kernel of the set: label, hash, hash_dir, state (layout's, None when absent), hit, reason. Writes
    nothing."""
    target = GPUTarget(backend, arch, warp_size)
    results = []
    for spec in kernel_set(set_name):
        if only and spec.label not in only:
            continue
        kernel_hash, hash_dir, name = _key_dir(spec, target)
        kernel_dir = os.path.join(cache_dir, hash_dir)
        group_path = os.path.join(kernel_dir, layout.GROUP_PREFIX + name + ".json")
        state = None
        if os.path.exists(group_path):
            try:
                with open(group_path) as handle:
                    children = layout.parse_group(handle.read())
                state = layout.group_state(children, kernel_dir, os.path.exists)
            except (OSError, layout.LayoutError):
                state = layout.BROKEN
            if state != layout.BROKEN and name + ".json" not in children:
                state = layout.BROKEN
        hit = state in (layout.RESOLVES, layout.FOREIGN)
        reason = None if hit else MISS_REASONS[state]
        if state == layout.FOREIGN:
            reason = "hit, but the group points outside this directory: Triton reads another copy's files"
        results.append({"label": spec.label, "name": name, "hash": kernel_hash, "hash_dir": hash_dir, "state": state,
                        "hit": hit, "reason": reason})
    return results
