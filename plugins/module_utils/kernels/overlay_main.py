# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ENTRY POINT of a pod's kernel-overlay step (its init container, any uid; the tools image carries it).

    python3 -m ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay_main /cache /gkm/triton

The first argument is where the pod mounts the cache (read-only; the same path as in the workload's containers, as
the group files written name it), the second the pod's writable directory (an emptyDir) that the workload's
containers get as TRITON_CACHE_DIR. Writes the group overlay (overlay.py) and prints what it wrote as one JSON line.
Exit status 0 when the overlay is written, whatever number of kernels it holds (a kernel left out is compiled by the
workload, a miss, not a failure); 1 when it cannot be written, the message also going to --termination-log.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import sys
import time

from ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay import triton_cache_dir, write_overlay

EXIT_FAILED = 1


def build_parser():
    parser = argparse.ArgumentParser(prog="gkm-kernel-overlay", description="Give a pod a writable Triton cache "
                                     "directory whose kernels resolve to a read-only mounted cache.")
    parser.add_argument("cache", help="where the pod mounts the cache (its io.triton.cache below it, or the kernels)")
    parser.add_argument("into", help="the writable directory the workload gets as TRITON_CACHE_DIR")
    parser.add_argument("--termination-log", metavar="PATH", help="also write a failure's message here")
    return parser


def _report_failure(message, termination_log):
    sys.stderr.write(message + "\n")
    if termination_log:
        try:
            with open(termination_log, "w") as handle:
                handle.write(message[:4000])
        except OSError:
            pass


def main(argv=None):
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        result = write_overlay(triton_cache_dir(args.cache), args.into)
    except OSError as exc:
        _report_failure("the kernel overlay of %s into %s cannot be written: %s. The cache must be mounted in this "
                        "container at %s and the directory must be writable by its uid (an emptyDir is)" % (
                            args.cache, args.into, exc, args.cache), args.termination_log)
        return EXIT_FAILED
    result["seconds"] = round(time.perf_counter() - started, 4)
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
