# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a module run's time goes: seconds per phase, returned as `timings` so a benchmark can say what a no-op
rerun costs and which part of it is ours."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import time


class Timings:
    """Seconds per named phase; a phase entered twice adds up."""

    def __init__(self):
        self.seconds = {}

    @contextlib.contextmanager
    def phase(self, name):
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started

    def result(self):
        return {name: round(seconds, 3) for name, seconds in self.seconds.items()}


def process_age():
    """Seconds since this process started (interpreter start, module unpacking, imports, argument checks so far),
    to 10 ms; None where /proc does not say (not Linux)."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            # Field 22, starttime in clock ticks after boot; the fields after the command's ")" start at field 3.
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return round(float(uptime.read().split()[0]) - started, 3)
    except (OSError, ValueError, IndexError):
        return None
