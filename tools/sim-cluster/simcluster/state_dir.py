"""The run's state directory ($GKM_SIM_DIR, default .sim/ in the checkout) and the processes it records.

state.json holds the processes (pid and kernel start time, so a reused pid is never taken for ours), the ports picked
for the run and what the commands recorded; logs/ holds one log per process.
"""

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SIM_DIR = os.path.abspath(os.environ.get("GKM_SIM_DIR", os.path.join(ROOT, ".sim")))
STATE_FILE = os.path.join(SIM_DIR, "state.json")
LOG_DIR = os.path.join(SIM_DIR, "logs")
PKI_DIR = os.path.join(SIM_DIR, "pki")
KUBECONFIG = os.path.join(SIM_DIR, "kubeconfig")


def log(message):
    print("sim: %s" % message, file=sys.stderr, flush=True)


def write_file(path, content, mode=0o600):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as handle:
        handle.write(content)


def load_state():
    try:
        with open(STATE_FILE) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {"processes": {}, "ports": {}}


def save_state(state):
    os.makedirs(SIM_DIR, exist_ok=True)
    tmp = STATE_FILE + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(state, handle, indent=2, sort_keys=True)
    os.replace(tmp, STATE_FILE)


def _process_start_time(pid):
    """The kernel's start time of pid (field 22 of /proc/pid/stat), or None if it is gone or a zombie.

    A process started by an earlier sim.py is reaped by init, which may take seconds: it has stopped already.
    """
    try:
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] == "Z" else fields[19]


def is_running(record):
    """A recorded process runs when its pid exists and has the start time we recorded (no pid reuse)."""
    return bool(record) and _process_start_time(record["pid"]) == record["start_time"]


def is_recorded_running(state, name):
    return is_running(state["processes"].get(name))


def start_process(state, name, argv, environment=None, pass_fds=()):
    os.makedirs(LOG_DIR, exist_ok=True)
    with open(os.path.join(LOG_DIR, name + ".log"), "ab") as log_file:
        process = subprocess.Popen(
            argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=SIM_DIR, env=environment, pass_fds=pass_fds,
        )
    state["processes"][name] = {"pid": process.pid, "start_time": _process_start_time(process.pid), "argv": argv}
    save_state(state)


def stop_process(name, record, timeout=15):
    if not is_running(record):
        return
    pid = record["pid"]
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _process_start_time(pid) is not None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    if _process_start_time(pid) is not None:
        log("%s did not stop in %ss, killing it" % (name, timeout))
        os.killpg(pid, signal.SIGKILL)


def stop_recorded(name):
    """Stop the process recorded under name and forget it; returns (state, whether it was running)."""
    state = load_state()
    record = state["processes"].pop(name, None)
    running = is_running(record)
    stop_process(name, record)
    save_state(state)
    return state, running


# Listening ports are picked below the kernel's ephemeral range: a port the kernel hands out (to bind(0) or to an
# outbound connection) can be taken by any client's connection between the pick and the server's bind, and with four
# clusters and their tests on one machine that happened (an etcd or API server exiting with "address already in use").
LISTEN_PORTS_LOW = 10000
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def free_port(taken=()):
    """A port free on every address now (bound on the wildcard, never listened on), outside the ephemeral range."""
    with open(EPHEMERAL_RANGE) as handle:
        ephemeral_low = int(handle.read().split()[0])
    candidates = [number for number in range(LISTEN_PORTS_LOW, ephemeral_low) if number not in taken]
    for number in random.sample(candidates, min(len(candidates), 200)):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", number))
            except OSError:
                continue
            return number
    raise SystemExit("sim: no free port between %d and %d (below %s)" % (LISTEN_PORTS_LOW, ephemeral_low,
                                                                        EPHEMERAL_RANGE))


def port(state, name):
    """A port for name, chosen once and kept for the life of the state."""
    if name not in state["ports"]:
        state["ports"][name] = free_port(set(state["ports"].values()))
    return state["ports"][name]


def bind_address(state):
    """Where the registry and the API server listen: the run's host address with real nodes, else loopback."""
    return state.get("host_address", "127.0.0.1")


def wait_for(what, check, timeout, process_names=(), state=None):
    """Poll check until it holds; fail at once when one of the named processes has exited meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for name in process_names:
            if not is_recorded_running(state, name):
                raise SystemExit("sim: %s exited while waiting for %s; see %s" % (
                    name, what, os.path.join(LOG_DIR, name + ".log")))
        time.sleep(0.1)
    raise SystemExit("sim: timed out after %ss waiting for %s (logs: %s)" % (timeout, what, LOG_DIR))
