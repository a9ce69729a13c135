"""Compile the kernel set for one target into TRITON_CACHE_DIR and say, per kernel, whether Triton hit its cache.

Imports Triton: run under the Triton venv, with TRITON_CACHE_DIR set before the import (the CLI does this).
Hit or miss is what Triton itself reports to its compilation listener (`cache_hit`, set in triton.compile when
the kernel's group resolves), timed around the call.
"""

import time

import triton
from triton.backends.compiler import GPUTarget

from .kernels import kernel_set


def compile_all(backend, arch, warp_size, only=None):
    """One dict per kernel: label, name, hash, hit (Triton's own verdict), seconds. `only` limits by label."""
    seen = {}

    def listener(src, metadata, metadata_group, times, cache_hit):
        seen["hit"] = bool(cache_hit)

    target = GPUTarget(backend, arch, warp_size)
    previous = triton.knobs.compilation.listener
    triton.knobs.compilation.listener = listener
    results = []
    try:
        for spec in kernel_set():
            if only and spec.label not in only:
                continue
            seen.clear()
            started = time.perf_counter()
            compiled = triton.compile(spec.source(), target=target, options=dict(spec.options))
            seconds = time.perf_counter() - started
            results.append({"label": spec.label, "name": compiled.name, "hash": compiled.hash,
                            "hit": seen.get("hit"), "seconds": round(seconds, 4)})
    finally:
        triton.knobs.compilation.listener = previous
    return results


def triton_version():
    return triton.__version__
