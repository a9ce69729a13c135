"""Real Triton kernel caches for GKM's tests, samples and benchmarks (issue 32).

Modules that import Triton (`kernels`, `compile_run`) run under the Triton venv (`make venv-triton`, `venv.py`);
`layout`, `targets`, `scan`, `relocate`, `store` and `image` are plain Python and run anywhere, so the tests and
the image builder read a cache without Triton (`store` runs the venv's python in a subprocess to compile).
"""
