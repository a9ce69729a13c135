"""The lanes of `make test`, pure part: which steps each lane runs, how the integration tests are shared out, what
the run's results add up to. lanes.py does the running; this file only computes, so its rules have unit tests."""

import glob
import heapq
import json
import os
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field

# A test file missing from durations.json (new since the last --record-durations) counts as this many seconds.
UNMEASURED_SECONDS = 60
SLOWEST = 20
# Failed tests the summary's tail names, each with its failure's first line cut to MESSAGE_CHARACTERS.
FAILED_SHOWN = 10
MESSAGE_CHARACTERS = 200
MOLECULE_LINE = re.compile(r"^molecule (\S+): (passed|FAILED|SKIPPED)(?: (?:in|after) (\d+)s)?(?:: (.*))?")


@dataclass
class Step:
    name: str
    argv: list
    env: dict = field(default_factory=dict)
    needs: list = field(default_factory=list)  # builds this step waits for (the lane's own are waited for first)


@dataclass
class Lane:
    name: str
    budget: int  # seconds
    needs: list  # builds the lane waits for before its first step
    steps: list


@dataclass
class Share:
    """One integration lane's test files and their measured seconds."""

    files: list = field(default_factory=list)
    seconds: float = 0.0
    unmeasured: list = field(default_factory=list)


@dataclass
class LaneOutcome:
    name: str
    steps: list  # (step name, exit code)
    wall: float
    cpu: float
    note: str = ""

    @property
    def passed(self):
        return bool(self.steps) and all(code == 0 for _name, code in self.steps)


@dataclass
class TestCase:
    name: str  # file::test as pytest names it
    file: str
    seconds: float
    outcome: str  # passed, failed, skipped
    message: str = ""  # a failure's first line


@dataclass
class Speed:
    """This machine against the one the budgets were measured on: the speed probe's CPU seconds here and there, and
    the factor every budget is multiplied by."""

    probe: float
    reference: float
    factor: float


@dataclass
class Summary:
    text: str
    passed: int
    failed: int
    skipped: int
    lanes_failed: list


def share_out(files, durations, count):
    """Longest first, each file to the lane with the fewest seconds so far: lanes within one file's time of each other.

    Returns count Shares, in lane order.
    """
    shares = [Share() for _ in range(count)]
    weighted = sorted(((durations.get(path, UNMEASURED_SECONDS), path) for path in files), key=lambda w: (-w[0], w[1]))
    heap = [(0.0, index) for index in range(count)]
    for seconds, path in weighted:
        total, index = heapq.heappop(heap)
        shares[index].files.append(path)
        shares[index].seconds += seconds
        if path not in durations:
            shares[index].unmeasured.append(path)
        heapq.heappush(heap, (total + seconds, index))
    for share in shares:
        share.files.sort()
    return shares


def _expand(argv, values):
    return [part.format(**values) for part in argv]


def _steps(entries, values):
    return [Step(entry["name"], _expand(entry["run"], values), dict(entry.get("env") or {}), entry.get("needs") or [])
            for entry in entries]


def shared_items(config, root):
    """{glob: [paths under root]} of the shared lanes' `items`; `**` spans folders (tests/integration/**/test_*.py)."""
    return {entry["items"]: sorted(path.rstrip("/")
                                   for path in glob.glob(entry["items"], root_dir=root, recursive=True))
            for entry in config["lanes"].values() if entry.get("shared")}


def lanes(config, items, durations, python, log_dir):
    """The lanes of config (lanes.yml); returns (lanes, {lane: Share}).

    A lane entry with `shared: N` is N lanes <name>-1 ... <name>-N, among which the paths matching its `items` glob
    (items: {glob: [paths]}) are shared out by their measured seconds; its `run` names them with "{items}".
    """
    result, shares = [], {}
    for name, entry in config["lanes"].items():
        values = {"python": python}
        env = dict(entry.get("env") or {})
        if entry.get("shared"):
            for index, share in enumerate(share_out(items[entry["items"]], durations, entry["shared"]), 1):
                lane = "%s-%d" % (name, index)
                shares[lane] = share
                values["junit"] = os.path.join(log_dir, lane, "%s.xml" % entry["step"])
                argv = [item for part in entry["run"]
                        for item in (share.files if part == "{items}" else [part.format(**values)])]
                result.append(Lane(lane, entry["budget"], entry.get("needs") or [], [Step(entry["step"], argv, env)]))
            continue
        steps = _steps(entry["steps"], values)
        for step in steps:
            # make's pytest targets write their JUnit reports there, named after the target (the step).
            step.env = dict(env, JUNIT_DIR=os.path.join(log_dir, name), **step.env)
        result.append(Lane(name, entry["budget"], entry.get("needs") or [], steps))
    return result, shares


