"""The controller's own watches (controller/gkm_controller/kind_watch.py, node_watch.py), driven by recorded listings
and watch events, no cluster: heartbeats start nothing, a label change starts the node path, 410 Gone and a dropped
connection relist (the Nodes that joined meanwhile start their node path, the caches of the ones that vanished are
handed on), a watch the server ends resumes from the last resourceVersion without a LIST, the first listing opens the
gate; a listing whose continue token expires is listed again from its first page, never taken in part; another
kind's watch asks the server for our objects only and hands each event to its hook after the index."""

import pytest
from urllib3.exceptions import ProtocolError

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    GPU_BACKEND_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex
from controller.gkm_controller import kind_watch
from controller.gkm_controller.feed import MANAGED_SELECTOR, own_watches
from controller.gkm_controller.kind_watch import KindWatch
from controller.gkm_controller.node_watch import NodeWatch

NODES_PATH = own_watches()["Node"][0]


def node(name="gpu-1", beat=1, **labels):
    """A Node as a watch event carries it; beat moves only what a heartbeat moves."""
    return {"kind": "Node", "metadata": {"name": name, "resourceVersion": str(100 + beat),
                                         "labels": dict({GPU_BACKEND_LABEL: "hip"}, **labels)},
            "spec": {}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-11-27T10:00:%02dZ" % (beat % 60)}]}}


def listed(*nodes, resource_version="100"):
    """A listing's pages as the API server answers them (items without their kind), two nodes a page."""
    items = [{key: value for key, value in item.items() if key != "kind"} for item in nodes]
    pages = [items[start:start + 2] for start in range(0, len(items), 2)] or [[]]
    return [{"metadata": {"resourceVersion": resource_version}, "items": page} for page in pages]


class RecordedKube:
    """Kube's pages and watch over recorded answers, taken in order: listings (lists of pages) and watches (lists of
    (type, object), ending with an exception to raise or with the server's normal end). on_exhausted() is called
    when a watch is asked for beyond the recorded ones (the test stops the loop there)."""

    def __init__(self, listings, watches, on_exhausted=None):
        self.listings, self.watches, self.on_exhausted = list(listings), list(watches), on_exhausted
        self.requests = []

    def pages(self, path, query=()):
        self.requests.append(("LIST", path, *query))
        return self._events(self.listings.pop(0))

    def watch(self, path, resource_version, label_selector=None):
        self.requests.append(("WATCH", path, resource_version, *([label_selector] if label_selector else [])))
        if not self.watches:
            self.on_exhausted()
            return iter(())
        return self._events(self.watches.pop(0))

    @staticmethod
    def _events(recorded):
        for event in recorded:
            if isinstance(event, Exception):
                raise event
            yield event


def slot_pvc(node_name, cache_name="vector-add"):
    return {"kind": "PersistentVolumeClaim", "metadata": {
        "name": "%s-%s" % (cache_name, node_name), "namespace": "team-a",
        "labels": {MANAGED_BY_LABEL: MANAGER, CACHE_LABEL: cache_name, CACHE_NAMESPACE_LABEL: "team-a",
                   NODE_LABEL: node_name}}}


def cache(name="vector-add"):
    return {"kind": "GKMCache", "metadata": {"name": name, "namespace": "team-a", "uid": "u-" + name},
            "spec": {"image": "registry.local/caches/%s:1" % name}}


@pytest.fixture
def recorder():
    return {"node_changed": [], "submitted": [], "listed": 0}


def watching(kube, recorder, index=None):
    def on_listed():
        recorder["listed"] += 1

    watch = NodeWatch(kube, index or ClusterIndex(), NODES_PATH, recorder["node_changed"].append,
                      lambda kind, resource: recorder["submitted"].append((kind, resource["metadata"]["name"])),
                      on_listed=on_listed)
    if kube.on_exhausted is None:
        kube.on_exhausted = watch.stop
    return watch


def test_two_hundred_heartbeats_start_nothing_and_the_watch_resumes_from_the_last_bookmark(recorder):
    nodes = [node("gpu-%d" % number) for number in range(3)]
    beats = [("MODIFIED", node("gpu-%d" % (beat % 3), beat)) for beat in range(2, 202)]
    bookmark = ("BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": "999"}})
    kube = RecordedKube([listed(*nodes)], [[*beats, bookmark]])
    watch = watching(kube, recorder)
    assert watch.relist() == "100" and watch.index.count("Node") == 3
    assert watch.watch("100") == "999"
    assert recorder["node_changed"] == [] and recorder["submitted"] == []
    assert kube.requests == [("LIST", NODES_PATH), ("WATCH", NODES_PATH, "100")]


