"""The periodic resync (controller/gkm_controller/resync.py): every cache the index holds, none being deleted,
reconciled from the index's copy through the Reconciler, every request it sends counted (LISTs, other reads, writes)
by a guard of the reconcile's own client, and each result handed to the retry path; one cache's failure does not stop
the others; the loop waits for the controller's readiness and runs every period. That the modules' reconcile of a
converged cache sends no request at all is the integration test's (test_controller.py): 0 LIST requests, 0 writes."""

import logging
import threading

from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex
from controller.gkm_controller.deletion import CacheDeleting
from controller.gkm_controller.reconciles import Reconciler
from controller.gkm_controller.resync import RequestCount, Resync


class Answer:
    status, data = 200, b'{"items": [], "metadata": {}}'


def cache(name, kind="GKMCache", namespace="team-a", deleting=False):
    metadata = {"name": name, "uid": "u-" + name, "resourceVersion": "3"}
    if namespace:
        metadata["namespace"] = namespace
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-28T04:00:00Z"
    return {"kind": kind, "metadata": metadata, "spec": {"image": "registry.local/a:1"}}


def indexed(*resources):
    index = ClusterIndex()
    for resource in resources:
        index.apply(None, resource)
    return index


def test_a_resync_reconciles_each_cache_from_the_index_and_counts_no_request_when_none_is_sent(caplog):
    index = indexed(cache("a"), cache("b", kind="ClusterGKMCache", namespace=None), cache("c", deleting=True))
    runs, followed = [], []

    def run(kube, kind, name, namespace, options, definition=None, source=None, live=None):
        runs.append((kind, name, namespace, options["state"], live["metadata"]["resourceVersion"]))
        return {"changed": False}

    resync = Resync(index, Reconciler(client.ApiClient(), index, {}, run=run), period=300,
                    follow=lambda kind, resource, result: followed.append((kind, resource["metadata"]["name"])))
    with caplog.at_level(logging.INFO, logger="controller.gkm_controller"):
        figures = resync.once()
    # Each run's own line says the resync started it.
    assert "reconcile GKMCache team-a/a (present; resync 1)" in caplog.text
    # The cache being deleted is its finalizer's alone.
    assert sorted(runs) == [("ClusterGKMCache", "b", None, "present", "3"), ("GKMCache", "a", "team-a", "present", "3")]
    assert sorted(followed) == [("ClusterGKMCache", "b"), ("GKMCache", "a")]
    assert figures == {"caches": 2, "changed": 0, "failed": 0, "seconds": figures["seconds"], "list_requests": 0,
                       "other_reads": 0, "writes": 0}
    assert "resync 1: 2 caches in" in caplog.text and "0 LIST requests, 0 other reads, 0 writes" in caplog.text


def test_every_request_of_a_resyncs_reconciles_is_counted_on_the_controllers_client(caplog):
    index = indexed(cache("a"), cache("b"))

    def run(kube, kind, name, namespace, options, definition=None, source=None, live=None):
        kube._send = lambda *args, **kwargs: Answer()  # the API server's answer, without one
        list(kube.pages("/api/v1/namespaces/team-a/persistentvolumeclaims"))
        kube.request("GET", "/api/v1/nodes/n1", what="Node n1")
        if name == "b":  # drift repaired: one write set
            kube.request("PATCH", "/apis/gkm.io/v1alpha1/namespaces/team-a/gkmcachenodes/n1/status", body={})
            kube.request("POST", "/api/v1/namespaces/team-a/persistentvolumeclaims", body={})
            return {"changed": True}
        return {"changed": False}

    with caplog.at_level(logging.INFO, logger="controller.gkm_controller.resync"):
        figures = Resync(index, Reconciler(client.ApiClient(), index, {}, run=run)).once()
    assert (figures["list_requests"], figures["other_reads"], figures["writes"], figures["changed"]) == (2, 2, 2, 1)
    # Each cache's own line: what a test on a shared cluster reads of its cache alone.
    assert "resync 1: GKMCache team-a/a unchanged; 1 LIST requests, 1 other reads, 0 writes" in caplog.text
    # The writes named: which drift the resync repaired.
    assert ("resync 1: GKMCache team-a/b changed; 1 LIST requests, 1 other reads, 2 writes (PATCH /apis/gkm.io/v1alpha1"
            "/namespaces/team-a/gkmcachenodes/n1/status; POST /api/v1/namespaces/team-a/persistentvolumeclaims)"
            in caplog.text)


def test_one_caches_failure_leaves_the_others_resynced(caplog):
    index = indexed(cache("a"), cache("b"))
    runs = []

    def reconcile(kind, resource, finalizing, count=None, **_):
        runs.append(resource["metadata"]["name"])
        if resource["metadata"]["name"] == "a":
            raise RuntimeError("registry unreachable")
        return {"changed": True}

    figures = Resync(index, reconcile).once()
    assert runs == ["a", "b"] and (figures["failed"], figures["changed"]) == (1, 1)
    assert "resync: GKMCache a failed: registry unreachable" in caplog.text


