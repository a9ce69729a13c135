"""The fixed kernel sets a model's warm-up would compile: a vector add, a row softmax and matmul tile configurations.

Two sets (targets.KERNEL_SETS): `small`, six kernels, what the tests' caches hold; `warm-start`, 56 configurations
of the same three kernels (block sizes x dtypes, a matmul tile grid), what the warm-start benchmark and the demo
compile.

Imports Triton: run under the Triton venv. Each KernelSpec names a jitted function, the types of its arguments,
its compile-time constants and its compile options; `source()` makes the ASTSource triton.compile takes.
"""

from dataclasses import dataclass, field

import triton
import triton.language as tl
from triton.compiler import ASTSource

from .targets import DEFAULT_SET, KERNEL_SETS


@triton.jit
def vector_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    total = tl.load(x_ptr + offsets, mask=inside) + tl.load(y_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, total, mask=inside)


@triton.jit
def row_softmax(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    values = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
    shifted = values - tl.max(values, axis=0)
    exponent = tl.exp(shifted)
    tl.store(out_ptr + row * out_stride + cols, exponent / tl.sum(exponent, axis=0), mask=cols < n_cols)


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    a_tile = a_ptr + rows[:, None] * stride_am + depth[None, :] * stride_ak
    b_tile = b_ptr + depth[:, None] * stride_bk + cols[None, :] * stride_bn
    accumulator = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        remaining = K - step * BLOCK_K
        a = tl.load(a_tile, mask=depth[None, :] < remaining, other=0.0)
        b = tl.load(b_tile, mask=depth[:, None] < remaining, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_tile += BLOCK_K * stride_ak
        b_tile += BLOCK_K * stride_bk
    inside = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, accumulator.to(tl.float16), mask=inside)


@dataclass(frozen=True)
class KernelSpec:
    """One compile: `label` names it in reports (the jitted function's name is shared by its configurations)."""

    label: str
    fn: object
    signature: dict
    constexprs: dict
    options: dict = field(default_factory=dict)

    def source(self):
        signature = dict(self.signature, **{name: "constexpr" for name in self.constexprs})
        return ASTSource(fn=self.fn, signature=signature, constexprs=dict(self.constexprs))


_MATMUL_SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                     "stride_am": "i32", "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32",
                     "stride_cm": "i32", "stride_cn": "i32"}

# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): tile choices an autotuner would try for a decoder's GEMMs.
MATMUL_CONFIGS = ((128, 128, 32, 8, 3), (64, 128, 32, 4, 4), (128, 64, 64, 4, 3), (64, 64, 32, 4, 2))


def _small():
    specs = [
        KernelSpec("vector_add", vector_add, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                   {"BLOCK": 1024}, {"num_warps": 4}),
        KernelSpec("row_softmax", row_softmax, {"out_ptr": "*fp32", "in_ptr": "*fp32", "in_stride": "i32",
                                                "out_stride": "i32", "n_cols": "i32"}, {"BLOCK": 1024},
                   {"num_warps": 8}),
    ]
    for block_m, block_n, block_k, warps, stages in MATMUL_CONFIGS:
        specs.append(KernelSpec("matmul_%dx%dx%d_w%d_s%d" % (block_m, block_n, block_k, warps, stages), matmul,
                                _MATMUL_SIGNATURE, {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k},
                                {"num_warps": warps, "num_stages": stages}))
    return specs


# The warm-start set's axes: what a serving stack compiles for a few layer shapes and precisions.
ELEMENTWISE_DTYPES = ("fp16", "bf16", "fp32")
ELEMENTWISE_BLOCKS = (256, 512, 1024, 2048)
MATMUL_DTYPES = ("fp16", "bf16")


def _matmul_grid():
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages): the 16 tiles of an autotuner's grid, 8 warps for the
    largest tile."""
    return [(m, n, k, 8 if m * n > 64 * 128 else 4, stages)
            for m in (64, 128) for n in (64, 128) for k in (32, 64) for stages in (2, 3)]


def _warm_start():
    specs = []
    for dtype in ELEMENTWISE_DTYPES:
        pointer = "*" + dtype
        for block in ELEMENTWISE_BLOCKS:
            warps = 8 if block >= 2048 else 4
            specs.append(KernelSpec("vector_add_%s_b%d" % (dtype, block), vector_add,
                                    {"x_ptr": pointer, "y_ptr": pointer, "out_ptr": pointer, "n": "i32"},
                                    {"BLOCK": block}, {"num_warps": warps}))
            specs.append(KernelSpec("row_softmax_%s_b%d" % (dtype, block), row_softmax,
                                    {"out_ptr": pointer, "in_ptr": pointer, "in_stride": "i32", "out_stride": "i32",
                                     "n_cols": "i32"}, {"BLOCK": block}, {"num_warps": warps}))
    for dtype in MATMUL_DTYPES:
        signature = dict(_MATMUL_SIGNATURE, a_ptr="*" + dtype, b_ptr="*" + dtype)
        for block_m, block_n, block_k, warps, stages in _matmul_grid():
            specs.append(KernelSpec("matmul_%s_%dx%dx%d_w%d_s%d" % (dtype, block_m, block_n, block_k, warps, stages),
                                    matmul, signature, {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k},
                                    {"num_warps": warps, "num_stages": stages}))
    return specs


_BUILDERS = dict(zip(KERNEL_SETS, (_small, _warm_start)))


def kernel_set(name=DEFAULT_SET):
    """The named set's kernels (targets.KERNEL_SETS), in compile order."""
    if name not in _BUILDERS:
        raise ValueError("no kernel set %r; the sets are %s" % (name, ", ".join(KERNEL_SETS)))
    return _BUILDERS[name]()
