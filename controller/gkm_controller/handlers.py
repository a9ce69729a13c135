"""kopf's side of the controller: its settings and the handlers, registered on a registry the caller passes (never
kopf's default one at import), so a test or a second operator task builds its own.

- Every kind kopf watches for the index (feed.kopf_kinds: the caches, Namespaces, StorageClasses) has an index
  handler, which feeds the ClusterIndex before kopf's readiness gate: no cache handler runs before each of
  these kinds' initial listing is in the index. Deletions reach the index through an event handler (kopf calls no
  index handler for them).
- The kinds that grow with the nodes and the pods, and our Secrets (feed.OWN_WATCHES), are the controller's own watches
  (kind_watch.KindWatch, node_watch.NodeWatch); the cache handlers wait for the first listing of every one of them
  (Controller.own_listed), the same guarantee kopf's gate gives for its kinds. Pods: each one listed, added or
  modified goes to Controller.on_pod (captures.py: a finished pod opted in to capture), each one deleted that held a
  cache's claim to Controller.released (Controller.pod_event).
- Cache kinds: create, update and resume reconcile the cache, and refuse to for one with a deletion timestamp; a
  reconcile that ended before the cache settled (reconciles.under_way) is handed to `recheck` (the coalescer's
  follow, the controller's one retry path), not retried by kopf;
  the delete handler (not optional, so kopf keeps the finalizer gkm.io/cache-cleanup on every cache) is the
  finalizer, the only reconcile allowed to write for a cache being deleted (deletion.DeletionGuard).
"""

import logging
import threading

import kopf

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_FINALIZER,
    CACHE_KINDS,
    DOMAIN,
    GROUP,
    VERSION,
)

from .feed import OWN_WATCHES, feed, kopf_kinds
from .relist import caches_for_vanished

LOG = logging.getLogger(__name__)
# How long a cache handler waits for the own watches' first listings before kopf is told to retry it later (a listing
# that fails for that long: its watch logs why).
OWN_LISTED_WAIT_SECONDS = 60


def configure(settings):
    """kopf's settings for this controller (docs/controller-design.md, sections 1 and 7)."""
    settings.persistence.finalizer = CACHE_FINALIZER
    # Our CRDs have no status.kopf and the status is the reconcile's own: kopf keeps its state in annotations.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=DOMAIN)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=DOMAIN)
    # An Event is a write: none for a handler that succeeded (the resync's target is no write at all).
    settings.posting.level = logging.WARNING
    # One active replica by a Lease of our own, not kopf's peering.
    settings.peering.standalone = True
    # The kinds are known and their CRDs installed before the controller: no watch of every CRD (a cluster-wide read
    # the controller's ClusterRole does not grant), the resources discovered once at start.
    settings.scanning.disabled = True
    # kopf's kinds are few (the caches, Namespaces, StorageClasses), all watched whole: each listed in one request, so
    # no continue token can expire mid-listing (a 410 there stops kopf; the own watches list again).
    settings.watching.chunk_size = None


