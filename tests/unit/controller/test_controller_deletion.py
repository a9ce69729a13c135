"""Deletion is final (controller/gkm_controller/deletion.py): once a cache has a deletion timestamp, or is gone, no
write of a reconcile for it reaches the API server, except the finalizer's; reads go on."""

import json

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex
from controller.gkm_controller.deletion import CacheDeleting, DeletionGuard, GuardedKube, deletion_requested


def cache(uid="u-1", deleting=False, kind="GKMCache", namespace="team-a"):
    metadata = {"name": "vector-add", "uid": uid, "resourceVersion": "1"}
    if namespace:
        metadata["namespace"] = namespace
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"kind": kind, "metadata": metadata, "spec": {"image": "x"}}


def held(*bodies):
    index = ClusterIndex()
    for body in bodies:
        index.apply(None, body)
    return index


class Sent:
    """What reached the wire: common/kube.py's _send replaced, so no server is needed."""

    class Response:
        status, data = 200, json.dumps({})

    def __init__(self):
        self.calls = []

    def __call__(self, method, path, *args, **kwargs):
        self.calls.append((method, path))
        return self.Response()


def guarded(guard):
    kube = GuardedKube(client.ApiClient(), guard)
    kube._send = Sent()
    return kube


def test_a_deletion_timestamp_on_the_handlers_body_refuses_every_write_but_no_read():
    kube = guarded(DeletionGuard("GKMCache", "vector-add", "team-a", body=cache(deleting=True)))
    kube.request("GET", "/api/v1/persistentvolumes/pv-1")
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(CacheDeleting, match="GKMCache team-a/vector-add: it has a deletion timestamp"):
            kube.request(method, "/api/v1/persistentvolumes/pv-1", what="PersistentVolume pv-1")
    assert kube._send.calls == [("GET", "/api/v1/persistentvolumes/pv-1")]
    assert kube.writes == 0


def test_the_finalizer_writes_for_a_cache_being_deleted():
    kube = guarded(DeletionGuard("GKMCache", "vector-add", "team-a", body=cache(deleting=True), finalizing=True))
    kube.delete("PersistentVolume", "pv-1")
    assert kube._send.calls == [("DELETE", "/api/v1/persistentvolumes/pv-1")]


def test_a_reconcile_running_when_the_deletion_arrives_stops_at_its_next_write():
    index = held(cache())
    kube = guarded(DeletionGuard("GKMCache", "vector-add", "team-a", body=cache(), index=index))
    kube.apply({"kind": "PersistentVolume", "metadata": {"name": "pv-1"}})
    index.apply("MODIFIED", cache(deleting=True))  # the watch delivers the deletion mid-reconcile
    with pytest.raises(CacheDeleting, match="refused PATCH PersistentVolume pv-1"):
        kube.apply({"kind": "PersistentVolume", "metadata": {"name": "pv-1"}})
    assert len(kube._send.calls) == 1


def test_a_cache_gone_from_the_index_or_replaced_by_a_new_one_of_its_name_gets_no_write():
    index = held(cache())
    guard = DeletionGuard("GKMCache", "vector-add", "team-a", body=cache(), index=index)
    assert guard.why_not() is None
    index.apply("DELETED", cache())
    assert guard.why_not() == "it is gone"
    index.apply("ADDED", cache(uid="u-2"))
    assert "another uid" in guard.why_not()


def test_a_cache_the_index_has_not_seen_yet_may_write():
    # kopf may run a create handler before the cache's own watch event reached the index.
    guard = DeletionGuard("ClusterGKMCache", "vector-add", body=cache(kind="ClusterGKMCache", namespace=None),
                          index=ClusterIndex())
    assert guard.why_not() is None
    guard.check("PATCH", "anything")


def test_a_cache_the_index_does_not_hold_at_the_first_check_is_asked_of_the_api_server():
    """A run queued behind its cache's finalizer starts once the cache is gone from the index (at 2,000 nodes one
    wrote PVs for minutes after the finalizer): the API server says whether it is new or gone."""
    answers = {"new": cache(), "gone": None, "deleting": cache(deleting=True), "replaced": cache(uid="u-2")}
    reads = []

    def guard(answer):
        def read():
            reads.append(answer)
            return answers[answer]
        return DeletionGuard("GKMCache", "vector-add", "team-a", body=cache(), index=ClusterIndex(), read=read)

    assert guard("new").why_not() is None
    assert guard("gone").why_not() == "it is gone"
    assert guard("deleting").why_not() == "it has a deletion timestamp"
    assert "another uid" in guard("replaced").why_not()
    kube = guarded(guard("gone"))
    with pytest.raises(CacheDeleting, match="it is gone, so only its finalizer writes; refused POST"):
        kube.request("POST", "/api/v1/persistentvolumes", what="PersistentVolume pv-1")
    assert kube._send.calls == []
    # Once the index holds it, the index answers alone.
    index = held(cache())
    checked = DeletionGuard("GKMCache", "vector-add", "team-a", body=cache(), index=index, read=reads.append)
    assert checked.why_not() is None and reads == ["new", "gone", "deleting", "replaced", "gone"]


def test_only_a_deletion_timestamp_counts():
    assert deletion_requested(cache(deleting=True)) and not deletion_requested(cache())
    assert not deletion_requested(None) and not deletion_requested({"metadata": {"deletionTimestamp": None}})
