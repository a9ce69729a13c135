"""A cache's reconcile in the controller (controller/gkm_controller/reconciles.py): the modules' reconcile, fed by
the index and writing through the deletion guard, the finalizer's as state=absent, one at a time per cache."""

import logging
import threading
import time

from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex, IndexSource
from controller.gkm_controller.deletion import CacheDeleting, GuardedKube
from controller.gkm_controller.reconciles import CacheLocks, Reconciler


def cache(name="vector-add", deleting=False):
    metadata = {"name": name, "namespace": "team-a", "uid": "u-" + name}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"kind": "GKMCache", "metadata": metadata, "spec": {"image": "x"}}


class Recorder:
    def __init__(self, hold=0.0):
        self.calls, self.hold, self.running, self.overlap = [], hold, 0, False
        self._lock = threading.Lock()

    def __call__(self, kube, kind, name, namespace, options, definition=None, source=None, live=None):
        assert live is not None  # the body, never a GET
        with self._lock:
            self.running += 1
            self.overlap = self.overlap or self.running > 1
        time.sleep(self.hold)
        self.calls.append((kube, kind, name, namespace, options, definition, source))
        self.live = live
        with self._lock:
            self.running -= 1
        return {"changed": False}


def reconciler(run, index=None):
    return Reconciler(client.ApiClient(), index or ClusterIndex(), {"extract_image": "tools:1"}, run=run)


def test_a_cache_is_reconciled_from_the_index_through_the_guard_with_its_body_as_the_definition():
    run = Recorder()
    reconciler(run)("GKMCache", cache(), False)
    kube, kind, name, namespace, options, definition, source = run.calls[0]
    assert (kind, name, namespace) == ("GKMCache", "vector-add", "team-a")
    assert options == {"extract_image": "tools:1", "state": "present"}
    assert definition == cache() and isinstance(source, IndexSource) and isinstance(kube, GuardedKube)
    assert kube.guard.finalizing is False


def test_the_finalizer_reconciles_state_absent_and_may_write():
    run = Recorder()
    reconciler(run)("GKMCache", cache(deleting=True), True)
    kube, _kind, _name, _namespace, options, definition, _source = run.calls[0]
    assert options["state"] == "absent" and definition is None
    assert kube.guard.why_not() is None


def test_a_reconcile_that_was_not_the_finalizers_cannot_write_once_the_cache_is_deleting():
    index = ClusterIndex()
    index.apply(None, cache())
    run = Recorder()
    reconciler(run, index)("GKMCache", cache(), False)
    kube = run.calls[0][0]
    index.apply("MODIFIED", cache(deleting=True))
    try:
        kube.guard.check("POST", "PersistentVolume pv-1")
    except CacheDeleting:
        pass
    else:
        raise AssertionError("the write went through")


def test_a_run_handed_an_older_copy_plans_from_the_index_copy_it_finds_once_it_holds_the_lock():
    index = ClusterIndex()
    newer = dict(cache(), spec={"image": "y"})
    index.apply(None, newer)
    run = Recorder()
    reconciler(run, index)("GKMCache", cache(), False)
    definition = run.calls[0][5]
    assert definition["spec"] == {"image": "y"} and run.live["spec"] == {"image": "y"}


def test_a_run_finds_the_cache_being_deleted_in_the_index_and_leaves_it_to_the_finalizer(caplog):
    index = ClusterIndex()
    index.apply(None, cache(deleting=True))
    run = Recorder()
    with caplog.at_level(logging.INFO):
        assert reconciler(run, index)("GKMCache", cache(), False) is None
    assert run.calls == [] and "being deleted: nothing but its finalizer runs" in caplog.text


def test_the_finalizer_runs_with_its_own_body_whatever_the_index_holds():
    index = ClusterIndex()
    index.apply(None, dict(cache(), spec={"image": "y"}))
    run = Recorder()
    reconciler(run, index)("GKMCache", cache(deleting=True), True)
    assert len(run.calls) == 1 and run.live["spec"] == {"image": "x"}


