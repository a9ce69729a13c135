"""The kopf controller (controller/gkm_controller) run out of cluster as a subprocess, as its tests and its benchmark
run it: the command line of the simulated cluster's local operator (simcluster/operator_plan.py), its log (stderr)
read back, its CPU time, its stop. Used by the controller's test, the operator's replica test and
bench/controller.py."""

import os
import re
import signal
import subprocess
import sys
import time

from tests.helpers.operator_caches import kwok_tools_image, poll
from tests.helpers.paths import ROOT
from tests.helpers.sim import sim_control

# The controller's line per resync (controller/gkm_controller/resync.py) and the names of its figures, in order.
RESYNC_LINE = (r"gkm_controller\.resync: resync (\d+): (\d+) caches in ([\d.]+) s, (\d+) changed, (\d+) failed; "
               r"(\d+) LIST requests, (\d+) other reads, (\d+) writes")
RESYNC_FIGURES = ("number", "caches", "seconds", "changed", "failed", "list_requests", "other_reads", "writes")
# Its line per cache that sent a request, changed, failed or was stopped in a resync.
RESYNC_CACHE_LINE = (r"gkm_controller\.resync: resync (\d+): (\S+) (\S+) (changed|failed|stopped|unchanged); "
                     r"(\d+) LIST requests, (\d+) other reads, (\d+) writes")
# What the tests' controllers distribute with: the simulated cluster's registry speaks plain HTTP.
TEST_OPTIONS = {"registry_plain_http": True, "wait_timeout": 120}


class Controller:
    """The controller's process and its log, its Lease in lease_namespace; identity, probe_port and resync_seconds as
    its flags (default: host name and pid, no probe, the controller's resync period); capture: its --capture setting
    (a dict), or None."""

    def __init__(self, kubeconfig, log_path, lease_namespace, tools_image, options, identity=None, probe_port=None,
                 verbose=True, resync_seconds=None, capture=None):
        self.log_path, self.probe_port = log_path, probe_port
        self.started = time.monotonic()
        plan = sim_control.operator_plan
        env = plan.environment(os.environ, ROOT)
        argv = plan.argv(sys.executable, kubeconfig, lease_namespace, tools_image, options, identity=identity,
                         probe_port=probe_port, verbose=verbose, resync_seconds=resync_seconds, capture=capture)
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def log(self):
        with open(self.log_path, encoding="utf-8") as log:
            return log.read()

    def lines(self, pattern):
        return [line for line in self.log().splitlines() if re.search(pattern, line)]

    def reconciles(self, kind="GKMCache", namespace=None):
        """The log lines of the reconciles started, of one kind (and namespace)."""
        return self.lines(r"gkm_controller\.reconciles: reconcile %s %s" % (
            kind, re.escape(namespace + "/") if namespace else ""))

    def resyncs(self):
        """The figures of each resync logged so far (RESYNC_FIGURES: a dict per resync, oldest first)."""
        return [{key: float(value) if key == "seconds" else int(value) for key, value in zip(
            RESYNC_FIGURES, re.search(RESYNC_LINE, line).groups())} for line in self.lines(RESYNC_LINE)]

    def resync_of(self, number, kind, reference):
        """What resync `number` sent for one cache (reference: namespace/name, or the name of a cluster cache): its
        figures as resyncs() gives them, zero where the resync logged no line of it."""
        sent = {"changed": 0, "failed": 0, "list_requests": 0, "other_reads": 0, "writes": 0}
        for line in self.lines(RESYNC_CACHE_LINE):
            logged, logged_kind, logged_reference, outcome, lists, reads, writes = re.search(
                RESYNC_CACHE_LINE, line).groups()
            if (int(logged), logged_kind, logged_reference) == (number, kind, reference):
                sent.update({"changed": int(outcome == "changed"), "failed": int(outcome == "failed"),
                             "list_requests": int(lists), "other_reads": int(reads), "writes": int(writes)})
        return sent

    def cpu_seconds(self):
        """User and system CPU seconds of the process so far (/proc/<pid>/stat, its own threads only)."""
        with open("/proc/%d/stat" % self.process.pid) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def become_ready(self, timeout=120):
        """Seconds from the start until the controller logged its readiness (every watched kind listed); fails with
        its log's tail."""
        try:
            poll("the controller ready", lambda: self.process.poll() is None and self.lines(r" ready: "), timeout)
        except AssertionError:
            self.stop()
            raise AssertionError("the controller did not become ready:\n%s" % self.log()[-4000:]) from None
        return time.monotonic() - self.started

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_controller(sim, log_path, lease_namespace, identity=None, probe_port=None, options=None, resync_seconds=None):
    """A controller as the tests run it on the simulated cluster's kwok nodes; options: over TEST_OPTIONS."""
    return Controller(sim.kubeconfig, log_path, lease_namespace, kwok_tools_image(sim),
                      dict(TEST_OPTIONS, **(options or {})), identity=identity, probe_port=probe_port,
                      resync_seconds=resync_seconds)
