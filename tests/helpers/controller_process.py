"""The kopf controller (controller/gkm_controller) run out of cluster as a process of the test, against the simulated
cluster: its log (stderr) read by the tests, its CPU time, its stop. Used by the controller's and the operator's
replica tests."""

import json
import os
import re
import signal
import subprocess
import sys
import time

from tests.helpers.operator_caches import kwok_tools_image, poll
from tests.helpers.paths import ROOT


class Controller:
    """The controller's process and its log, `python -m controller.gkm_controller.main` from the checkout, its
    Lease in lease_namespace; identity and probe_port as its flags (default: host name and pid, no probe)."""

    def __init__(self, sim, log_path, lease_namespace, identity=None, probe_port=None):
        self.log_path, self.probe_port = log_path, probe_port
        self.started = time.monotonic()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [ROOT, os.path.join(ROOT, ".cache", "collections"), os.environ.get("PYTHONPATH", "")]))
        options = {"registry_plain_http": True, "wait_timeout": 120}
        argv = [sys.executable, "-m", "controller.gkm_controller.main", "--kubeconfig", sim.kubeconfig,
                "--namespace", lease_namespace, "--tools-image", kwok_tools_image(sim),
                "--options", json.dumps(options), "--verbose"]
        argv += ["--identity", identity] if identity else []
        argv += ["--probe-port", str(probe_port)] if probe_port else []
        with open(log_path, "w") as log:
            self.process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    def log(self):
        with open(self.log_path, encoding="utf-8") as log:
            return log.read()

    def lines(self, pattern):
        return [line for line in self.log().splitlines() if re.search(pattern, line)]

    def cpu_seconds(self):
        """User and system CPU seconds of the process so far (/proc/<pid>/stat, its own threads only)."""
        with open("/proc/%d/stat" % self.process.pid) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def become_ready(controller, timeout=120):
    """Seconds from the controller's start until it logged its readiness (every watched kind listed)."""
    try:
        poll("the controller ready", lambda: controller.process.poll() is None and controller.lines(r" ready: "),
             timeout)
    except AssertionError:
        controller.stop()
        raise AssertionError("the controller did not become ready:\n%s" % controller.log()[-4000:]) from None
    return time.monotonic() - controller.started