def test_a_cache_deleted_during_its_run_is_stopped_not_failed(caplog):
    index = indexed(cache("a"), cache("b"))

    def reconcile(kind, resource, finalizing, count=None, **_):
        if resource["metadata"]["name"] == "a":
            try:
                raise CacheDeleting("GKMCache team-a/a has a deletion timestamp")
            except CacheDeleting as refusal:  # as the pipeline reports it: a DistributeError raised from it
                raise DistributeError("applying the plan failed: %s" % refusal) from refusal
        return {"changed": False}

    with caplog.at_level(logging.INFO, logger="controller.gkm_controller.resync"):
        figures = Resync(index, reconcile).once()
    assert (figures["failed"], figures["changed"]) == (0, 0)
    assert "resync 1: GKMCache team-a/a stopped; 0 LIST requests, 0 other reads, 0 writes" in caplog.text
    assert "failed" not in caplog.text.replace("0 failed", "")


def test_the_loop_waits_for_readiness_then_resyncs_every_period_until_stopped():
    index, ready, done = indexed(cache("a")), threading.Event(), threading.Event()
    runs = []

    def reconcile(kind, resource, finalizing, count=None, **_):
        runs.append(resource["metadata"]["name"])
        if len(runs) == 2:
            done.set()
        return None

    resync = Resync(index, reconcile, period=0.01, ready=ready)
    resync.start()
    assert not done.wait(0.1) and runs == []  # not ready: nothing
    ready.set()
    assert done.wait(5)
    resync.stop()
    assert resync.resyncs >= 2


def test_the_count_tells_lists_from_other_reads_and_writes():
    count = RequestCount()
    for method, what in (("GET", "list /api/v1/nodes"), ("GET", "Node n1"), ("PATCH", "x"), ("DELETE", "y"),
                         ("POST", "z"), ("PUT", "w")):
        count.check(method, what)
    assert count.figures() == {"list_requests": 1, "other_reads": 1, "writes": 4}
    assert count.writes_named() == " (PATCH x; DELETE y; POST z; PUT w)"
    for number in range(3):
        count.check("POST", "v%d" % number)
    assert count.writes_named() == " (PATCH x; DELETE y; POST z; PUT w; POST v0, ...)"
    assert RequestCount().writes_named() == ""


def test_a_resync_that_fails_whole_is_logged_and_the_next_period_runs(caplog):
    index, done, runs = indexed(cache("a")), threading.Event(), []
    select, failures = index.select, iter([RuntimeError("index unreadable")])

    def flaky(kind, **kwargs):
        failure = next(failures, None)
        if failure:
            raise failure
        return select(kind, **kwargs)

    index.select = flaky

    def reconcile(kind, resource, finalizing, count=None, **_):
        runs.append(resource["metadata"]["name"])
        done.set()

    ready = threading.Event()
    ready.set()
    resync = Resync(index, reconcile, period=0.01, ready=ready)
    resync.start()
    assert done.wait(5)
    resync.stop()
    assert runs[0] == "a" and "resync failed: index unreadable" in caplog.text


def test_a_settled_cache_s_resync_stops_after_the_resolve_until_the_index_the_cache_or_the_digest_moves():
    """The Reconciler's record of a resync that wrote nothing (reconciles.py): the next resync of that cache stops
    after the resolve (pipeline.Settled) while the index's version, the cache's resourceVersion and the digest stay;
    any of them moving, a run that changed something, or a run that is not a resync's reads and plans again."""
    index = indexed(cache("a"))
    runs, digest, changes = [], ["sha256:" + "1" * 64], []
    settled_status = {"status": {"phase": "Extracted"}}

    def run(kube, kind, name, namespace, options, definition=None, source=None, live=None):
        if source.settled(digest[0]):  # where the pipeline checks, once the image is resolved
            runs.append("settled")
            return {"changed": False, "settled": True, "cache": {"digest": digest[0]}, "resource": settled_status}
        source.gather([lambda: None], "the facts")
        runs.append("read")
        return {"changed": bool(changes and changes.pop()), "cache": {"digest": digest[0]}, "resource": settled_status}

    reconciler = Reconciler(client.ApiClient(), index, {}, run=run)
    resync = Resync(index, reconciler)

    def resyncs(count):
        """What each of `count` resyncs did with the cache; none sends a write."""
        del runs[:]
        assert [resync.once()["writes"] for attempt in range(count)] == [0] * count
        return list(runs)

    assert resyncs(3) == ["read", "settled", "settled"]
    index.apply("ADDED", {"kind": "Namespace", "metadata": {"name": "team-new"}})  # anything the index holds
    assert resyncs(2) == ["read", "settled"]
    digest[0] = "sha256:" + "2" * 64  # the tag moved
    assert resyncs(2) == ["read", "settled"]
    index.apply("MODIFIED", dict(cache("a"), metadata=dict(cache("a")["metadata"], resourceVersion="4")))
    assert resyncs(2) == ["read", "settled"]
    changes.append(True)  # the next full run repairs something: the one after it reads again
    index.apply("ADDED", {"kind": "Namespace", "metadata": {"name": "team-newer"}})
    assert resyncs(3) == ["read", "read", "settled"]
    del runs[:]
    reconciler("GKMCache", index.get("GKMCache", "a", "team-a"), False)  # a cache event's run: never stopped early
    assert runs == ["read"] and resyncs(1) == ["settled"]
