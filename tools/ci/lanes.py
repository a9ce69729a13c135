#!/usr/bin/env python3
"""ENTRY POINT of `make test`: the test suite in lanes that run side by side, each on a cluster of its own.

    lanes.py [--only LANE ...] [--record-durations]

The lanes and their budgets are in tools/ci/lanes.yml; the integration tests are shared out among the
integration lanes from the seconds each test file took, measured and kept in tools/ci/durations.json
(--record-durations writes it from this run). Builds run first, in one queue; a lane starts as soon as the
builds it needs are there, and every lane runs to its end. The summary gives the 20 slowest tests, then each
lane's wall time, CPU time, budget and result, then the failed tests (last, for logs shown by their tail); the
logs stay in .cache/lanes/. The run fails if a lane fails or runs more than 25% over its budget (waits for builds not
counted; budgets scale by how much slower than theirs this machine runs tools/ci/speed_probe.py), and ends
with one line `total: N passed, M failed, K skipped`.
"""

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import lanes_plan as plan  # noqa: E402

CONFIG = os.path.join(HERE, "lanes.yml")
DURATIONS = os.path.join(HERE, "durations.json")
LOG_ROOT = os.path.join(ROOT, ".cache", "lanes")
SIM_ROOT = os.path.join(ROOT, ".sim-lanes")
CPUACCT = "/sys/fs/cgroup/cpuacct"
SPEED_PROBE = os.path.join(HERE, "speed_probe.py")
SPEED_PROBE_RUNS = 3


def log(message):
    print("lanes: %s" % message, flush=True)


class LaneCpu:
    """CPU seconds of everything a lane started, daemons included (the cluster's processes leave the lane's process
    tree): a cgroup v1 cpuacct group per lane where this machine has one, else the lane's waited-for children."""

    def __init__(self, name):
        self.path = os.path.join(CPUACCT, "ci-lanes", "%d-%s" % (os.getpid(), name))
        try:
            os.makedirs(self.path)
        except OSError:
            self.path = None
        self.waited = 0.0

    def enter(self):
        """preexec_fn of a lane's step: the step and all it starts count towards the lane."""
        if self.path:
            with open(os.path.join(self.path, "tasks"), "w") as handle:
                handle.write(str(os.getpid()))

    def add_waited(self, rusage):
        self.waited += rusage.ru_utime + rusage.ru_stime

    def seconds(self):
        if self.path:
            with open(os.path.join(self.path, "cpuacct.usage")) as handle:
                return int(handle.read()) / 1e9
        return self.waited

    def release(self):
        """Move what still runs in the group (nothing, once every cluster is down) to the root, then remove it."""
        if not self.path:
            return
        with open(os.path.join(self.path, "tasks")) as handle:
            left = handle.read().split()
        for pid in left:
            with contextlib.suppress(OSError), open(os.path.join(CPUACCT, "tasks"), "w") as handle:
                handle.write(pid)
        with contextlib.suppress(OSError):
            os.rmdir(self.path)
            os.rmdir(os.path.dirname(self.path))  # once no other run's lanes are in it


def run_step(step, lane_log, cpu, environment):
    """Run one step, its output appended to the lane's log; returns its exit code."""
    with open(lane_log, "a") as handle:
        handle.write("\n==> %s: %s\n" % (step.name, " ".join(step.argv)))
        handle.flush()
        started = time.monotonic()
        process = subprocess.Popen(step.argv, cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=dict(environment, **step.env),
                                   preexec_fn=cpu.enter)
        _pid, status, rusage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        cpu.add_waited(rusage)
        handle.write("<== %s: exit %d after %.0fs\n" % (step.name, process.returncode, time.monotonic() - started))
    return process.returncode


class Builds:
    """The builds, one after another (each takes both cores cold), each signalling when done."""

    def __init__(self, builds, log_dir, environment):
        self.builds = builds
        self.done = {name: threading.Event() for name in builds}
        self.results = {}
        self.log_dir = log_dir
        self.environment = environment
        self.cpu = LaneCpu("builds")

    def run(self):
        for name, argv in self.builds.items():
            started = time.monotonic()
            code = run_step(plan.Step(name, argv), os.path.join(self.log_dir, "builds.log"), self.cpu,
                            self.environment)
            self.results[name] = (code, time.monotonic() - started)
            log("build %s: %s in %.0fs" % (name, "ok" if code == 0 else "FAILED (exit %d)" % code,
                                           self.results[name][1]))
            self.done[name].set()

    def wait(self, names):
        """True once every named build is done and succeeded."""
        for name in names:
            self.done[name].wait()
        return all(self.results[name][0] == 0 for name in names)


