# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""ENTRY POINT of a pod's kernel-use sidecar (a native sidecar: an init container with restartPolicy Always; any uid;
the tools image carries it).

    python3 -m ansible_collections.gkm.cluster.plugins.module_utils.kernels.usage_main /var/run/gkm/kernels

Looks at the pod's overlay directory (mounted read-only) every --interval seconds and prints its report
(usage.observe) as one JSON line whenever it changed, and once more when the pod stops it (SIGTERM, sent once the
pod's containers ended): the collection reads the last line through the API's pods/log. Nothing is written, no
port is opened and the pod needs no permission.

With --capture-max-bytes (the webhook adds it for a pod opted in with gkm.io/capture), the stopped sidecar first
prints the kernels the pod compiled as one framed line (capture_frame.py), then its last report, so that the report
stays the log's last line and cache_capture can read a finished pod's kernels from the log.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import signal
import sys
import time

from ansible_collections.gkm.cluster.plugins.module_utils.kernels.capture_frame import make_frame
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay import compiled_here, is_group_file
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.usage import REPORT_KEY, observe

DEFAULT_INTERVAL = 5.0


class _Stopped(Exception):
    pass


def _stop(_signum, _frame):
    raise _Stopped()


def _report(into):
    # Before the overlay is written (never, in a pod: the overlay's init container ran first) there is nothing to say.
    return observe(into) or {REPORT_KEY: 1, "overlaid": 0, "hits": 0, "misses": 0, "compiled": [], "no_overlay": True}


def _print(document):
    sys.stdout.write(json.dumps(document, sort_keys=True) + "\n")
    sys.stdout.flush()


def capture_frame(into, max_bytes):
    """The frame of the kernels compiled in the overlay `into`: the directories with a group file (one without is a
    compile in progress or Triton's launcher, as usage.observe counts them)."""
    compiled = [entry for entry in compiled_here(into) or ()
                if any(is_group_file(name) for name in os.listdir(os.path.join(into, entry)))]
    return make_frame(into, compiled, max_bytes)


def main(argv=None, sleep=time.sleep):
    parser = argparse.ArgumentParser(prog="gkm-kernel-use", description="Report the kernels a pod's Triton found "
                                     "in its overlay (hits) and compiled (misses).")
    parser.add_argument("into", help="the pod's overlay directory (its TRITON_CACHE_DIR)")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, help="seconds between looks")
    parser.add_argument("--capture-max-bytes", type=int, default=0,
                        help="when stopped, print the compiled kernels as a capture frame of at most this many gzip "
                        "bytes (0: never)")
    parser.add_argument("--once", action="store_true", help="print one report and exit")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    last = None
    try:
        while True:
            report = _report(args.into)
            if report != last:
                _print(report)
                last = report
            if args.once:
                return 0
            sleep(args.interval)
    except (_Stopped, KeyboardInterrupt):
        framed = args.capture_max_bytes > 0
        if framed:
            _print(capture_frame(args.into, args.capture_max_bytes))
        report = _report(args.into)
        if report != last or framed:
            _print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
