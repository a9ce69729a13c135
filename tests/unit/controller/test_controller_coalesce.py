"""Node events coalesced (controller/gkm_controller/coalesce.py): the caches submitted within the window run once
each, with the newest copy, on the executor; a failed run is logged and leaves the executor's thread alive; a run
that ends before its cache settled runs again, backing off; one the deletion guard stopped does not."""

import logging

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from controller.gkm_controller.coalesce import Coalescer
from controller.gkm_controller.deletion import CacheDeleting


def cache(name, version="1", namespace="team-a"):
    return {"kind": "GKMCache", "metadata": {"name": name, "namespace": namespace, "resourceVersion": version}}


class Clock:
    """schedule(delay, function) kept until fire()."""

    def __init__(self):
        self.scheduled = []

    def __call__(self, delay, function):
        self.scheduled.append((delay, function))

    def fire(self):
        scheduled, self.scheduled = self.scheduled, []
        return [function() for _delay, function in scheduled]


class Inline:
    def submit(self, function, *args):
        return function(*args)


def test_a_burst_of_submits_runs_each_cache_once_with_its_newest_copy_after_the_window():
    runs, clock = [], Clock()
    coalescer = Coalescer(lambda kind, resource, finalizing, **_: runs.append((kind, resource, finalizing)), Inline(),
                          schedule=clock)
    for version in range(50):
        coalescer.submit("GKMCache", cache("a", str(version)))
        coalescer.submit("ClusterGKMCache", cache("a", str(version), namespace=None))
    assert runs == [] and [entry[0] for entry in clock.scheduled] == [0.5]  # one window for the whole burst
    assert clock.fire() == [2]
    assert [(kind, resource["metadata"]["resourceVersion"], finalizing) for kind, resource, finalizing in runs] == [
        ("GKMCache", "49", False), ("ClusterGKMCache", "49", False)]
    coalescer.submit("GKMCache", cache("a", "50"))  # a later submit opens a new window
    assert len(clock.scheduled) == 1 and clock.fire() == [1] and len(runs) == 3


def test_a_run_from_the_queue_says_so():
    causes, clock = [], Clock()
    coalescer = Coalescer(lambda kind, resource, finalizing, cause: causes.append(cause), Inline(), schedule=clock)
    coalescer.submit("GKMCache", cache("a"))
    clock.fire()
    assert causes == ["queued: node events, a recheck or a released claim"]


def test_a_failed_run_is_logged_and_the_next_window_runs_again(caplog):
    calls, clock = [], Clock()

    def run(kind, resource, finalizing, **_):
        calls.append(resource["metadata"]["name"])
        raise RuntimeError("API server unreachable")

    coalescer = Coalescer(run, Inline(), schedule=clock)
    coalescer.submit("GKMCache", cache("a"))
    clock.fire()
    coalescer.submit("GKMCache", cache("a"))
    clock.fire()
    assert calls == ["a", "a"]
    assert "queued reconcile failed: API server unreachable" in caplog.text


def test_a_run_the_deletion_guard_stopped_is_not_run_again_nor_called_a_failure(caplog):
    clock = Clock()

    def run(kind, resource, finalizing, **_):
        # As the pipeline reports it: a DistributeError raised from the guard's refusal.
        try:
            raise CacheDeleting("GKMCache team-a/a: it has a deletion timestamp, so only its finalizer writes; "
                                "refused POST PersistentVolume pv-1")
        except CacheDeleting as refused:
            raise DistributeError(str(refused)) from refused

    coalescer = Coalescer(run, Inline(), schedule=clock, held=lambda kind, resource: resource)
    with caplog.at_level(logging.INFO):
        coalescer.submit("GKMCache", cache("a"))
        clock.fire()
    assert clock.scheduled == [] and "failed" not in caplog.text
    assert "queued reconcile stopped, the finalizer's turn: GKMCache team-a/a" in caplog.text


def status(phase):
    return {"resource": {"status": {"phase": phase}}}


def test_a_run_that_ends_before_its_cache_settled_runs_again_as_the_index_holds_it_backing_off():
    results = iter([status("Extracting"), {"rollout": {"moving": True}, **status("Extracted")}, status("Extracted")])
    runs, clock, held = [], Clock(), {"a": cache("a", "7")}
    coalescer = Coalescer(lambda kind, resource, finalizing, **_: runs.append(resource) or next(results), Inline(),
                          schedule=clock, held=lambda kind, resource: held.get(resource["metadata"]["name"]))
    coalescer.submit("GKMCache", cache("a", "1"))
    clock.fire()  # the window: the first run, still Extracting
    assert [delay for delay, _function in clock.scheduled] == [5]
    clock.fire()  # the recheck submits the index's copy: a window, then the run, its rollout still moving
    clock.fire()
    assert [delay for delay, _function in clock.scheduled] == [10]  # backing off
    clock.fire()
    clock.fire()
    assert clock.scheduled == []  # settled: nothing more
    assert [resource["metadata"]["resourceVersion"] for resource in runs] == ["1", "7", "7"]
    # Gone or being deleted by the time of the recheck: no run.
    coalescer.submit("GKMCache", cache("b"))
    results = iter([status("Pending")])
    coalescer.run = lambda kind, resource, finalizing, **_: next(results)
    clock.fire()
    clock.fire()
    assert clock.scheduled == []


