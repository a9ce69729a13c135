"""CLI: python -m tools.triton_kernels {compile,report,predict,warmup,inspect,relocate,overlay} (from the checkout).

compile, report, predict and warmup import Triton (run them with the Triton venv's python); the others do not. Each of
the four takes --set: the kernel set (kernels.py: small, the default, or warm-start; warmup's default is
$GKM_WARMUP_SET, else small).
  compile  --target cuda:90 --cache-dir DIR   compile the kernel set into DIR; per kernel: hit/miss and seconds
  report   --target cuda:90 --cache-dir DIR   the same, with one line per kernel on stderr
  predict  --target cuda:90 --cache-dir DIR   per kernel, whether a compile would hit and why not, writing nothing
  warmup   [--target cuda:90]                 what a model's warm-up does, into TRITON_CACHE_DIR as set (the workload
                                               image's entry point): a JSON line per kernel as it is compiled, then a
                                               summary; the target from $GKM_WARMUP_TARGET by default; exit 1 on errors
  inspect  DIR                                 each kernel's files, metadata facts and group state (JSON)
  relocate SOURCE DESTINATION                  copy a cache and re-point its group files at DESTINATION
  overlay  SOURCE DESTINATION                  only the group files into DESTINATION, pointing at SOURCE's files
"""

import argparse
import json
import os
import sys
import time

from . import layout, relocate, scan
from .targets import DEFAULT_SET, KERNEL_SETS, parse_target


def _compile(args):
    os.environ["TRITON_CACHE_DIR"] = os.path.abspath(args.cache_dir)
    # TRITON_DEFAULT_FP_FUSION and Triton's other cache-invalidating variables are left as the caller has them:
    # set, they enter every kernel's cache key (and its metadata), so a pod without them would miss.
    started = time.perf_counter()
    from . import compile_run  # Triton reads TRITON_CACHE_DIR through its knobs, after the variable is set

    imported = time.perf_counter() - started
    backend, arch, warp_size = parse_target(args.target)
    kernels = compile_run.compile_all(backend, arch, warp_size, only=set(args.only or ()), set_name=args.set)
    hits = sum(1 for k in kernels if k["hit"])
    return {"target": {"backend": backend, "arch": arch, "warp_size": warp_size}, "kernel_set": args.set,
            "cache_dir": os.environ["TRITON_CACHE_DIR"], "triton_version": compile_run.triton_version(),
            "triton_key": compile_run.triton_key_digest(), "import_seconds": round(imported, 4),
            "kernels": kernels, "hits": hits, "misses": len(kernels) - hits,
            "compile_seconds": round(sum(k["seconds"] for k in kernels), 4)}


def _warmup(args):
    """Prints a line per kernel (kernel, result: hit, miss or error, seconds) and a summary; False when one failed.

    The summary's started_at and ready_at (seconds since the epoch, this machine's clock) bracket the warm-up from
    before Triton's import to the last kernel ready: a benchmark on the same clock times a pod's start to them."""
    started_at = time.time()
    started = time.perf_counter()
    from . import compile_run

    imported = time.perf_counter() - started
    backend, arch, warp_size = parse_target(args.target)
    counts = {"hit": 0, "miss": 0, "error": 0}
    seconds = 0.0
    for kernel in compile_run.compile_each(backend, arch, warp_size, only=set(args.only or ()), keep_going=True,
                                           set_name=args.set):
        result = "error" if "error" in kernel else "hit" if kernel["hit"] else "miss"
        counts[result] += 1
        seconds += kernel["seconds"]
        line = {"kernel": kernel["label"], "result": result, "seconds": kernel["seconds"]}
        line.update((key, kernel[key]) for key in ("hash", "error") if key in kernel)
        print(json.dumps(line, sort_keys=True), flush=True)
    print(json.dumps({"summary": True, "hits": counts["hit"], "misses": counts["miss"], "errors": counts["error"],
                      "seconds": round(seconds, 4), "import_seconds": round(imported, 4), "target": args.target,
                      "kernel_set": args.set, "started_at": round(started_at, 3), "ready_at": round(time.time(), 3),
                      "cache_dir": os.environ.get("TRITON_CACHE_DIR"),
                      "triton_version": compile_run.triton_version()}, sort_keys=True))
    return not counts["error"]


def _predict(args):
    from . import compile_run

    backend, arch, warp_size = parse_target(args.target)
    kernels = compile_run.predict_all(backend, arch, warp_size, os.path.abspath(args.cache_dir),
                                      only=set(args.only or ()), set_name=args.set)
    hits = sum(1 for k in kernels if k["hit"])
    return {"target": {"backend": backend, "arch": arch, "warp_size": warp_size}, "kernel_set": args.set,
            "cache_dir": os.path.abspath(args.cache_dir), "triton_version": compile_run.triton_version(),
            "kernels": kernels, "hits": hits, "misses": len(kernels) - hits}


def _inspect(args):
    kernels = scan.scan(args.cache_dir)
    facts = [k["facts"] for k in kernels if k["facts"]]
    return {"cache_dir": os.path.abspath(args.cache_dir), "kernels": kernels,
            "states": {s: sum(1 for k in kernels if k["state"] == s) for s in sorted({k["state"] for k in kernels})},
            "triton_versions": layout.triton_versions(facts)}


def _relocate(args):
    started = time.perf_counter()
    work = relocate.overlay if args.command == "overlay" else relocate.relocate
    copied = work(args.source, args.destination)
    copied["seconds"] = round(time.perf_counter() - started, 4)
    return copied


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.triton_kernels", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("compile", "report", "predict"):
        command = commands.add_parser(name)
        command.add_argument("--target", required=True, help="cuda:90, hip:gfx90a, optionally :<warp size>")
        command.add_argument("--cache-dir", required=True)
        command.add_argument("--only", action="append", help="a kernel label; repeat for several")
        command.add_argument("--set", default=DEFAULT_SET, choices=KERNEL_SETS, help="the kernel set (kernels.py)")
    warmup = commands.add_parser("warmup")
    warmup.add_argument("--target", default=os.environ.get("GKM_WARMUP_TARGET"),
                        required="GKM_WARMUP_TARGET" not in os.environ, help="cuda:90, hip:gfx90a (default: "
                        "$GKM_WARMUP_TARGET)")
    warmup.add_argument("--only", action="append", help="a kernel label; repeat for several")
    warmup.add_argument("--set", default=os.environ.get("GKM_WARMUP_SET", DEFAULT_SET), choices=KERNEL_SETS,
                        help="the kernel set (default: $GKM_WARMUP_SET, else %s)" % DEFAULT_SET)
    commands.add_parser("inspect").add_argument("cache_dir")
    for name in ("relocate", "overlay"):
        command = commands.add_parser(name)
        command.add_argument("source")
        command.add_argument("destination")
    args = parser.parse_args(argv)
    if args.command == "warmup":
        sys.exit(0 if _warmup(args) else 1)
    if args.command in ("compile", "report"):
        result = _compile(args)
        if args.command == "report":
            for kernel in result["kernels"]:
                print("%-28s %-4s %8.3f s" % (kernel["label"], "hit" if kernel["hit"] else "MISS", kernel["seconds"]),
                      file=sys.stderr)
    elif args.command == "predict":
        result = _predict(args)
    elif args.command == "inspect":
        result = _inspect(args)
    else:
        result = _relocate(args)
    json.dump(result, sys.stdout, indent=2, sort_keys=True)
    print()


if __name__ == "__main__":
    main()
