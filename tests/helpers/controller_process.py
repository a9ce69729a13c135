"""The kopf controller (controller/gkm_controller) run out of cluster as a subprocess, as its integration test and
its benchmark run it: `python -m controller.gkm_controller.main` from the checkout, its log (stderr) read back."""

import json
import os
import re
import signal
import subprocess
import sys
import time

from tests.helpers.operator_caches import poll
from tests.helpers.paths import ROOT


class Controller:
    """The controller's process and its log."""

    def __init__(self, kubeconfig, log_path, lease_namespace, tools_image, options, verbose=True):
        self.log_path = log_path
        self.started = time.monotonic()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [ROOT, os.path.join(ROOT, ".cache", "collections"), os.environ.get("PYTHONPATH", "")]))
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "controller.gkm_controller.main", "--kubeconfig", kubeconfig,
                 "--namespace", lease_namespace, "--tools-image", tools_image, "--options", json.dumps(options)]
                + (["--verbose"] if verbose else []),
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def log(self):
        with open(self.log_path, encoding="utf-8") as log:
            return log.read()

    def lines(self, pattern):
        return [line for line in self.log().splitlines() if re.search(pattern, line)]

    def reconciles(self, kind="GKMCache", namespace=None):
        """The log lines of the reconciles started, of one kind (and namespace)."""
        return self.lines(r"gkm_controller\.reconciles: reconcile %s %s" % (
            kind, re.escape(namespace + "/") if namespace else ""))

    def cpu_seconds(self):
        """User and system CPU seconds of the process so far (/proc/<pid>/stat, its own threads only)."""
        with open("/proc/%d/stat" % self.process.pid) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def become_ready(self, timeout=120):
        """Seconds from the start until the controller logged its readiness; fails with its log's tail."""
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
