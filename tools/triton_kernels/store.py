"""Compiled Triton caches kept by the hash of what made them, so a test run compiles a target once per machine.

`compiled_cache("hip:gfx90a")` returns a directory holding Triton's own cache of a kernel set (targets.KERNEL_SETS;
the small one unless `kernel_set` names another) for that target
(`cache/`, as `TRITON_CACHE_DIR` left it) and `build.json` (what the compile reported: Triton's version, the
digest of its `triton_key()`, each kernel's hash and seconds). The key hashes the inputs of a compile: the sources
of this package that decide what is compiled and how (kernels, compile_run, targets, the CLI), the pin in
requirements/triton.txt, the target, the set, and the Triton install the python runs from (its venv's directory,
resolved: a venv's bin/python links to the base interpreter, which every venv of that Python shares), so
$GKM_TRITON_PY or another venv's python (requirements/triton-previous.txt's) compiles apart. The store is
${XDG_CACHE_HOME:-~/.cache}/gkm-cluster/triton-caches/.

The compile runs the Triton venv's python in a fresh process with Triton's cache-invalidating variables removed
(set, they would enter every key), under a lock, so pytest-xdist workers and parallel lanes compile once. Nothing
here imports Triton.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time

from .targets import DEFAULT_SET, parse_target, target_name
from .venv import HINT, ROOT, triton_python

# The files whose content decides the compiled bytes (the layout readers do not).
INPUTS = ("tools/triton_kernels/kernels.py", "tools/triton_kernels/compile_run.py",
          "tools/triton_kernels/targets.py", "tools/triton_kernels/__main__.py", "requirements/triton.txt")


class StoreError(RuntimeError):
    """No Triton venv, or the compile failed."""


def store_root():
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "gkm-cluster",
                        "triton-caches")


def install_directory(python):
    """The directory of the install a python runs from, resolved: its venv's (bin/python's parent's parent), where
    the link .venv-triton leads, not the base interpreter a venv's python links to."""
    return os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(python))))


def inputs_key(target, python, kernel_set=DEFAULT_SET):
    """12 hex digits of sha256 over the INPUTS' bytes, the target's canonical name, the set and the python's
    install_directory."""
    digest = hashlib.sha256()
    for relative in INPUTS:
        digest.update(relative.encode() + b"\0")
        with open(os.path.join(ROOT, relative), "rb") as handle:
            digest.update(handle.read())
    digest.update(b"\0" + target.encode() + b"\0" + kernel_set.encode() + b"\0" + install_directory(python).encode())
    return digest.hexdigest()[:12]


def entry_name(target, python, kernel_set=DEFAULT_SET):
    """The store directory's name: the target readable (cuda-90, hip-gfx90a), the set unless the default, then the
    inputs key."""
    readable = target.replace(":", "-") + ("" if kernel_set == DEFAULT_SET else "-" + kernel_set)
    return "%s_%s" % (readable, inputs_key(target, python, kernel_set))


def _compile(python, target, cache_dir, kernel_set):
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    return subprocess.run([python, "-m", "tools.triton_kernels", "compile", "--target", target, "--set", kernel_set,
                           "--cache-dir", cache_dir], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800, check=False)


def compiled_cache(target, python=None, root=None, kernel_set=DEFAULT_SET):
    """The store directory for `target` and `kernel_set` (compiling it first when absent) and whether it was reused.

    Returns (directory, {"reused": bool, "seconds": wall time of this call, "build": build.json's content}).
    """
    python = python or triton_python()
    if python is None:
        raise StoreError("no Triton venv: " + HINT)
    target = target_name(*parse_target(target))
    root = root or store_root()
    directory = os.path.join(root, entry_name(target, python, kernel_set))
    started = time.perf_counter()
    os.makedirs(root, exist_ok=True)
    with open(directory + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reused = os.path.exists(os.path.join(directory, "build.json"))
        if not reused:
            # The cache is compiled where it stays: its group files name this path. build.json comes last, so a
            # compile cut short is started again from nothing.
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(directory)
            os.makedirs(directory)
            run = _compile(python, target, os.path.join(directory, "cache"), kernel_set)
            if run.returncode != 0:
                raise StoreError("compiling %s failed: %s" % (target, run.stderr[-2000:]))
            report = json.loads(run.stdout)
            build = {key: report[key] for key in ("target", "kernel_set", "triton_version", "triton_key", "kernels",
                                                  "compile_seconds", "import_seconds")}
            with open(os.path.join(directory, "build.json.tmp"), "w") as handle:
                json.dump(build, handle, indent=2, sort_keys=True)
            os.replace(os.path.join(directory, "build.json.tmp"), os.path.join(directory, "build.json"))
        with open(os.path.join(directory, "build.json")) as handle:
            build = json.load(handle)
    return directory, {"reused": reused, "seconds": round(time.perf_counter() - started, 4), "build": build}
