"""The webhook server's LISTs (server/sync.py): paged, each object cut down to what the views read as its page
arrives (server/watched.py kept_*), the view replaced once with the whole list; without a cluster."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import LIST_PAGE_SIZE, KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    EXTRACTED_DIGEST_ANNOTATION,
    SIGNATURE_FORMAT_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.metrics import Metrics
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.sync import CACHE_PAGE_SIZE, ViewSync
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import (
    WatchedCluster,
    kept_cache,
    kept_node,
    kept_node_object,
    kept_pvc,
)

DIGEST = "sha256:" + "a" * 64
BULK = {"key-%d" % index: "x" * 60 for index in range(50)}


class PagedKube:
    """Answers Kube.pages from pages given per path; records each call's page size."""

    def __init__(self, pages):
        self._pages = pages
        self.page_sizes = {}

    def pages(self, path, query=(), page_size=LIST_PAGE_SIZE):
        self.page_sizes[path] = page_size
        yield from self._pages.get(path, ())


class ImmediateLoop:
    def call_soon_threadsafe(self, function, *args):
        function(*args)


def page(items, resource_version="42", token=None):
    return {"metadata": {"resourceVersion": resource_version, "continue": token}, "items": items}


def slot_pvc(node):
    slot = Slot("vector-add", "apps", "apps", node, DIGEST)
    return {"metadata": {"name": slot.pvc_name(), "namespace": "apps", "labels": dict(slot.labels(), **BULK),
                         "annotations": dict(BULK, **{EXTRACTED_DIGEST_ANNOTATION: DIGEST}),
                         "creationTimestamp": "2026-01-01T00:00:00Z", "managedFields": [BULK]},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}}, "status": {"phase": "Bound"}}


def big_cache(name):
    labels = dict(BULK, **{SIGNATURE_FORMAT_LABEL: "cosign-v2"})
    return {"metadata": {"name": name, "namespace": "apps", "labels": labels, "annotations": BULK},
            "spec": {"image": "registry.local/c@" + DIGEST, "accessModes": ["ReadWriteOnce"],
                     "podTemplate": {"metadata": {"annotations": BULK}, "spec": {"nodeSelector": BULK}},
                     "upgradePolicy": {"maxUnavailable": 1}},
            "status": {"resolvedDigest": DIGEST, "targets": [{"backend": "hip", "arch": "gfx90a", "warpSize": 64}],
                       "conditions": [{"type": "Ready", "status": "True", "message": "x" * 1000}]}}


def sync_over(pages):
    cluster = WatchedCluster()
    kube = PagedKube(pages)
    return ViewSync(kube, cluster, Metrics(), ImmediateLoop()), kube, cluster


def source(sync, name):
    return next(s for s in sync.sources if s.name == name)


def test_every_page_is_folded_in_and_the_list_resource_version_returned():
    pvcs = [slot_pvc("worker-%d" % index) for index in range(5)]
    pages = [page(pvcs[:2], token="a"), page(pvcs[2:4], token="b"), page(pvcs[4:])]
    sync, kube, cluster = sync_over({"/api/v1/persistentvolumeclaims": pages})
    assert sync._list(source(sync, "persistentvolumeclaims")) == "42"
    assert kube.page_sizes["/api/v1/persistentvolumeclaims"] == LIST_PAGE_SIZE
    assert cluster.claims.counts()["pvcs"] == 5
    claim = cluster.claims.resolve("apps", "vector-add")
    assert all(claim.pvc_for("worker-%d" % index) for index in range(5))
    assert sync.synced["persistentvolumeclaims"]


def test_caches_are_listed_a_few_at_a_time():
    sync, kube, _cluster = sync_over({})
    sync._list(source(sync, "gkmcaches"))
    assert kube.page_sizes["/apis/gkm.io/v1alpha1/gkmcaches"] == CACHE_PAGE_SIZE < LIST_PAGE_SIZE


def test_an_absent_crd_reads_as_none_yet_and_an_absent_core_resource_raises():
    sync, _kube, _cluster = sync_over({})
    assert sync._list(source(sync, "gkmcaches")) is None
    assert sync.synced["gkmcaches"]
    with pytest.raises(KubeError):
        sync._list(source(sync, "nodes"))


def test_what_is_kept_is_what_the_views_read_and_nothing_of_the_bulk():
    pvc = kept_pvc(slot_pvc("worker-1"))
    assert set(pvc) == {"metadata"}
    assert pvc["metadata"]["annotations"] == {EXTRACTED_DIGEST_ANNOTATION: DIGEST}
    assert not set(BULK) & set(pvc["metadata"]["labels"])
    assert "managedFields" not in pvc["metadata"]
    cache = kept_cache(big_cache("c"))
    assert cache["spec"] == {"image": "registry.local/c@" + DIGEST, "accessModes": ["ReadWriteOnce"]}
    assert cache["metadata"]["labels"] == {SIGNATURE_FORMAT_LABEL: "cosign-v2"}
    assert set(cache["status"]) == {"resolvedDigest", "targets"}
    assert len(repr(cache)) < len(repr(big_cache("c"))) / 10
    node = kept_node({"metadata": {"name": "n", "labels": {"a": "b"}, "annotations": BULK}, "status": {"images": []}})
    assert node == {"metadata": {"name": "n", "labels": {"a": "b"}}}
    node_object = kept_node_object({"metadata": {"name": "n", "namespace": "apps", "annotations": BULK},
                                    "spec": {"nodeName": "n"}, "status": {"caches": {}, "counts": BULK}})
    assert node_object == {"metadata": {"name": "n", "namespace": "apps", "labels": {}}, "status": {"caches": {}}}


def test_the_views_answer_alike_from_kept_and_whole_objects():
    whole, kept = WatchedCluster(), WatchedCluster()
    pvcs = [slot_pvc("worker-1"), slot_pvc("worker-2")]
    caches = [big_cache("vector-add")]
    whole.replace_pvcs(pvcs)
    kept.replace_pvcs([kept_pvc(obj) for obj in pvcs])
    whole.replace_caches(CACHE_KIND, caches)
    kept.replace_caches(CACHE_KIND, [kept_cache(obj) for obj in caches])
    for cluster in (whole, kept):
        cluster.apply_pvc_event("DELETED", kept_pvc(pvcs[0]))
    claims = [cluster.claims.resolve("apps", "vector-add") for cluster in (whole, kept)]
    answers = [(c.digest, c.read_only, c.pvc_for("worker-1"), c.pvc_for("worker-2")) for c in claims]
    assert answers[0] == answers[1] and answers[0][3]
    targets = [cluster.steering.resolve("apps", "vector-add") for cluster in (whole, kept)]
    answers = [(t.mode, t.digest, t.image, t.targets, t.readiness_key) for t in targets]
    assert answers[0] == answers[1] and answers[0][1] == DIGEST