def test_a_label_change_on_a_gpu_node_starts_the_node_path(recorder):
    kube = RecordedKube([listed(node())], [[("MODIFIED", node(beat=2)), ("MODIFIED", node(beat=3, team="ml"))]])
    watch = watching(kube, recorder)
    watch.relist()
    watch.watch("100")
    assert [(decision.name, decision.reason) for decision in recorder["node_changed"]] == [
        ("gpu-1", "a GPU node changed")]
    assert watch.index.get("Node", "gpu-1")["metadata"]["labels"]["team"] == "ml"


def test_410_gone_relists_hands_on_the_caches_of_vanished_nodes_and_decides_the_ones_that_joined(recorder):
    index = ClusterIndex()
    for obj in (cache(), slot_pvc("gpu-2")):
        index.apply("ADDED", obj)
    gone = KubeError("watch /api/v1/nodes ended: too old resource version", 410)
    kube = RecordedKube([listed(node("gpu-1"), node("gpu-2")),
                         listed(node("gpu-1"), node("gpu-3"), resource_version="300")],
                        [[("MODIFIED", node("gpu-1", 2)), gone]])
    watch = watching(kube, recorder, index)
    watch.run()
    assert kube.requests == [("LIST", NODES_PATH), ("WATCH", NODES_PATH, "100"), ("LIST", NODES_PATH),
                             ("WATCH", NODES_PATH, "300")]
    assert watch.relists == 1 and recorder["listed"] == 1
    # gpu-2 went while the watch was down (no DELETED event): its cache is re-planned; gpu-3 joined: its node path
    assert recorder["submitted"] == [("GKMCache", "vector-add")]
    assert [decision.name for decision in recorder["node_changed"]] == ["gpu-3"]
    assert sorted(obj["metadata"]["name"] for obj in index.select("Node")) == ["gpu-1", "gpu-3"]


def test_a_relist_indexes_each_node_once_and_decides_only_those_it_changed(recorder, monkeypatch):
    index = ClusterIndex()
    trimmed = []
    trim = index._trim
    monkeypatch.setattr(index, "_trim", lambda kind, obj: trimmed.append(obj["metadata"]["name"]) or trim(kind, obj))
    kube = RecordedKube([listed(node("gpu-1"), node("gpu-2")),
                         listed(node("gpu-1", 5), node("gpu-2", team="ml"), node("gpu-3"), resource_version="200")],
                        [])
    watch = watching(kube, recorder, index)
    watch.relist()
    assert trimmed == ["gpu-1", "gpu-2"] and recorder["node_changed"] == []
    del trimmed[:]
    watch.relist()
    # gpu-1's heartbeat changed nothing held; gpu-2's label and gpu-3's joining did.
    assert trimmed == ["gpu-1", "gpu-2", "gpu-3"]
    assert [(decision.name, decision.reason) for decision in recorder["node_changed"]] == [
        ("gpu-2", "a GPU node changed"), ("gpu-3", "a GPU node changed")]


