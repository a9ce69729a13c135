"""The controller's kopf registration (controller/gkm_controller/handlers.py) and what its handlers do, driven
without a cluster: every indexed kind but the Nodes feeds the index before kopf's readiness gate, no cache handler
reconciles before the Nodes' first listing is in, a cache being deleted is reconciled by its finalizer only, a cache not
settled is handed to the one retry path (not kopf's), and kopf keeps today's finalizer name.

kopf 1.45.2 is pinned in requirements/dev.txt for Python 3.11 and later; without it this file skips."""

import logging
import threading

import pytest

kopf = pytest.importorskip("kopf")

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_FINALIZER  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import (  # noqa: E402
    INDEXED_KINDS,
    ClusterIndex,
)
from controller.gkm_controller import handlers  # noqa: E402


def cache(deleting=False):
    metadata = {"name": "vector-add", "namespace": "team-a", "uid": "u-1"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"kind": "GKMCache", "metadata": metadata, "spec": {"image": "x"}}


@pytest.fixture
def controller():
    calls = {"reconcile": [], "ready": []}
    built = handlers.Controller(ClusterIndex(), lambda kind, body, finalizing: calls["reconcile"].append(
        (kind, body["metadata"]["name"], finalizing)), on_ready=lambda: calls["ready"].append(True))
    built.calls = calls
    return built


@pytest.fixture
def listed(controller):
    """The controller once the node watch's first listing is in."""
    controller.nodes_in()
    return controller


def test_every_kind_gets_an_index_and_an_event_handler_and_the_caches_a_finalizer(listed):
    controller = listed
    registry = handlers.register(kopf.OperatorRegistry(), controller)
    indexing = registry._indexing.get_all_handlers()
    watching = registry._watching.get_all_handlers()
    assert len(indexing) == len(watching) == len(INDEXED_KINDS) - 1
    assert not [h for h in indexing + watching if h.selector.plural == "nodes"]  # the controller's own watch
    changing = registry._changing.get_all_handlers()
    deletes = [h for h in changing if h.reason is not None and h.reason.value == "delete"]
    assert len(deletes) == 2 and all(h.requires_finalizer for h in deletes)  # not optional: kopf keeps the mark
    assert all(not h.labels and not h.annotations and h.when is None for h in deletes)  # no filter can miss a cache
    assert len(changing) == 2 * 4
    # No handler returns a result: kopf would write it into the cache's status.
    controller.reconcile = lambda kind, body, finalizing: {"changed": True}
    assert all(h.fn(body=cache(deleting=h in deletes)) is None for h in changing)


def test_settings_keep_todays_finalizer_and_write_no_event_for_a_success():
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    assert settings.persistence.finalizer == CACHE_FINALIZER
    assert settings.persistence.progress_storage.prefix == "gkm.io"
    assert settings.persistence.diffbase_storage.prefix == "gkm.io"
    assert settings.posting.level == logging.WARNING
    assert settings.peering.standalone is True
    assert len(list(settings.watching.label_selectors)) == 3


def test_no_cache_handler_reconciles_before_the_nodes_first_listing_is_in(controller):
    handled = threading.Thread(target=controller.cache_changed, args=("GKMCache", cache()))
    handled.start()
    handled.join(0.2)
    assert handled.is_alive() and controller.calls["reconcile"] == []  # waiting for the Nodes
    controller.watched("Namespace", {"type": None, "object": {"metadata": {"name": "default"}}})
    assert not controller.ready.is_set()  # kopf's kinds are in, the Nodes not yet
    controller.nodes_in()
    handled.join(5)
    assert controller.calls["reconcile"] == [("GKMCache", "vector-add", False)]
    assert controller.ready.is_set() and controller.calls["ready"] == [True]
    controller.nodes_in()
    assert controller.calls["ready"] == [True]  # once


def test_a_listing_that_never_comes_has_kopf_retry_the_handler(controller, monkeypatch):
    monkeypatch.setattr(handlers, "NODES_LISTED_WAIT_SECONDS", 0.01)
    with pytest.raises(kopf.TemporaryError):
        controller.cache_deleted("GKMCache", cache(deleting=True))
    assert controller.calls["reconcile"] == []


def test_a_cache_being_deleted_is_reconciled_by_its_finalizer_only(listed):
    controller = listed
    controller.cache_changed("GKMCache", cache())
    assert controller.cache_changed("GKMCache", cache(deleting=True)) is None
    controller.cache_deleted("GKMCache", cache(deleting=True))
    assert controller.calls["reconcile"] == [("GKMCache", "vector-add", False), ("GKMCache", "vector-add", True)]


def test_every_reconcile_of_a_changed_cache_is_handed_to_the_one_retry_path_and_kopf_retries_none(listed):
    """The coalescer's follow decides whether to run it again (test_controller_coalesce.py); the handler returns."""
    followed = []
    listed.recheck = lambda kind, body, result: followed.append((kind, body["metadata"]["name"], result))
    for result in ({"rollout": {"moving": True}}, {"resource": {"status": {"phase": "Extracting"}}}, None):
        listed.reconcile = lambda kind, body, finalizing, _result=result: _result
        assert listed.cache_changed("GKMCache", cache()) == result
    assert followed == [("GKMCache", "vector-add", {"rollout": {"moving": True}}),
                        ("GKMCache", "vector-add", {"resource": {"status": {"phase": "Extracting"}}}),
                        ("GKMCache", "vector-add", None)]
    assert listed.cache_changed("GKMCache", cache(deleting=True)) is None and len(followed) == 3


def test_deletions_reach_the_index_through_the_event_handler(controller):
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "team-a"}}
    controller.indexed("PersistentVolumeClaim", pvc)
    controller.watched("PersistentVolumeClaim", {"type": "MODIFIED", "object": pvc})
    assert controller.index.count("PersistentVolumeClaim") == 1
    controller.watched("PersistentVolumeClaim", {"type": "DELETED", "object": pvc})
    assert controller.index.count("PersistentVolumeClaim") == 0


def test_a_deleted_pod_hands_the_cache_whose_claim_it_named_to_the_reconcile():
    released = []
    controller = handlers.Controller(ClusterIndex(), lambda *args: None, released=lambda kind, body: released.append(
        (kind, body["metadata"]["name"])))
    controller.indexed("GKMCache", cache())
    labels = {"gkm.io/cache": "vector-add", "gkm.io/cache-namespace": "team-a"}
    controller.indexed("PersistentVolumeClaim", {"kind": "PersistentVolumeClaim", "metadata": {
        "name": "vector-add", "namespace": "team-a", "labels": labels}})
    pod = {"metadata": {"name": "w", "namespace": "team-a"},
           "spec": {"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "vector-add"}}]}}
    controller.watched("Pod", {"type": "MODIFIED", "object": pod})
    assert released == []
    controller.watched("Pod", {"type": "DELETED", "object": pod})
    assert released == [("GKMCache", "vector-add")]