def run_lane(lane, builds, log_dir, environment, outcomes):
    lane_log = os.path.join(log_dir, lane.name + ".log")
    cpu = LaneCpu(lane.name)
    started = time.monotonic()
    if not builds.wait(lane.needs):
        failed = [name for name in lane.needs if builds.results[name][0] != 0]
        outcomes[lane.name] = plan.LaneOutcome(lane.name, [("builds", 1)], 0.0, 0.0, "build failed: %s" % failed)
        log("%s: not run, build failed: %s" % (lane.name, ", ".join(failed)))
        return
    waited = time.monotonic() - started
    log("%s: started (%d steps, waited %.0fs for builds)" % (lane.name, len(lane.steps), waited))
    environment = dict(environment, GKM_SIM_DIR=os.path.join(SIM_ROOT, lane.name))
    started = time.monotonic()
    results = []
    waited = 0.0
    for step in lane.steps:
        # A step's wait for its builds is build time, which budgets leave out: a cold cache (a new Triton pin, a
        # fresh CI machine) must not push a lane over its budget.
        waiting_since = time.monotonic()
        ready = builds.wait(step.needs)
        step_waited = time.monotonic() - waiting_since
        if step_waited >= 1:
            waited += step_waited
            log("%s: step %s waited %.0fs for builds" % (lane.name, step.name, step_waited))
        code = run_step(step, lane_log, cpu, environment) if ready else 1
        results.append((step.name, code))
        if code != 0:
            log("%s: step %s failed (exit %d), the lane goes on" % (lane.name, step.name, code))
    outcomes[lane.name] = plan.LaneOutcome(lane.name, results, time.monotonic() - started - waited, cpu.seconds(),
                                           "waited %.0fs for builds, not counted" % waited if waited else "")
    cpu.release()
    log("%s: %s in %.0fs" % (lane.name, "passed" if outcomes[lane.name].passed else "FAILED",
                             outcomes[lane.name].wall))


def probe_speed():
    """CPU seconds of the speed probe, the least of its runs, each in a fresh interpreter, before any lane starts."""
    return min(float(subprocess.run([sys.executable, SPEED_PROBE], check=True, capture_output=True,
                                    text=True).stdout) for _run in range(SPEED_PROBE_RUNS))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", help="run only this lane (repeatable)")
    parser.add_argument("--record-durations", action="store_true",
                        help="write tools/ci/durations.json from this run's integration tests")
    args = parser.parse_args()

    with open(CONFIG) as handle:
        config = yaml.safe_load(handle)
    durations = plan.load_durations(DURATIONS)
    items = plan.shared_items(config, ROOT)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_dir = os.path.join(LOG_ROOT, stamp)
    os.makedirs(log_dir)
    lanes, shares = plan.lanes(config, items, durations, sys.executable, log_dir)
    for name, share in shares.items():
        log("%s: %d shared out (test files or scenarios), %.0fs by the last measurement%s" % (
            name, len(share.files), share.seconds,
            "; not measured yet (counted as %ds): %s" % (plan.UNMEASURED_SECONDS, ", ".join(share.unmeasured))
            if share.unmeasured else ""))
    if args.only:
        unknown = set(args.only) - {lane.name for lane in lanes}
        if unknown:
            raise SystemExit("lanes: no lane named %s (lanes: %s)" % (
                ", ".join(sorted(unknown)), ", ".join(lane.name for lane in lanes)))
        lanes = [lane for lane in lanes if lane.name in args.only]
    needed = {name for lane in lanes for name in [*lane.needs, *(need for step in lane.steps for need in step.needs)]}
    environment = dict(os.environ, PATH="%s:%s" % (os.path.dirname(sys.executable), os.environ["PATH"]))
    builds = Builds({name: argv for name, argv in plan.builds(config).items() if name in needed}, log_dir,
                    environment)
    log("logs in %s; builds: %s" % (log_dir, ", ".join(builds.builds) or "none"))
    if os.path.isdir(SIM_ROOT):
        # A run that was killed leaves its clusters' state; each lane's cluster is its own, so stop them first.
        for name in os.listdir(SIM_ROOT):
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sim-cluster", "sim.py"), "down"],
                           env=dict(environment, GKM_SIM_DIR=os.path.join(SIM_ROOT, name)), cwd=ROOT, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(SIM_ROOT, ignore_errors=True)

    machine = plan.speed(config, probe_speed())
    log("speed probe: %.2f s of CPU (%.2f s on the budgets' machine): budgets x %.2f" % (
        machine.probe, machine.reference, machine.factor))
    started = time.monotonic()
    outcomes = {}
    threads = [threading.Thread(target=builds.run)]
    threads += [threading.Thread(target=run_lane, args=(lane, builds, log_dir, environment, outcomes))
                for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started

    reports = {lane.name: dict(plan.read_junit(os.path.join(log_dir, lane.name)),
                               molecule=plan.read_molecule(os.path.join(log_dir, lane.name + ".log")))
               for lane in lanes}
    summary = plan.summary(config, lanes, outcomes, reports, builds.results, wall, machine)
    print(summary.text, flush=True)
    with open(os.path.join(log_dir, "summary.txt"), "w") as handle:
        handle.write(summary.text)
    if args.record_durations:
        measured = plan.file_durations([case for name in shares
                                        for cases in reports.get(name, {}).values() for case in cases])
        plan.save_durations(DURATIONS, measured, durations)
        log("wrote %s (%d measured)" % (os.path.relpath(DURATIONS, ROOT), len(measured)))
    print("total: %d passed, %d failed, %d skipped" % (summary.passed, summary.failed, summary.skipped), flush=True)
    return 1 if summary.failed or summary.lanes_failed else 0


if __name__ == "__main__":
    sys.exit(main())
