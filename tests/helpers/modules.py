"""Run a gkm.cluster module the way users do (the `ansible` CLI), and read the API server's audit log."""

import json
import os
import subprocess
import sys
import tempfile
import time

from tests.helpers.paths import ROOT

COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
SIM_DIR = os.path.abspath(os.environ.get("GKM_SIM_DIR", os.path.join(ROOT, ".sim")))
AUDIT_LOG = os.path.join(SIM_DIR, "logs", "audit.log")
# The simulated nodes' cache root (host_path_root): inside the run's state directory, so `sim.py down` removes it.
NODE_DISK = os.path.join(SIM_DIR, "node-disk")
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# The `ansible` of the venv running the tests: make test-lowest runs them with .venv-lowest's ansible-core.
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def venv_site_packages():
    """.venv's site-packages (kubernetes.core and the other collections of the `ansible` package), as .venv's own
    interpreter names it: the path carries its Python version, which need not be the one running the tests."""
    return subprocess.run([os.path.join(VENV_BIN, "python"), "-c",
                           "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          check=True, capture_output=True, text=True).stdout.strip()


def run_module(module, kubeconfig, check=False, diff=False, collections=COLLECTIONS, **args):
    """The module's result for localhost (a dict with changed/failed/msg and the module's return values); collections:
    the ANSIBLE_COLLECTIONS_PATH holding gkm.cluster (a benchmark's other checkout)."""
    return run_module_measured(module, kubeconfig, check, diff, collections, **args)[0]


def run_module_measured(module, kubeconfig, check=False, diff=False, collections=COLLECTIONS, **args):
    """(the module's result, the peak resident set size in bytes of the `ansible` process tree, module included)."""
    command = [ANSIBLE, "localhost", "-m", "gkm.cluster.%s" % module,
               "-a", json.dumps(dict(args, kubeconfig=kubeconfig))]
    command += (["--check"] if check else []) + (["--diff"] if diff else [])
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=err, text=True)
        # wait4 reports the largest RSS of the process and of every descendant it waited for (the module).
        _pid, wait_status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(wait_status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    try:
        return json.loads(stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"], usage.ru_maxrss * 1024
    except (ValueError, KeyError, IndexError) as error:
        raise AssertionError("ansible gave no JSON result: %s %s" % (stdout[-2000:], stderr[-2000:])) from error


def ansible_cli_floor():
    """Seconds of the cheapest module run through the `ansible` CLI: what any task costs before its own work."""
    started = time.monotonic()
    subprocess.run([ANSIBLE, "localhost", "-m", "ansible.builtin.ping"],
                   check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, ANSIBLE_LOCALHOST_WARNING="0"))
    return time.monotonic() - started


# The simulated control plane's own components authenticate as the admin too; their writes (Job status,
# pod finalizers, node heartbeats) are never the collection's.
CONTROL_PLANE_AGENTS = ("kube-controller-manager/", "kube-scheduler/", "kwok/")


class AuditWrites:
    """Writes recorded by the API server's audit log after this point whose URI mentions a marker.

    Writes by the control plane's own components are left out.
    """

    def __init__(self):
        self.offset = os.path.getsize(AUDIT_LOG)

    def since(self, *markers):
        writes = []
        for event in audit_events(self.offset):
            uri = event.get("requestURI", "")
            if event.get("userAgent", "").startswith(CONTROL_PLANE_AGENTS):
                continue
            if event.get("verb") in WRITE_VERBS and any(marker in uri for marker in markers):
                writes.append("%s %s" % (event["verb"], uri))
        return writes


def audit_events(offset):
    """The API server's audit events logged past offset (bytes into its log), parsed; a line cut short is skipped."""
    with open(AUDIT_LOG, encoding="utf-8") as log:
        log.seek(offset)
        for line in log:
            try:
                yield json.loads(line)
            except ValueError:
                continue