def test_one_cache_is_reconciled_one_at_a_time_and_two_caches_side_by_side():
    run = Recorder(hold=0.05)
    shared = reconciler(run)
    threads = [threading.Thread(target=shared, args=("GKMCache", cache(), False)) for _thread in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(run.calls) == 3 and not run.overlap

    run = Recorder(hold=0.2)
    shared = reconciler(run)
    threads = [threading.Thread(target=shared, args=("GKMCache", cache(name), False)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert run.overlap


def test_the_locks_are_per_cache():
    locks = CacheLocks()
    assert locks.of("GKMCache", "team-a", "x") is locks.of("GKMCache", "team-a", "x")
    assert locks.of("GKMCache", "team-a", "x") is not locks.of("GKMCache", "team-b", "x")
    assert locks.of("ClusterGKMCache", None, "x") is locks.of("ClusterGKMCache", "", "x")


def test_writes_a_run_left_unshown_are_waited_for_by_the_next_run_of_that_cache_only(caplog):
    """A run labelled two Nodes and ended before the index showed one of them: the next run of the same cache waits
    for that one at its first read, another cache's run does not. Each run's line counts both."""
    index = ClusterIndex()
    for name in ("gpu-1", "gpu-2"):
        index.apply(None, {"kind": "Node", "metadata": {"name": name, "resourceVersion": "1"}})
    labelled, waits = [], []

    def run(kube, kind, name, namespace, options, definition=None, source=None, live=None):
        if not labelled:
            labelled.append(name)  # the first run writes last, as the status stage does, and reads no more
            kube.record_write("Node", "", "gpu-1", "1")
            kube.record_write("Node", "", "gpu-2", "5")
            return {"changed": True, "node_labels": [{"node": "gpu-1", "value": "abc"},
                                                     {"node": "gpu-2", "value": None}]}
        started = time.monotonic()
        source.gather([lambda: None], "reading")
        waits.append((name, time.monotonic() - started))
        return {"changed": False}

    caplog.set_level(logging.INFO, logger="controller.gkm_controller.reconciles")
    reconcile = reconciler(run, index)
    reconcile("GKMCache", cache(), False)
    reconcile("GKMCache", cache("other"), False)
    shown = threading.Timer(0.2, index.apply, ("MODIFIED", {"kind": "Node", "metadata": {
        "name": "gpu-2", "resourceVersion": "6"}}))
    shown.start()
    try:
        reconcile("GKMCache", cache(), False)
    finally:
        shown.cancel()
    assert [name for name, _wait in waits] == ["other", "vector-add"]
    assert waits[0][1] < 0.1 and 0.15 < waits[1][1] < 10
    assert reconcile._unshown == {}
    assert [message.split("; ", 2)[2] for message in caplog.messages if message.startswith("reconciled ")] == [
        "labels set=1 removed=1; unshown=1", "labels set=0 removed=0; unshown=0", "labels set=0 removed=0; unshown=0"]


def test_an_object_a_run_created_and_deleted_leaves_nothing_for_the_next_run_to_wait_for(caplog):
    """A run that made a scrub Job and deleted it before the index saw either write: the Job's creation never shows
    (the index's copy went with the DELETED event), its deletion does. The next run of the cache waits for nothing:
    it used to wait WRITES_SHOWN_SECONDS (15 s) for that creation, and every run after it too."""
    index = ClusterIndex()
    waits = []

    def run(kube, kind, name, namespace, options, definition=None, source=None, live=None):
        if not kube.written and not waits:
            kube.record_write("Job", "gkm-system", "gkm-scrub-1", "7")
            kube.record_write("Job", "gkm-system", "gkm-scrub-1", None)
            waits.append(None)
            return {"changed": True}
        started = time.monotonic()
        source.gather([lambda: None], "reading")
        waits.append(time.monotonic() - started)
        return {"changed": False}

    reconcile = reconciler(run, index)
    reconcile("GKMCache", cache(), False)
    assert reconcile._unshown == {}
    reconcile("GKMCache", cache(), False)
    assert waits[1] < 0.1