def test_a_dropped_connection_relists_after_a_back_off_and_an_ended_watch_resumes_without_a_list(recorder, monkeypatch):
    monkeypatch.setattr(kind_watch, "RETRY_SECONDS", (0, 0))
    kube = RecordedKube([listed(node()), listed(node(), resource_version="200")],
                        [[("MODIFIED", node(beat=2))],  # the server ends the watch on its timeout
                         [ProtocolError("Connection broken")]])
    watch = watching(kube, recorder)
    watch.run()
    assert kube.requests == [("LIST", NODES_PATH), ("WATCH", NODES_PATH, "100"), ("WATCH", NODES_PATH, "102"),
                             ("LIST", NODES_PATH), ("WATCH", NODES_PATH, "200")]
    assert watch.relists == 1 and recorder["node_changed"] == [] and recorder["submitted"] == []


def test_the_first_listing_starts_nothing_and_opens_the_gate_once(recorder):
    kube = RecordedKube([[], listed(node("gpu-1"), node("gpu-2"), node("gpu-3"))], [])
    watch = watching(kube, recorder)
    assert not watch.listed.is_set()
    with pytest.raises(KubeError, match="does not serve"):  # no page at all: never taken as an empty listing
        watch.relist()
    assert not watch.listed.is_set() and recorder["listed"] == 0
    watch.relist()
    assert watch.listed.is_set() and recorder["listed"] == 1 and watch.index.count("Node") == 3
    assert recorder["node_changed"] == [] and watch.relists == 0


def test_a_listing_whose_continue_token_expired_is_listed_again_from_its_first_page_never_taken_in_part(recorder):
    expired = KubeError("list /api/v1/nodes: The provided continue parameter is too old", 410)
    first_try = [*listed(node("gpu-1"), node("gpu-2"), node("gpu-3"))[:1], expired]
    kube = RecordedKube([first_try, listed(node("gpu-1"), node("gpu-2"), node("gpu-3"), resource_version="150")], [])
    watch = watching(kube, recorder)
    watch.run()
    assert kube.requests == [("LIST", NODES_PATH), ("LIST", NODES_PATH), ("WATCH", NODES_PATH, "150")]
    assert recorder["listed"] == 1 and watch.relists == 0 and watch.index.count("Node") == 3


def job(name, resource_version="1", **status):
    return {"kind": "Job", "metadata": {"name": name, "namespace": "team-a", "resourceVersion": resource_version,
                                        "labels": {MANAGED_BY_LABEL: MANAGER, CACHE_LABEL: "vector-add",
                                                   CACHE_NAMESPACE_LABEL: "team-a"}},
            "status": status}


def test_a_kind_watch_asks_for_our_objects_only_feeds_the_index_and_hands_each_event_to_its_hook(recorder):
    path, selector = own_watches()["Job"]
    index = ClusterIndex()
    index.apply("ADDED", cache())
    gone = KubeError("watch ended: too old resource version", 410)
    kube = RecordedKube([listed(job("a"), job("b")), listed(job("a", "5", succeeded=1), resource_version="300")],
                        [[("MODIFIED", job("a", "3", active=1)), ("DELETED", job("a", "4")), gone]])
    seen = []
    watch = KindWatch(kube, index, "Job", path, lambda kind, resource: recorder["submitted"].append(
        (kind, resource["metadata"]["name"])), selector,
        on_event=lambda event_type, obj: seen.append((event_type, obj["metadata"]["name"])),
        on_listed=lambda: recorder.update(listed=recorder["listed"] + 1))
    kube.on_exhausted = watch.stop
    watch.run()
    assert selector == MANAGED_SELECTOR
    assert kube.requests == [("LIST", path, ("labelSelector", selector)), ("WATCH", path, "100", selector),
                             ("LIST", path, ("labelSelector", selector)), ("WATCH", path, "300", selector)]
    assert seen == [(None, "a"), (None, "b"), ("MODIFIED", "a"), ("DELETED", "a"), (None, "a")]
    # b went while the watch was down: its cache is re-planned; the relist holds what the server listed
    assert recorder["submitted"] == [("GKMCache", "vector-add")] and recorder["listed"] == 1 and watch.relists == 1
    assert [(obj["metadata"]["name"], obj["status"]) for obj in index.select("Job")] == [("a", {"succeeded": 1})]