def builds(config):
    """{build name: argv}, in the order they run."""
    return {name: list(argv) for name, argv in config["builds"].items()}


def load_durations(path):
    try:
        with open(path) as handle:
            return json.load(handle)["seconds"]
    except FileNotFoundError:
        return {}


def save_durations(path, measured, previous):
    """Measured seconds per test file; files this run did not measure keep their previous figure."""
    seconds = dict(previous)
    seconds.update({name: round(value, 1) for name, value in measured.items()})
    about = ("seconds per integration test file and molecule scenario, from tools/ci/lanes.py --record-durations; "
             "the shared lanes are shared out from these")
    with open(path, "w") as handle:
        json.dump({"about": about, "seconds": dict(sorted(seconds.items()))}, handle, indent=2)
        handle.write("\n")


def file_durations(cases):
    """Seconds per file (a test file, a molecule scenario) of the cases given."""
    totals = {}
    for case in cases:
        totals[case.file] = totals.get(case.file, 0.0) + case.seconds
    return totals


def _case_file(element):
    """tests/x/test_y.py from a testcase's classname (tests.x.test_y or tests.x.test_y.TestClass)."""
    parts = element.get("classname", "").split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if parts[end - 1].startswith("test_"):
            return candidate
    return element.get("file") or element.get("classname", "")


def parse_junit(text):
    cases = []
    for element in ElementTree.fromstring(text).iter("testcase"):
        outcome, message = "passed", ""
        failure = element.find("failure")
        if failure is None:
            failure = element.find("error")
        if failure is not None:
            outcome = "failed"
            message = ((failure.get("message") or failure.text or "").strip().splitlines() or [""])[0]
        elif element.find("skipped") is not None:
            outcome = "skipped"
        path = _case_file(element)
        cases.append(TestCase("%s::%s" % (path, element.get("name")), path, float(element.get("time") or 0), outcome,
                              message[:MESSAGE_CHARACTERS]))
    return cases


def read_junit(directory):
    """{report name: [TestCase]} of a lane's JUnit reports: pytest.xml, or <make target>[-part].xml (JUNIT_DIR)."""
    reports = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.xml"))):
        with open(path) as handle:
            reports[os.path.splitext(os.path.basename(path))[0]] = parse_junit(handle.read())
    return reports


def step_cases(step, reports):
    """The test cases a step reported: reports named after it, or after it and a part (test-lowest-unit)."""
    return [case for name, cases in reports.items() if name == step or name.startswith(step + "-") for case in cases]


def parse_molecule(text):
    """Each scenario tools/ci/molecule.sh reports, as a TestCase (molecule/<scenario>, of its molecule.yml)."""
    outcomes = {"passed": "passed", "FAILED": "failed", "SKIPPED": "skipped"}
    return [TestCase("molecule/" + match.group(1), "molecule/%s/molecule.yml" % match.group(1),
                     float(match.group(3) or 0), outcomes[match.group(2)], (match.group(4) or "")[:MESSAGE_CHARACTERS])
            for match in map(MOLECULE_LINE.match, text.splitlines()) if match]


def read_molecule(path):
    try:
        with open(path) as handle:
            return parse_molecule(handle.read())
    except FileNotFoundError:
        return []


def speed(config, probe_seconds):
    """How much longer than the budgets' machine this one may take: its probe's CPU seconds over the reference's,
    never below 1 (a faster machine keeps the committed budgets)."""
    settings = config["speed"]
    return Speed(probe_seconds, settings["reference_seconds"],
                 max(probe_seconds / settings["reference_seconds"], 1.0))


def scaled_budget(config, budget, machine):
    """A lane's budget on this machine: scaled by its speed, but never so high that the lane's allowance, tolerance
    included, passes CI's hard limit."""
    return min(budget * machine.factor, config["speed"]["hard_limit"] / (1 + config.get("budget_tolerance", 0.25)))