class Controller:
    """What the handlers share and call.

    index: the ClusterIndex. reconcile(kind, body, finalizing) runs one cache's reconcile (the pipeline over
    IndexSource, writing through a GuardedKube), in kopf's executor threads (sync handlers), never on its event loop.
    own_listed: set by kind_listed(kind) once every own watch's first listing is in the index; the cache handlers wait
    for it. ready: set once kopf's kinds (its first event handler call: kopf holds them until every kind it indexes
    has its initial listing in, and the Namespaces always list some) and the own watches' are in: the moment the
    controller may plan;
    on_ready() is called then, once. recheck(kind, body, result): called after each reconcile of a changed cache,
    to run it again when it ended before the cache settled (coalesce.Coalescer.follow). on_pod(pod): called with
    every Pod the watch delivers, listed, added or modified (captures.Captures.pod_changed), or None.
    released(kind, resource): called with each cache a deleted object calls to re-plan (relist.caches_for_vanished:
    a pod that named a cache's claim), meant to be the coalescer's submit; None: none is.
    """

    def __init__(self, index, reconcile, on_ready=None, recheck=None, on_pod=None, released=None):
        self.index = index
        self.reconcile = reconcile
        self.recheck = recheck
        self.on_pod = on_pod
        self.released = released
        self.own_listed = threading.Event()
        self._own_pending = set(OWN_WATCHES)
        self.ready = threading.Event()
        self.on_ready = on_ready
        self._kopf_listed = False
        self._ready_lock = threading.Lock()

    # ---------------------------------------------------------------- caches

    def _wait_for_own_listings(self):
        if not self.own_listed.wait(OWN_LISTED_WAIT_SECONDS):
            with self._ready_lock:
                pending = sorted(self._own_pending)
            raise kopf.TemporaryError("not listed into the index yet: %s" % ", ".join(pending), delay=5)

    def cache_changed(self, kind, body, reason="an event"):
        """create, update, resume (kopf's `reason`): reconcile. A cache being deleted is left to its finalizer by the
        Reconciler, which decides it for every path on the index's copy."""
        self._wait_for_own_listings()
        result = self.reconcile(kind, body, False, cause="kopf %s" % reason)
        if self.recheck:
            self.recheck(kind, body, result)
        return result

    def cache_deleted(self, kind, body):
        """The finalizer: the cache's objects removed (today's state=absent reconcile); kopf then drops the mark."""
        self._wait_for_own_listings()
        return self.reconcile(kind, body, True, cause="its finalizer")

    # ---------------------------------------------------------------- the index

    def indexed(self, kind, body):
        feed(self.index, {"type": "MODIFIED", "object": dict(body)}, kind)

    def kind_listed(self, kind):
        """The first listing of one of the own watches' kinds is in the index."""
        with self._ready_lock:
            self._own_pending.discard(kind)
            if not self._own_pending:
                self.own_listed.set()
        self._open()

    def _open(self):
        with self._ready_lock:
            if self.ready.is_set() or not (self._kopf_listed and self.own_listed.is_set()):
                return
            self.ready.set()
        if self.on_ready:
            self.on_ready()

    def watched(self, kind, event):
        if not self._kopf_listed:
            self._kopf_listed = True
            self._open()
        if event.get("type") == "DELETED":
            feed(self.index, event, kind)

    def pod_event(self, event_type, pod):
        """A Pod event the own watch put in the index (None: listed): a deleted pod that held a cache's claim
        re-plans that cache (released), any other goes to on_pod."""
        if event_type != "DELETED":
            if self.on_pod:
                self.on_pod(pod)
            return
        if not self.released:
            return
        metadata = pod["metadata"]
        for resource in caches_for_vanished(self.index, [pod]):
            LOG.info("pod %s/%s gone: it held a claim of %s %s, re-planned", metadata.get("namespace"),
                     metadata.get("name"), resource["kind"], resource["metadata"]["name"])
            self.released(resource["kind"], resource)


def register(registry, controller):
    """Register every handler of the controller on a kopf.OperatorRegistry."""
    for kind, (group, version, plural) in sorted(kopf_kinds().items()):
        resource = {"group": group, "version": version, "plural": plural, "registry": registry}

        # An index handler returning None keeps nothing in kopf's own store; it is here for the readiness gate.
        # kopf hands every index to every handler as a keyword argument named by its id: a Python identifier.
        def index_handler(body, _kind=kind, **_):
            controller.indexed(_kind, body)

        def event_handler(event, _kind=kind, **_):
            controller.watched(_kind, event)

        kopf.index(id="gkm_index_%s" % plural, **resource)(index_handler)
        kopf.on.event(id="gkm_event_%s" % plural, **resource)(event_handler)

    for kind, (plural, _namespaced) in sorted(CACHE_KINDS.items()):
        resource = {"group": GROUP, "version": VERSION, "plural": plural, "registry": registry}

        # They return None: kopf writes a handler's non-None result into the object's status under the handler's
        # id, a write per reconcile of a field our status schema does not have.
        def changed(body, reason, _kind=kind, **_):
            controller.cache_changed(_kind, body, reason)

        def deleted(body, _kind=kind, **_):
            controller.cache_deleted(_kind, body)

        for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
            decorator(id="reconcile", **resource)(changed)
        kopf.on.delete(id="finalize", **resource)(deleted)
    return registry
