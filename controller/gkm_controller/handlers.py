"""kopf's side of the controller: its settings and the handlers, registered on a registry the caller passes (never
kopf's default one at import), so a test or a second operator task builds its own.

- Every kind the index holds (feed.watched_kinds) has an index handler, which feeds the ClusterIndex before kopf's
  readiness gate: no cache handler runs before every kind's initial listing is in the index. Deletions reach the
  index through an event handler (kopf calls no index handler for them).
- Nodes: the index handler applies the Node (NodeFilter.indexed), the event handler decides (NodeFilter.decide);
  only a decision that starts something reaches Controller.node_changed.
- Cache kinds: create, update and resume reconcile the cache, and refuse to for one with a deletion timestamp;
  the delete handler (not optional, so kopf keeps the finalizer gkm.io/cache-cleanup on every cache) is the
  finalizer, the only reconcile allowed to write for a cache being deleted (deletion.DeletionGuard).
"""

import logging
import threading

import kopf

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import LIST_PAGE_SIZE
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_FINALIZER,
    CACHE_KINDS,
    DOMAIN,
    GROUP,
    VERSION,
)

from .deletion import deletion_requested
from .feed import feed, watched_kinds
from .node_filter import NodeFilter

LOG = logging.getLogger(__name__)


def selector_key(group, version, plural):
    """A kopf resource selector's positional form: (version, plural) for the core group, else all three."""
    return (version, plural) if not group else (group, version, plural)


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
    settings.watching.chunk_size = LIST_PAGE_SIZE
    for _kind, (group, version, plural, selector) in sorted(watched_kinds().items()):
        if selector:
            settings.watching.label_selectors[selector_key(group, version, plural)] = selector


class Controller:
    """What the handlers share and call.

    index: the ClusterIndex. reconcile(kind, body, finalizing) runs one cache's reconcile (the pipeline over
    IndexSource, writing through a GuardedKube); node_changed(decision) takes a Node event that may affect caches.
    Both run in kopf's executor threads (sync handlers), never on its event loop.
    ready: set at the first event handler's call. kopf holds every event handler until each indexed kind's initial
    listing is in the index (its readiness gate), and the Namespaces always list some, so that call is the moment
    the controller may plan; on_ready() is called then, once.
    """

    def __init__(self, index, reconcile, node_changed, on_ready=None):
        self.index = index
        self.nodes = NodeFilter(index)
        self.reconcile = reconcile
        self.node_changed = node_changed
        self.ready = threading.Event()
        self.on_ready = on_ready
        self._ready_lock = threading.Lock()

    # ---------------------------------------------------------------- caches

    def cache_changed(self, kind, body):
        """create, update, resume: reconcile, unless the cache is being deleted (then only the finalizer writes)."""
        if deletion_requested(body):
            LOG.info("%s %s is being deleted: nothing but its finalizer runs", kind, body["metadata"]["name"])
            return None
        return self.reconcile(kind, body, False)

    def cache_deleted(self, kind, body):
        """The finalizer: the cache's objects removed (today's state=absent reconcile); kopf then drops the mark."""
        return self.reconcile(kind, body, True)

    # ---------------------------------------------------------------- the index

    def indexed(self, kind, body):
        if kind == "Node":
            self.nodes.indexed(dict(body, kind=kind))
        else:
            feed(self.index, {"type": "MODIFIED", "object": dict(body)}, kind)

    def _opened(self):
        with self._ready_lock:
            if self.ready.is_set():
                return
            self.ready.set()
        if self.on_ready:
            self.on_ready()

    def watched(self, kind, event):
        if not self.ready.is_set():
            self._opened()
        if kind == "Node":
            decision = self.nodes.decide(event.get("type"), dict(event["object"], kind=kind))
            LOG.debug("node event %s: %r", event.get("type"), decision)
            if decision.starts:
                self.node_changed(decision)
            return decision
        if event.get("type") == "DELETED":
            feed(self.index, event, kind)
        return None


def register(registry, controller):
    """Register every handler of the controller on a kopf.OperatorRegistry."""
    for kind, (group, version, plural, _selector) in sorted(watched_kinds().items()):
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
        def changed(body, _kind=kind, **_):
            controller.cache_changed(_kind, body)

        def deleted(body, _kind=kind, **_):
            controller.cache_deleted(_kind, body)

        for decorator in (kopf.on.create, kopf.on.update, kopf.on.resume):
            decorator(id="reconcile", **resource)(changed)
        kopf.on.delete(id="finalize", **resource)(deleted)
    return registry
