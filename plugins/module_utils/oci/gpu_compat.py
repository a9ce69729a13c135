# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPUs a kernel cache can run on (MCV's rule).

A GPU matches a cache target when backend, arch and warp size are all equal; for CUDA the arch
is compared without a leading "sm_" ("sm_90" and "90" are the same GPU).
"""

from __future__ import absolute_import, division, print_function

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    GPU_ARCH_LABEL,
    GPU_BACKEND_LABEL,
    GPU_WARP_SIZE_LABEL,
)

__metaclass__ = type


class GPUSpecError(ValueError):
    """A GPU description lacks a field or has an unusable value."""


def normalize_gpu(gpu):
    """{backend, arch, warp_size} with backend lower-cased, cuda arch without sm_, warp_size an int."""
    missing = [key for key in ("backend", "arch", "warp_size") if gpu.get(key) in (None, "")]
    if missing:
        raise GPUSpecError("GPU %r lacks %s (each GPU needs backend, arch and warp_size)" % (gpu, ", ".join(missing)))
    backend = str(gpu["backend"]).strip().lower()
    arch = str(gpu["arch"]).strip()
    if backend == "cuda" and arch.lower().startswith("sm_"):
        arch = arch[3:]
    try:
        warp_size = int(gpu["warp_size"])
    except (TypeError, ValueError):
        raise GPUSpecError("GPU %r: warp_size must be a number" % (gpu,)) from None
    return {"backend": backend, "arch": arch, "warp_size": warp_size}


def gpu_matches(target, gpu):
    """True when the GPU can run kernels built for the target."""
    return normalize_gpu(target) == normalize_gpu(gpu)


def gpus_compatible(targets, gpus):
    """Split `gpus` into (compatible, incompatible) lists of normalized GPUs for the cache `targets`."""
    normalized_targets = [normalize_gpu(target) for target in targets]
    compatible, incompatible = [], []
    for gpu in gpus:
        normalized = normalize_gpu(gpu)
        (compatible if normalized in normalized_targets else incompatible).append(normalized)
    return compatible, incompatible


def gpus_from_node_labels(labels):
    """The GPUs a node advertises through gkm.io/gpu-* labels: [] when the node has none."""
    labels = labels or {}
    if GPU_BACKEND_LABEL not in labels:
        return []
    gpu = {
        "backend": labels.get(GPU_BACKEND_LABEL),
        "arch": labels.get(GPU_ARCH_LABEL),
        "warp_size": labels.get(GPU_WARP_SIZE_LABEL),
    }
    missing = [key for key, value in gpu.items() if value in (None, "")]
    if missing:
        raise GPUSpecError("node labels give %s but not %s" % (GPU_BACKEND_LABEL, ", ".join(
            {"arch": GPU_ARCH_LABEL, "warp_size": GPU_WARP_SIZE_LABEL}[key] for key in missing)))
    return [normalize_gpu(gpu)]