def _minutes(seconds):
    return "%dm%02ds" % divmod(round(seconds), 60)


def summary(config, lanes_run, outcomes, reports, build_results, wall, machine):
    """The closing report: the slowest tests, the builds, each lane against its budget, then the failed tests, each
    with its failure's first line. The lane table and the failures come last because a CI log is often shown by its
    tail only."""
    tolerance = config.get("budget_tolerance", 0.25)
    cases = sorted((case for lane_reports in reports.values() for lane_cases in lane_reports.values()
                    for case in lane_cases), key=lambda c: -c.seconds)
    lines = ["", "%d slowest tests:" % SLOWEST]
    lines += ["  %7.1fs  %s" % (case.seconds, case.name) for case in cases[:SLOWEST]]
    lines += ["", "builds:"]
    lines += ["  %-18s %-8s %s" % (name, "ok" if code == 0 else "FAILED", _minutes(seconds))
              for name, (code, seconds) in build_results.items()] or ["  (none needed)"]
    lines += ["", "budgets: tools/ci/lanes.yml's x %.2f (the speed probe took %.2f s of CPU here, %.2f s on the "
              "budgets' machine), none past %s" % (machine.factor, machine.probe, machine.reference,
                                                   _minutes(scaled_budget(config, float("inf"), machine)))]
    lines += ["", "%-15s %-7s %8s %8s %8s %6s  %s" % ("lane", "result", "wall", "cpu", "budget", "use", "tests")]
    passed = failed = skipped = 0
    lanes_failed = []
    for lane in lanes_run:
        outcome = outcomes.get(lane.name) or LaneOutcome(lane.name, [], 0.0, 0.0, "did not run")
        reports_of_lane = reports.get(lane.name) or {}
        lane_cases = [case for step_reports in reports_of_lane.values() for case in step_reports]
        counts = {kind: sum(1 for case in lane_cases if case.outcome == kind)
                  for kind in ("passed", "failed", "skipped")}
        for step, code in outcome.steps:
            reported = step_cases(step, reports_of_lane)
            if not reported:
                # A step with no report of its own (ruff, sanity) is one check.
                counts["passed" if code == 0 else "failed"] += 1
            elif code != 0 and not any(case.outcome == "failed" for case in reported):
                # It failed outside its tests (collection, a set-up step, sanity after the unit tests).
                counts["failed"] += 1
        budget = scaled_budget(config, lane.budget, machine)
        over = outcome.wall > budget * (1 + tolerance)
        result = "passed" if outcome.passed and not over else ("OVER" if outcome.passed else "FAILED")
        if result != "passed":
            lanes_failed.append(lane.name)
        passed, failed, skipped = passed + counts["passed"], failed + counts["failed"], skipped + counts["skipped"]
        failing = [name for name, code in outcome.steps if code != 0]
        lines.append("%-15s %-7s %8s %8s %8s %5.0f%%  %d passed, %d failed, %d skipped%s" % (
            lane.name, result, _minutes(outcome.wall), _minutes(outcome.cpu), _minutes(budget),
            100 * outcome.wall / budget, counts["passed"], counts["failed"], counts["skipped"],
            "; failed steps: %s" % ", ".join(failing) if failing else (" (%s)" % outcome.note if outcome.note else "")))
    lines.append("%-15s %-7s %8s" % ("run", "failed" if lanes_failed else "passed", _minutes(wall)))
    if lanes_failed:
        lines.append("failed lanes: %s; a lane fails when a step fails or its wall time is more than %d%% over its "
                     "budget (tools/ci/lanes.yml, scaled by the machine's speed)" % (
                         ", ".join(lanes_failed), round(100 * tolerance)))
    # Last of all: a CI log shown by its tail names what failed and why.
    failed_cases = [case for case in cases if case.outcome == "failed"]
    if failed_cases:
        lines += ["failed tests:"] + ["  %s: %s" % (case.name, case.message or "(no message)")
                                      for case in failed_cases[:FAILED_SHOWN]]
        if len(failed_cases) > FAILED_SHOWN:
            lines.append("  and %d more: the lane logs name them" % (
                len(failed_cases) - FAILED_SHOWN))
    return Summary("\n".join(lines) + "\n", passed, failed, skipped, lanes_failed)
