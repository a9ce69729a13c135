"""The lanes of `make test` (tools/ci/lanes_plan.py): integration tests shared out by measured time, the lanes the
committed lanes.yml describes, reports read back, and a summary that fails a lane over its budget."""

import importlib.util
import os
import subprocess
import sys

import yaml

from tests.helpers.paths import ROOT

_spec = importlib.util.spec_from_file_location("lanes_plan", os.path.join(ROOT, "tools", "ci", "lanes_plan.py"))
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.integration.modules.test_a" name="test_one" time="12.5" />
<testcase classname="tests.integration.modules.test_a.TestGroup" name="test_two" time="2.0">
<failure message="x"/></testcase>
<testcase classname="tests.integration.webhook.test_b" name="test_three[p]" time="0.1"><skipped message="y"/></testcase>
</testsuite></testsuites>"""
CONFIG = {"budget_tolerance": 0.25, "speed": {"reference_seconds": 0.5, "hard_limit": 5400}}


def test_files_are_shared_out_longest_first_to_the_least_loaded_lane():
    durations = {"a.py": 100, "b.py": 90, "c.py": 50, "d.py": 40}
    shares = plan.share_out(["a.py", "b.py", "c.py", "d.py", "new.py"], durations, 2)
    # a (100) and b (90) first, then new (60, unmeasured) to b's lane, c (50) and d (40) to a's.
    assert [share.files for share in shares] == [["a.py", "c.py", "d.py"], ["b.py", "new.py"]]
    assert [share.seconds for share in shares] == [190, 90 + plan.UNMEASURED_SECONDS]
    assert shares[1].unmeasured == ["new.py"] and shares[0].unmeasured == []


def test_every_integration_file_runs_in_exactly_one_lane():
    files = ["t%d.py" % index for index in range(17)]
    shares = plan.share_out(files, {name: index for index, name in enumerate(files)}, 3)
    assert sorted(name for share in shares for name in share.files) == sorted(files)
    totals = [share.seconds for share in shares]
    assert max(totals) - min(totals) <= 16  # within the longest file of each other


def test_the_committed_lanes_file_gives_a_static_lane_and_shared_integration_and_molecule_lanes(tmp_path):
    with open(os.path.join(ROOT, "tools", "ci", "lanes.yml")) as handle:
        config = yaml.safe_load(handle)
    integration_glob = config["lanes"]["integration"]["items"]
    items = {integration_glob: ["tests/integration/modules/test_x.py", "tests/integration/webhook/test_y.py"],
             "molecule/*/molecule.yml": ["molecule/day2/molecule.yml", "molecule/default/molecule.yml"]}
    lanes, shares = plan.lanes(config, items, {}, "/venv/bin/python", str(tmp_path))
    by_name = {lane.name: lane for lane in lanes}
    assert lanes[0].name == "static"
    assert all(step.env["JUNIT_DIR"] == str(tmp_path / "static") for step in lanes[0].steps)
    integration = [lane for lane in lanes if lane.name.startswith("integration-")]
    assert len(integration) == config["lanes"]["integration"]["shared"]
    for path in items[integration_glob]:
        assert sum(path in lane.steps[0].argv for lane in integration) == 1
    first = by_name["integration-1"].steps[0]
    assert first.argv[0] == "/venv/bin/python" and "--junitxml=%s" % (tmp_path / "integration-1" / "pytest.xml") \
        in first.argv and first.name == "pytest"
    molecule = [lane for lane in lanes if lane.name.startswith("molecule-")]
    assert sorted(item for lane in molecule for item in lane.steps[0].argv[1:]) == items["molecule/*/molecule.yml"]
    assert set(shares) == {lane.name for lane in integration + molecule}
    # Every build a lane or step waits for is one the run knows how to make.
    needed = {need for lane in lanes for need in [*lane.needs, *(n for step in lane.steps for n in step.needs)]}
    assert needed <= set(plan.builds(config))
    # The committed speed settings keep every lane inside CI's 90 minutes, however slow the machine.
    slowest = plan.speed(config, 100.0)
    assert max(plan.scaled_budget(config, lane.budget, slowest) for lane in lanes) * (
        1 + config["budget_tolerance"]) <= 90 * 60


def test_shared_items_are_found_in_folders_at_any_depth(tmp_path):
    for path in ("tests/integration/test_top.py", "tests/integration/webhook/test_deep.py",
                 "tests/integration/webhook/notes.md", "molecule/day2/molecule.yml"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).touch()
    config = {"lanes": {"static": {"steps": []},
                        "integration": {"shared": 3, "items": "tests/integration/**/test_*.py"},
                        "molecule": {"shared": 1, "items": "molecule/*/molecule.yml"}}}
    assert plan.shared_items(config, str(tmp_path)) == {
        "tests/integration/**/test_*.py": ["tests/integration/test_top.py", "tests/integration/webhook/test_deep.py"],
        "molecule/*/molecule.yml": ["molecule/day2/molecule.yml"]}


def test_the_committed_integration_lanes_run_every_integration_test_file():
    with open(os.path.join(ROOT, "tools", "ci", "lanes.yml")) as handle:
        config = yaml.safe_load(handle)
    on_disk = sorted(os.path.relpath(os.path.join(folder, name), ROOT)
                     for folder, _dirs, names in os.walk(os.path.join(ROOT, "tests", "integration"))
                     for name in names if name.startswith("test_") and name.endswith(".py"))
    assert on_disk and plan.shared_items(config, ROOT)[config["lanes"]["integration"]["items"]] == on_disk


def test_junit_reports_give_each_case_its_file_time_and_outcome(tmp_path):
    (tmp_path / "unit.xml").write_text(JUNIT)
    reports = plan.read_junit(str(tmp_path))
    cases = reports["unit"]
    assert [(case.file, case.outcome) for case in cases] == [
        ("tests/integration/modules/test_a.py", "passed"), ("tests/integration/modules/test_a.py", "failed"),
        ("tests/integration/webhook/test_b.py", "skipped")]
    assert plan.file_durations(cases) == {"tests/integration/modules/test_a.py": 14.5,
                                          "tests/integration/webhook/test_b.py": 0.1}
    assert plan.step_cases("unit", reports) == cases and plan.step_cases("un", reports) == []


def test_molecule_scenarios_are_read_from_the_lane_log():
    text = ("x\nmolecule caches: passed in 300s\nmolecule kind: SKIPPED - no kind\n"
            "molecule day2: FAILED after 12s: Apply the caches: {\"msg\": \"timed out\"}\n")
    cases = plan.parse_molecule(text)
    assert [(c.name, c.outcome, c.seconds, c.message) for c in cases] == [
        ("molecule/caches", "passed", 300.0, ""), ("molecule/kind", "skipped", 0.0, ""),
        ("molecule/day2", "failed", 12.0, 'Apply the caches: {"msg": "timed out"}')]
    # Measured under the path the molecule lanes share out.
    assert cases[0].file == "molecule/caches/molecule.yml"


def test_a_lane_over_its_budget_fails_the_run_and_checks_without_reports_count_once():
    config = CONFIG
    lanes = [plan.Lane("static", 100, [], []), plan.Lane("integration-1", 100, [], [])]
    outcomes = {"static": plan.LaneOutcome("static", [("ruff", 0), ("sanity", 1), ("unit", 0)], 90, 80),
                "integration-1": plan.LaneOutcome("integration-1", [("pytest", 0)], 126, 60)}
    unit = [plan.TestCase("tests/unit/test_u.py::t", "tests/unit/test_u.py", 1.0, "passed")]
    slow = [plan.TestCase("tests/integration/test_i.py::t%d" % i, "tests/integration/test_i.py", i, "passed")
            for i in range(30)]
    result = plan.summary(config, lanes, outcomes, {"static": {"unit": unit}, "integration-1": {"pytest": slow}},
                          {"binaries": (0, 5.0)}, 200, plan.Speed(0.4, 0.5, 1.0))
    assert (result.passed, result.failed, result.skipped) == (1 + 1 + 30, 1, 0)
    assert result.lanes_failed == ["static", "integration-1"]
    assert "OVER" in result.text and "failed steps: sanity" in result.text
    slowest = result.text.split("slowest tests:\n")[1].splitlines()[:plan.SLOWEST]
    assert slowest[0].endswith("::t29") and len(slowest) == plan.SLOWEST
    # A CI log shown by its tail shows the lanes and why the run failed.
    tail = result.text.splitlines()[-3:]
    assert tail[0].startswith("integration-1   OVER") and tail[1].startswith("run             failed")
    assert tail[2].startswith("failed lanes: static, integration-1;")


def test_the_speed_probe_prints_its_cpu_seconds():
    printed = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "ci", "speed_probe.py")], check=True,
                             capture_output=True, text=True).stdout
    assert 0.05 < float(printed) < 60


def test_a_slower_machine_scales_every_budget_up_to_the_hard_limit_and_a_faster_one_none():
    config = CONFIG
    assert plan.speed(config, 0.4).factor == 1.0
    assert plan.speed(config, 1.0).factor == 2.0
    # Five times slower: the 20-minute lane gets its 100 minutes' worth only up to 72, where 72 x 1.25 is the hard
    # limit; so does the 30-minute one, which would reach it at 2.4.
    machine = plan.speed(config, 2.5)
    assert machine.factor == 5.0
    assert plan.scaled_budget(config, 1200, machine) == plan.scaled_budget(config, 1800, machine) == 4320
    assert plan.scaled_budget(config, 1200, plan.speed(config, 1.44)) == 1200 * 2.88


def test_a_lane_within_its_scaled_budget_passes_and_the_table_says_by_how_much_it_was_scaled():
    config = CONFIG
    lanes = [plan.Lane("static", 100, [], [])]
    outcomes = {"static": plan.LaneOutcome("static", [("ruff", 0)], 240, 200)}
    scaled = plan.summary(config, lanes, outcomes, {}, {}, 240, plan.Speed(1.0, 0.5, 2.0))
    assert scaled.lanes_failed == []
    assert ("x 2.00 (the speed probe took 1.00 s of CPU here, 0.50 s on the budgets' machine), none past 72m00s"
            in scaled.text)
    assert scaled.text.splitlines()[-2].split()[:5] == ["static", "passed", "4m00s", "3m20s", "3m20s"]
    unscaled = plan.summary(config, lanes, outcomes, {}, {}, 240, plan.Speed(0.5, 0.5, 1.0))
    assert unscaled.lanes_failed == ["static"]


def test_the_tail_names_each_failed_test_with_the_first_line_of_its_failure(tmp_path):
    config = CONFIG
    (tmp_path / "pytest.xml").write_text(JUNIT.replace('<failure message="x"/>', '<failure message="AssertionError: '
                                                       'assert 3 == 2&#10;  more"/>'))
    lanes = [plan.Lane("integration-1", 100, [], [])]
    outcomes = {"integration-1": plan.LaneOutcome("integration-1", [("pytest", 1)], 60, 30)}
    result = plan.summary(config, lanes, outcomes, {"integration-1": plan.read_junit(str(tmp_path))}, {}, 60,
                          plan.Speed(0.5, 0.5, 1.0))
    assert result.text.splitlines()[-2:] == [
        "failed tests:", "  tests/integration/modules/test_a.py::test_two: AssertionError: assert 3 == 2"]
    many = [plan.TestCase("t.py::t%d" % i, "t.py", 1.0, "failed", "") for i in range(plan.FAILED_SHOWN + 3)]
    crowded = plan.summary(config, lanes, outcomes, {"integration-1": {"pytest": many}}, {}, 60,
                           plan.Speed(0.5, 0.5, 1.0))
    assert crowded.text.splitlines()[-1] == "  and 3 more: the lane logs name them"


def test_durations_keep_files_this_run_did_not_measure(tmp_path):
    path = str(tmp_path / "durations.json")
    plan.save_durations(path, {"tests/integration/test_a.py": 12.345}, {"tests/integration/test_b.py": 7})
    assert plan.load_durations(path) == {"tests/integration/test_a.py": 12.3, "tests/integration/test_b.py": 7}
    assert plan.load_durations(str(tmp_path / "missing.json")) == {}
