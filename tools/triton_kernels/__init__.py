"""Real Triton kernel caches for GKM's tests and benchmarks (issue 32 groundwork).

Modules that import Triton (`kernels`, `compile_run`) run under the Triton venv (`/work/.venv-triton`); `layout`,
`targets` and `relocate` are plain Python and run anywhere, so the unit tests can read a cache without Triton.
"""
