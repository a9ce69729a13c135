"""Guard routes of the simulated cluster: while any run is up, its fake ranges are `unreachable` on this machine.

The ranges and rules are in guard_plan.py. Runs register in /run/gkm-sim-routes/runs/<run id> (as real-node runs
do in /run/gkm-sim, with the lock and register helpers of host_runs.py), and added.json there lists the
routes the runs added: the last live run out removes those, and a route the machine had before is never touched.
Needs root to add routes; without it `up` only warns.
"""

import contextlib
import json
import os
import subprocess

from simcluster import guard_plan as plan
from simcluster import host_runs, real_nodes_plan
from simcluster.state_dir import SIM_DIR, log

ADDED = os.path.join(plan.HOST_DIR, "added.json")
RESOLV_CONF = "/etc/resolv.conf"


def _routes():
    listing = subprocess.run(["ip", "-4", "-o", "route", "show", "table", "all"], check=True, capture_output=True,
                             text=True).stdout
    return plan.parse_routes(listing)


def _added():
    try:
        with open(ADDED) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return []


def _save_added(added):
    tmp = ADDED + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(sorted(added), handle)
    os.replace(tmp, ADDED)


def _nameservers():
    try:
        with open(RESOLV_CONF) as handle:
            return plan.nameservers(handle.read())
    except FileNotFoundError:
        return []


def up():
    """Register the run (its state.json must exist: that is what makes it live) and route every range unreachable
    that is not yet; refuses when the machine uses part of a range."""
    if os.geteuid() != 0:
        log("WARNING: not root, so the fake ranges %s are not routed `unreachable`: a packet the API server sends to "
            "a ClusterIP, a kwok pod or a kwok node leaves this machine by its default route; run as root"
            % ", ".join(plan.GUARD_RANGES))
        return
    with host_runs.host_lock(plan.HOST_DIR):
        routes = _routes()
        problems = plan.conflicts(routes, _nameservers())
        if problems:
            raise SystemExit("sim: the simulated cluster's fake address ranges are in use on this machine, so their "
                             "packets cannot be kept here:\n  %s" % "\n  ".join(problems))
        with open(os.path.join(plan.HOST_DIR, "runs", real_nodes_plan.run_id(SIM_DIR)), "w") as handle:
            handle.write(SIM_DIR)
        added = set(_added())
        for guarded in plan.missing(routes):
            subprocess.run(["ip", "route", "add", "unreachable", guarded], check=True, capture_output=True)
            added.add(guarded)
            _save_added(added)
    log("guard routes: %s unreachable" % ", ".join(plan.GUARD_RANGES))


def down():
    """Forget the run; the last live one out removes the routes the runs added."""
    if not os.path.isdir(plan.HOST_DIR):
        return
    run = real_nodes_plan.run_id(SIM_DIR)
    with host_runs.host_lock(plan.HOST_DIR):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(plan.HOST_DIR, "runs", run))
        others = [name for name in host_runs.live_runs(plan.HOST_DIR) if name != run]
        removing = plan.to_remove(_added(), others)
        for guarded in removing:
            # Already gone (removed by hand) is as good as removed.
            subprocess.run(["ip", "route", "del", "unreachable", guarded], check=False, capture_output=True)
        if removing:
            _save_added([])
            log("guard routes removed: %s" % ", ".join(removing))


def status_lines():
    return plan.status_lines(_routes(), _added())
