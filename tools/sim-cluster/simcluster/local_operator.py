"""The collection's operator as a local process: ansible-operator with the collection's watches (out of cluster;
its flags and environment in operator_plan.py), one at a time on a machine."""

import fcntl
import json
import os
import subprocess
import sys
import time

from simcluster import api, builds, operator_plan
from simcluster.pki import ensure_pki
from simcluster.state_dir import (
    KUBECONFIG,
    ROOT,
    SIM_DIR,
    is_recorded_running,
    load_state,
    log,
    port,
    start_process,
    stop_recorded,
    wait_for,
)


def lock_operator_slot():
    """The machine's one local operator slot (operator_plan.HOST_LOCK), locked: waits while another run's operator
    holds it. The returned descriptor is passed to the operator, which keeps the lock for as long as it runs."""
    os.makedirs(os.path.dirname(operator_plan.HOST_LOCK), exist_ok=True)
    descriptor = os.open(operator_plan.HOST_LOCK, os.O_WRONLY | os.O_CREAT, 0o644)
    deadline = time.monotonic() + operator_plan.HOST_LOCK_WAIT_SECONDS
    waiting = False
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return descriptor
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise SystemExit("sim: another run's operator still holds %s after %ss: `sim.py operator-down` in "
                                 "that run" % (operator_plan.HOST_LOCK, operator_plan.HOST_LOCK_WAIT_SECONDS)) from None
            if not waiting:
                log("another run's operator runs on this machine (one at a time: fixed ports and runner directory); "
                    "waiting for it to stop")
                waiting = True
            time.sleep(1)


def up(tools_image, run_vars):
    """Run ansible-operator with the collection's watches here; print whether it started and its health address as
    JSON. tools_image: the extraction Jobs' image (default: the recorded tools image); run_vars: JSON."""
    state = load_state()
    pki = ensure_pki(state)
    ports = {kind: port(state, "operator-" + kind) for kind in ("metrics", "health")}
    running = is_recorded_running(state, "operator")
    if not running:
        binary = os.path.join(builds.operator_dir(), "bin", "ansible-operator")
        slot = lock_operator_slot()
        subprocess.run(["rm", "-rf", "--one-file-system", operator_plan.RUNNER_DIR], check=True)
        api.apply_crds(state, pki, os.path.join(ROOT, "roles", "gkm", "files", "crds"))
        api.create_if_missing(state, pki, "/api/v1/namespaces",
                              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator_plan.NAMESPACE}})
        directory = os.path.join(SIM_DIR, "operator")
        os.makedirs(directory, exist_ok=True)
        vars_file = os.path.join(directory, "vars.json")
        tools_image = tools_image or state.get("tools_image") or "%s/gkm-cluster/tools:sim" % state["registry"]
        with open(vars_file, "w") as handle:
            json.dump(operator_plan.extra_vars(tools_image, KUBECONFIG, json.loads(run_vars or "{}")), handle)
        start_process(state, "operator", operator_plan.argv(binary, ROOT, vars_file, ports),
                      operator_plan.environment(os.environ, ROOT, os.path.dirname(sys.executable), KUBECONFIG),
                      pass_fds=(slot,))
    wait_for("the operator", lambda: api.http_ok("http://127.0.0.1:%d/readyz" % ports["health"]), 60, ["operator"],
             state)
    print(json.dumps({"changed": not running, "health": "127.0.0.1:%d" % ports["health"]}))


def down():
    print(json.dumps({"changed": stop_recorded("operator")[1]}))