def test_a_reconcile_started_elsewhere_is_followed_on_the_same_retry_path_with_one_count_of_attempts():
    """kopf's handlers and the resync hand their results to follow: an unsettled cache is submitted again, backing
    off across whoever ran it; a settled one ends the attempts; without the index's copy (held None) nothing."""
    runs, clock, held = [], Clock(), {"a": cache("a", "9")}
    coalescer = Coalescer(lambda kind, resource, finalizing, **_: runs.append(resource) or status("Extracted"),
                          Inline(), schedule=clock, held=lambda kind, resource: held.get(resource["metadata"]["name"]))
    assert coalescer.follow("GKMCache", cache("a", "1"), status("Pending")) is True
    assert coalescer.follow("GKMCache", cache("a", "1"), status("Extracting")) is True  # a second attempt
    assert [delay for delay, _function in clock.scheduled] == [5, 10]
    clock.fire()  # both rechecks submit the index's copy: one window
    clock.fire()
    assert [resource["metadata"]["resourceVersion"] for resource in runs] == ["9"]
    assert clock.scheduled == [] and coalescer.follow("GKMCache", cache("a"), status("Extracted")) is False
    assert Coalescer(None, Inline(), schedule=clock).follow("GKMCache", cache("a"), status("Pending")) is False


def test_a_reconcile_that_moved_the_cache_on_starts_the_back_off_again():
    """A long rollout: each wave that starts is a change, so the next recheck comes after the first delay again."""
    clock = Clock()
    coalescer = Coalescer(lambda kind, resource, finalizing, **_: status("Extracted"), Inline(), schedule=clock,
                          held=lambda kind, resource: resource)
    moving = {"rollout": {"moving": True}, **status("Extracted")}
    for result in (moving, moving, dict(moving, changed=True), moving):
        assert coalescer.follow("GKMCache", cache("a"), result) is True
    assert [delay for delay, _function in clock.scheduled] == [5, 10, 5, 10]


def test_a_failed_run_is_run_again_backing_off(caplog):
    """A reconcile that raised (the serving PVC's bind wait gave up) is submitted again as the index holds it."""
    calls, clock = [], Clock()

    def run(kind, resource, finalizing, **_):
        calls.append(resource["metadata"]["resourceVersion"])
        if len(calls) < 3:
            raise RuntimeError("timed out waiting for the serving PVC(s) to bind")
        return status("Extracted")

    caplog.set_level(logging.INFO, logger="controller.gkm_controller.coalesce")
    coalescer = Coalescer(run, Inline(), schedule=clock, held=lambda kind, resource: cache("a", "8"))
    coalescer.submit("GKMCache", cache("a", "1"))
    clock.fire()
    assert [delay for delay, _function in clock.scheduled] == [5]
    clock.fire()
    clock.fire()
    assert [delay for delay, _function in clock.scheduled] == [10]
    clock.fire()
    clock.fire()
    assert calls == ["1", "8", "8"] and clock.scheduled == []
    assert "its reconcile failed, reconciled again in 5 s" in caplog.text


def test_once_stopped_nothing_is_submitted_and_a_timer_still_due_hands_over_nothing():
    """At kopf's cleanup: a timer firing after the stop met an executor that refused work at interpreter shutdown
    (RuntimeError in the timer's thread, seen when a 2,000-node benchmark stopped its controller)."""
    runs, clock = [], Clock()
    coalescer = Coalescer(lambda kind, resource, finalizing, **_: runs.append(resource) or status("Extracting"),
                          Inline(), schedule=clock, held=lambda kind, resource: resource)
    coalescer.submit("GKMCache", cache("a"))
    coalescer.stop()
    assert clock.fire() == [0] and runs == []
    coalescer.submit("GKMCache", cache("b"))
    assert clock.scheduled == [] and coalescer.follow("GKMCache", cache("a"), status("Extracting")) is False


class Deferred:
    """An executor whose tasks run when the test says (a run waiting for its cache's lock)."""

    def __init__(self):
        self.tasks = []

    def submit(self, function, *args):
        self.tasks.append((function, args))

    def run_all(self):
        tasks, self.tasks = self.tasks, []
        return [function(*args) for function, args in tasks]


def test_a_cache_submitted_while_its_run_is_on_the_executor_runs_once_more_after_it_as_the_index_holds_it():
    """At 2,000 nodes a cold run's own label events queued a whole-cache run per window behind its lock: now one
    more run at most, of the index's copy, however many times the cache was submitted meanwhile."""
    runs, clock, executor = [], Clock(), Deferred()
    coalescer = Coalescer(lambda kind, resource, finalizing, **_: runs.append("%s@%s" % (
        resource["metadata"]["name"], resource["metadata"]["resourceVersion"])), executor, schedule=clock,
        held=lambda kind, resource: cache(resource["metadata"]["name"], "index"))
    coalescer.submit("GKMCache", cache("a", "1"))
    assert clock.fire() == [1] and len(executor.tasks) == 1
    for version in ("2", "3", "4"):
        coalescer.submit("GKMCache", cache("a", version))
        if version != "4":
            coalescer.submit("GKMCache", cache("b", version))
        assert clock.fire() == [1 if version == "2" else 0]  # b once, then on the executor too; a on it already
    assert len(executor.tasks) == 2
    executor.run_all()
    assert runs == ["a@1", "b@2"] and clock.fire() == [2]  # both submitted meanwhile: once more each
    executor.run_all()
    assert runs == ["a@1", "b@2", "a@index", "b@index"] and clock.scheduled == [] and executor.tasks == []
