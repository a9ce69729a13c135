"""Compile targets named the way the CLI takes them: `cuda:90` or `hip:gfx90a`, optionally `:<warp size>`; and the
kernel sets' names (their kernels are in kernels.py, which imports Triton: the CLI and the store name a set without it).
"""

KERNEL_SETS = ("small", "warm-start")
DEFAULT_SET = "small"
DEFAULT_WARP_SIZE = {"cuda": 32, "hip": 64}


def parse_target(text):
    """`cuda:90` -> ("cuda", 90, 32); `hip:gfx90a` -> ("hip", "gfx90a", 64); a third field sets the warp size."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or parts[0] not in DEFAULT_WARP_SIZE or not parts[1]:
        raise ValueError("a target is cuda:<capability> or hip:<gfx arch>, optionally :<warp size>; got %r" % text)
    backend, arch = parts[0], parts[1]
    if backend == "cuda":
        if not arch.isdigit():
            raise ValueError("a CUDA target's arch is its compute capability as a number (90), got %r" % arch)
        arch = int(arch)
    warp_size = int(parts[2]) if len(parts) == 3 else DEFAULT_WARP_SIZE[backend]
    return backend, arch, warp_size


def target_name(backend, arch, warp_size=None):
    """The inverse of parse_target, without the warp size when it is the backend's default."""
    if warp_size is None or warp_size == DEFAULT_WARP_SIZE.get(backend):
        return "%s:%s" % (backend, arch)
    return "%s:%s:%d" % (backend, arch, warp_size)
