"""Real Triton caches: cold and warm compile per target, the miss a moved cache causes, and the cost of the fixes.

Each compile runs `python -m tools.triton_kernels compile` in a fresh process of the Triton venv ($GKM_TRITON_PY,
default the checkout's .venv-triton: make venv-triton), as a pod's warm-up would: the process start and Triton's
import are reported apart from the kernels' compile seconds. No GPU is used: Triton compiles ahead of time for the
target.

Per target (cuda:90, hip:gfx90a):
  cold      an empty cache; median of $GKM_BENCH_REPEATS (default 3) fresh caches
  warm      the same cache again (hits); median of the repeats
  moved     the cache renamed: its group files name the old path, every kernel misses
  relocated the moved cache copied to a pod-local directory with its group files rewritten: hits; copy ms and bytes
  rewritten the group files rewritten where the cache already is (a writable copy): ms
  overlay   only the group files written to a pod-local directory, pointing at the moved cache's files: hits; ms
  canonical the cache back at the path it was compiled under (a mount at the recorded path): hits
  foreign   a copy elsewhere while the compiled path still exists: Triton hits, but reads the other path's files
and for cuda:90: the copy and rewrite of a cache $GKM_BENCH_SCALE (default 50) times as large (the compiled kernel
directories repeated under other directory names, as a model with hundreds of kernels would have); and the same
cache compiled again with TRITON_DEFAULT_FP_FUSION=1 set (Triton's default value): every kernel misses, since a
cache-invalidating variable that is set enters the key.
Writes bench/results/triton_kernels.json.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tools.triton_kernels import layout, relocate, scan  # noqa: E402
from tools.triton_kernels.venv import HINT, triton_python  # noqa: E402

TRITON_PY = triton_python()
REPEATS = int(os.environ.get("GKM_BENCH_REPEATS", "3"))
TARGETS = ("cuda:90", "hip:gfx90a")
RESULT = os.path.join(ROOT, "bench", "results", "triton_kernels.json")


def compile_in(cache_dir, target, extra_env=None):
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    env.update(extra_env or {})
    started = time.perf_counter()
    run = subprocess.run([TRITON_PY, "-m", "tools.triton_kernels", "compile", "--target", target,
                          "--cache-dir", cache_dir], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit("compile for %s in %s failed:\n%s" % (target, cache_dir, run.stderr[-3000:]))
    result = json.loads(run.stdout)
    result["process_seconds"] = round(wall, 3)
    return result


def brief(result):
    """A compile run without its per-kernel list, with the first kernel apart (it carries Triton's start)."""
    kernels = result["kernels"]
    return {"hits": result["hits"], "misses": result["misses"], "compile_seconds": result["compile_seconds"],
            "first_kernel_seconds": kernels[0]["seconds"],
            "other_kernels_seconds": round(sum(k["seconds"] for k in kernels[1:]), 4),
            "import_seconds": result["import_seconds"], "process_seconds": result["process_seconds"]}


def states(cache_dir):
    found = {}
    for kernel in scan.scan(cache_dir):
        found[kernel["state"]] = found.get(kernel["state"], 0) + 1
    return found


def median_of(runs, key):
    return round(statistics.median(run[key] for run in runs), 4)


def bench_target(work, target):
    slug = target.replace(":", "-")
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    colds, warms = [], []
    for repeat in range(REPEATS):
        compiled = os.path.join(work, "%s-%d" % (slug, repeat))
        colds.append(brief(compile_in(compiled, target)))
        warms.append(brief(compile_in(compiled, target)))
        if repeat:
            shutil.rmtree(compiled)
    compiled = os.path.join(work, "%s-0" % slug)
    last = compile_in(compiled, target)
    per_kernel = [{"label": k["label"], "hit": k["hit"]} for k in last["kernels"]]
    facts = [k["facts"] for k in scan.scan(compiled) if k["facts"]]
    files, size = scan.tree_bytes(compiled)

    moved = os.path.join(work, "%s-moved" % slug)
    os.rename(compiled, moved)
    moved_states = states(moved)
    scratch = os.path.join(work, "%s-moved-compiled" % slug)
    shutil.copytree(moved, scratch)
    moved_run = brief(compile_in(scratch, target))

    local = os.path.join(work, "%s-pod-local" % slug)
    started = time.perf_counter()
    copied = relocate.relocate(moved, local)
    relocate_ms = (time.perf_counter() - started) * 1000
    relocated_states = states(local)
    relocated_run = brief(compile_in(local, target))

    in_place = os.path.join(work, "%s-in-place" % slug)
    shutil.copytree(moved, in_place)
    started = time.perf_counter()
    rewritten = relocate.rewrite_in_place(in_place)
    rewrite_ms = (time.perf_counter() - started) * 1000

    groups_only = os.path.join(work, "%s-overlay" % slug)
    started = time.perf_counter()
    overlaid = relocate.overlay(moved, groups_only)
    overlay_ms = (time.perf_counter() - started) * 1000
    overlay_run = brief(compile_in(groups_only, target))

    foreign = os.path.join(work, "%s-foreign" % slug)
    shutil.copytree(moved, foreign)
    os.rename(moved, compiled)
    foreign_states = states(foreign)
    canonical_run = brief(compile_in(compiled, target))

    return {
        "load_average_at_start": load_at_start,
        "kernels": len(per_kernel), "kernel_labels": [k["label"] for k in per_kernel],
        "cache_files": files, "cache_bytes": size, "targets": layout.summary_targets(facts),
        "triton_versions": layout.triton_versions(facts),
        "cold": {"median_compile_seconds": median_of(colds, "compile_seconds"),
                 "median_process_seconds": median_of(colds, "process_seconds"), "runs": colds},
        "warm": {"median_compile_seconds": median_of(warms, "compile_seconds"),
                 "median_first_kernel_seconds": median_of(warms, "first_kernel_seconds"),
                 "median_other_kernels_seconds": median_of(warms, "other_kernels_seconds"),
                 "median_process_seconds": median_of(warms, "process_seconds"),
                 "all_hits": all(run["misses"] == 0 for run in warms), "runs": warms},
        "moved": {"group_states": moved_states, "run": moved_run},
        "relocated": {"copy_and_rewrite_ms": round(relocate_ms, 2), "files": copied["files"],
                      "bytes": copied["bytes"], "groups_rewritten": copied["groups"],
                      "group_states": relocated_states, "run": relocated_run},
        "rewritten_in_place": {"rewrite_ms": round(rewrite_ms, 2), "groups_rewritten": rewritten,
                               "group_states": states(in_place)},
        "overlay": {"write_ms": round(overlay_ms, 2), "groups": overlaid["groups"], "bytes": overlaid["bytes"],
                    "run": overlay_run},
        "foreign_copy": {"group_states": foreign_states},
        "canonical": {"run": canonical_run},
        "_compiled": compiled,
    }


def scaled_relocation(work, compiled, times):
    """Copy+rewrite of `times` copies of the compiled cache's kernel directories: the cost at a model's size."""
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    big = os.path.join(work, "scaled")
    os.makedirs(big)
    for index in range(times):
        for entry in os.listdir(compiled):
            source = os.path.join(compiled, entry)
            copy = os.path.join(big, "%s%03d" % (entry[:-3], index))
            shutil.copytree(source, copy)
    relocate.rewrite_in_place(big)
    files, size = scan.tree_bytes(big)
    copies, overlays = [], []
    for repeat in range(REPEATS):
        destination = os.path.join(work, "scaled-pod-local-%d" % repeat)
        started = time.perf_counter()
        copied = relocate.relocate(big, destination)
        copies.append(time.perf_counter() - started)
        resolved = states(destination)
        shutil.rmtree(destination)
        groups_only = os.path.join(work, "scaled-overlay-%d" % repeat)
        started = time.perf_counter()
        overlaid = relocate.overlay(big, groups_only)
        overlays.append(time.perf_counter() - started)
        shutil.rmtree(groups_only)
    shutil.rmtree(big)
    seconds = statistics.median(copies)
    return {"load_average_at_start": load_at_start,
            "kernels": sum(resolved.values()), "files": files, "bytes": size, "group_states": resolved,
            "groups_rewritten": copied["groups"], "copy_and_rewrite_ms": round(seconds * 1000, 1),
            "copy_and_rewrite_runs_ms": [round(x * 1000, 1) for x in copies],
            "mb_per_second": round(size / 1e6 / seconds, 1),
            "overlay_ms": round(statistics.median(overlays) * 1000, 1), "overlay_bytes": overlaid["bytes"],
            "overlay_runs_ms": [round(x * 1000, 1) for x in overlays]}


def main():
    if TRITON_PY is None:
        sys.exit("no Triton venv: " + HINT)
    load_before = os.getloadavg()
    work = tempfile.mkdtemp(prefix="gkm-triton-bench-")
    try:
        results = {target: bench_target(work, target) for target in TARGETS}
        cuda = results["cuda:90"].pop("_compiled")
        results["hip:gfx90a"].pop("_compiled")
        scaled = scaled_relocation(work, cuda, int(os.environ.get("GKM_BENCH_SCALE", "50")))
        fusion = brief(compile_in(cuda, "cuda:90", {"TRITON_DEFAULT_FP_FUSION": "1"}))
        version = subprocess.run([TRITON_PY, "-c", "import triton; print(triton.__version__)"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    document = {
        "triton_version": version, "repeats": REPEATS, "work_dir_filesystem": "/tmp on the root disk",
        "load_average": {"before": [round(x, 2) for x in load_before],
                         "after": [round(x, 2) for x in os.getloadavg()]},
        "cpus": os.cpu_count(), "targets": results, "scaled_relocation_cuda_90": scaled,
        "env_var_changes_key": {"variable": "TRITON_DEFAULT_FP_FUSION=1 (Triton's default value)",
                                "target": "cuda:90", "run": fusion},
    }
    os.makedirs(os.path.dirname(RESULT), exist_ok=True)
    with open(RESULT, "w") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.write("\n")
    for target, result in results.items():
        print("%s: %d kernels, %d bytes; cold %.2f s, warm %.3f s (first %.3f s), moved %s, relocated %.1f ms -> %s,"
              " overlay %.1f ms -> %s, canonical %s" % (target, result["kernels"], result["cache_bytes"],
                                 result["cold"]["median_compile_seconds"], result["warm"]["median_compile_seconds"],
                                 result["warm"]["median_first_kernel_seconds"], result["moved"]["run"]["misses"],
                                 result["relocated"]["copy_and_rewrite_ms"], result["relocated"]["run"]["hits"],
                                 result["overlay"]["write_ms"], result["overlay"]["run"]["hits"],
                                 result["canonical"]["run"]["hits"]))
    print("scaled: %(kernels)d kernels, %(bytes)d bytes copied and rewritten in %(copy_and_rewrite_ms).1f ms,"
          " overlay %(overlay_bytes)d bytes in %(overlay_ms).1f ms" % scaled)
    print("TRITON_DEFAULT_FP_FUSION=1: %d misses of %d" % (fusion["misses"], fusion["hits"] + fusion["misses"]))
    print("wrote", RESULT)


if __name__ == "__main__":
    main()
