"""common/timings.py: seconds per phase of a module run, and the process's age when its work starts."""

import time

from ansible_collections.gkm.cluster.plugins.module_utils.common.timings import Timings, process_age


def test_a_phase_entered_twice_adds_up_and_a_failing_phase_still_counts():
    timings = Timings()
    with timings.phase("read"):
        time.sleep(0.02)
    try:
        with timings.phase("write"):
            raise ValueError("the write failed")
    except ValueError:
        pass
    with timings.phase("read"):
        time.sleep(0.02)
    result = timings.result()
    assert set(result) == {"read", "write"}
    assert 0.04 <= result["read"] < 1 and 0 <= result["write"] < 0.5


def test_the_process_age_is_the_time_since_this_interpreter_started():
    age = process_age()
    # pytest has been running for a while, but not for hours; /proc is there on the machines tests run on.
    assert age is not None and 0 < age < 3600
