"""The controller's kopf registration (controller/gkm_controller/handlers.py) and what its handlers do, driven
without a cluster: every kind kopf watches feeds the index before kopf's readiness gate, no cache handler reconciles
before every own watch's first listing is in, a change reconciles present and the finalizer absent, a cache not
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
from controller.gkm_controller.feed import OWN_WATCHES, watched_kinds  # noqa: E402


def cache(deleting=False):
    metadata = {"name": "vector-add", "namespace": "team-a", "uid": "u-1"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"kind": "GKMCache", "metadata": metadata, "spec": {"image": "x"}}


@pytest.fixture
def controller():
    calls = {"reconcile": [], "ready": []}
    built = handlers.Controller(ClusterIndex(), lambda kind, body, finalizing, **_: calls["reconcile"].append(
        (kind, body["metadata"]["name"], finalizing)), on_ready=lambda: calls["ready"].append(True))
    built.calls = calls
    return built


@pytest.fixture
def listed(controller):
    """The controller once every own watch's first listing is in."""
    for kind in OWN_WATCHES:
        controller.kind_listed(kind)
    return controller


def test_every_kind_gets_an_index_and_an_event_handler_and_the_caches_a_finalizer(listed):
    controller = listed
    registry = handlers.register(kopf.OperatorRegistry(), controller)
    indexing = registry._indexing.get_all_handlers()
    watching = registry._watching.get_all_handlers()
    assert len(indexing) == len(watching) == len(INDEXED_KINDS) - len(OWN_WATCHES)
    own_plurals = {plural for _group, _version, plural, _selector in
                   (watched_kinds()[kind] for kind in OWN_WATCHES)}
    assert not [h for h in indexing + watching if h.selector.plural in own_plurals]  # the controller's own watches
    changing = registry._changing.get_all_handlers()
    deletes = [h for h in changing if h.reason is not None and h.reason.value == "delete"]
    assert len(deletes) == 2 and all(h.requires_finalizer for h in deletes)  # not optional: kopf keeps the mark
    assert all(not h.labels and not h.annotations and h.when is None for h in deletes)  # no filter can miss a cache
    assert len(changing) == 2 * 4
    # No handler returns a result: kopf would write it into the cache's status.
    causes = []
    controller.reconcile = lambda kind, body, finalizing, cause: causes.append(cause) or {"changed": True}
    # (kopf's resume handler has no reason of its own: kopf passes the cause's, "resume" at start-up)
    assert all(h.fn(body=cache(deleting=h in deletes), reason=h.reason or "resume") is None for h in changing)
    # Each run's log line says what started it: kopf's reason, or the finalizer.
    assert sorted(set(causes)) == ["its finalizer", "kopf create", "kopf resume", "kopf update"]


def test_settings_keep_todays_finalizer_and_write_no_event_for_a_success():
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    assert settings.persistence.finalizer == CACHE_FINALIZER
    assert settings.persistence.progress_storage.prefix == "gkm.io"
    assert settings.persistence.diffbase_storage.prefix == "gkm.io"
    assert settings.posting.level == logging.WARNING
    assert settings.peering.standalone is True
    assert not list(settings.watching.label_selectors)  # kopf's kinds are watched whole
    assert settings.watching.chunk_size is None  # kopf's few objects in one request: no continue token to expire


def test_no_cache_handler_reconciles_before_every_own_watchs_first_listing_is_in(controller):
    handled = threading.Thread(target=controller.cache_changed, args=("GKMCache", cache()))
    handled.start()
    controller.watched("Namespace", {"type": None, "object": {"metadata": {"name": "default"}}})
    for kind in OWN_WATCHES[:-1]:
        controller.kind_listed(kind)
    handled.join(0.2)
    assert handled.is_alive() and controller.calls["reconcile"] == []  # waiting for the last own watch
    assert not controller.ready.is_set()  # kopf's kinds are in, one own watch's not yet
    controller.kind_listed(OWN_WATCHES[-1])
    handled.join(5)
    assert controller.calls["reconcile"] == [("GKMCache", "vector-add", False)]
    assert controller.ready.is_set() and controller.calls["ready"] == [True]
    controller.kind_listed("Node")
    assert controller.calls["ready"] == [True]  # once


def test_a_listing_that_never_comes_has_kopf_retry_the_handler(controller, monkeypatch):
    monkeypatch.setattr(handlers, "OWN_LISTED_WAIT_SECONDS", 0.01)
    controller.kind_listed("Node")
    with pytest.raises(kopf.TemporaryError, match="Job"):
        controller.cache_deleted("GKMCache", cache(deleting=True))
    assert controller.calls["reconcile"] == []


def test_a_change_is_reconciled_present_and_the_finalizer_absent(listed):
    """Whether a cache being deleted runs is the Reconciler's to decide (test_controller_reconciles.py)."""
    controller = listed
    controller.cache_changed("GKMCache", cache())
    controller.cache_deleted("GKMCache", cache(deleting=True))
    assert controller.calls["reconcile"] == [("GKMCache", "vector-add", False), ("GKMCache", "vector-add", True)]


def test_every_reconcile_of_a_changed_cache_is_handed_to_the_one_retry_path_and_kopf_retries_none(listed):
    """The coalescer's follow decides whether to run it again (test_controller_coalesce.py); the handler returns."""
    followed = []
    listed.recheck = lambda kind, body, result: followed.append((kind, body["metadata"]["name"], result))
    for result in ({"rollout": {"moving": True}}, {"resource": {"status": {"phase": "Extracting"}}}, None):
        listed.reconcile = lambda kind, body, finalizing, _result=result, **_: _result
        assert listed.cache_changed("GKMCache", cache()) == result
    assert followed == [("GKMCache", "vector-add", {"rollout": {"moving": True}}),
                        ("GKMCache", "vector-add", {"resource": {"status": {"phase": "Extracting"}}}),
                        ("GKMCache", "vector-add", None)]


def test_deletions_reach_the_index_through_the_event_handler(controller):
    secret = {"kind": "Secret", "metadata": {"name": "c", "namespace": "team-a"}}
    controller.indexed("Secret", secret)
    controller.watched("Secret", {"type": "MODIFIED", "object": secret})
    assert controller.index.count("Secret") == 1
    controller.watched("Secret", {"type": "DELETED", "object": secret})
    assert controller.index.count("Secret") == 0


def test_a_deleted_pod_hands_the_cache_whose_claim_it_named_to_the_reconcile():
    released = []
    controller = handlers.Controller(ClusterIndex(), lambda *args: None, released=lambda kind, body: released.append(
        (kind, body["metadata"]["name"])))
    controller.indexed("GKMCache", cache())
    labels = {"gkm.io/cache": "vector-add", "gkm.io/cache-namespace": "team-a"}
    controller.indexed("PersistentVolumeClaim", {"kind": "PersistentVolumeClaim", "metadata": {
        "name": "vector-add", "namespace": "team-a", "labels": labels}})
    pod = {"kind": "Pod", "metadata": {"name": "w", "namespace": "team-a"},
           "spec": {"volumes": [{"name": "c", "persistentVolumeClaim": {"claimName": "vector-add"}}]}}
    controller.pod_event("MODIFIED", pod)
    assert released == []
    controller.pod_event("DELETED", pod)
    assert released == [("GKMCache", "vector-add")]
