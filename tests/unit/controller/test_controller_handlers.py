"""The controller's kopf registration (controller/gkm_controller/handlers.py) and what its handlers do, driven
without a cluster: every indexed kind feeds the index before kopf's readiness gate, heartbeats start nothing, a
cache being deleted is reconciled by its finalizer only, and kopf keeps today's finalizer name.

kopf 1.45.2 is pinned in requirements/dev.txt for Python 3.11 and later; without it this file skips."""

import logging

import pytest

kopf = pytest.importorskip("kopf")

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (  # noqa: E402
    CACHE_FINALIZER,
    GPU_BACKEND_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import (  # noqa: E402
    INDEXED_KINDS,
    ClusterIndex,
)
from controller.gkm_controller import handlers  # noqa: E402


def node(beat=1, **labels):
    return {"kind": "Node", "metadata": {"name": "gpu-1", "labels": dict({GPU_BACKEND_LABEL: "hip"}, **labels),
                                         "resourceVersion": str(beat)},
            "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": str(beat)}]}}


def cache(deleting=False):
    metadata = {"name": "vector-add", "namespace": "team-a", "uid": "u-1"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"kind": "GKMCache", "metadata": metadata, "spec": {"image": "x"}}


@pytest.fixture
def controller():
    calls = {"reconcile": [], "nodes": []}
    built = handlers.Controller(ClusterIndex(), lambda kind, body, finalizing: calls["reconcile"].append(
        (kind, body["metadata"]["name"], finalizing)), calls["nodes"].append)
    built.calls = calls
    return built


def test_every_kind_gets_an_index_and_an_event_handler_and_the_caches_a_finalizer(controller):
    registry = handlers.register(kopf.OperatorRegistry(), controller)
    indexing = registry._indexing.get_all_handlers()
    watching = registry._watching.get_all_handlers()
    assert len(indexing) == len(watching) == len(INDEXED_KINDS)
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


def test_heartbeats_through_the_handlers_start_nothing_and_a_label_change_does(controller):
    controller.indexed("Node", node())
    controller.watched("Node", {"type": None, "object": node()})
    for beat in range(2, 202):
        controller.indexed("Node", node(beat))
        controller.watched("Node", {"type": "MODIFIED", "object": node(beat)})
    assert controller.calls["nodes"] == []
    controller.indexed("Node", node(300, team="ml"))
    controller.watched("Node", {"type": "MODIFIED", "object": node(300, team="ml")})
    assert [d.name for d in controller.calls["nodes"]] == ["gpu-1"]


def test_a_cache_being_deleted_is_reconciled_by_its_finalizer_only(controller):
    controller.cache_changed("GKMCache", cache())
    assert controller.cache_changed("GKMCache", cache(deleting=True)) is None
    controller.cache_deleted("GKMCache", cache(deleting=True))
    assert controller.calls["reconcile"] == [("GKMCache", "vector-add", False), ("GKMCache", "vector-add", True)]


def test_deletions_reach_the_index_through_the_event_handler(controller):
    pvc = {"kind": "PersistentVolumeClaim", "metadata": {"name": "c", "namespace": "team-a"}}
    controller.indexed("PersistentVolumeClaim", pvc)
    controller.watched("PersistentVolumeClaim", {"type": "MODIFIED", "object": pvc})
    assert controller.index.count("PersistentVolumeClaim") == 1
    controller.watched("PersistentVolumeClaim", {"type": "DELETED", "object": pvc})
    assert controller.index.count("PersistentVolumeClaim") == 0
