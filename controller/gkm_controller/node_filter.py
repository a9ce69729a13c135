"""The Node filter, in process: which Node events may start a reconcile.

The index holds a Node as the facts stage reads it (facts/index.py), so a kubelet's heartbeat or any status-only
update (conditions, addresses, images by tag, resourceVersion) changes nothing held and starts nothing: the cost is
one trim and one comparison. A change that is held goes further only for a node that matters to some cache: a GPU
node (gkm.io/gpu-backend set, before or after the event), or one that holds a cache's objects (its PVCs and PVs
carry gkm.io/node). Which caches it affects is decided next (operator/node_events.affected_caches over the index).

kopf calls an index handler for each event before the readiness gate (so the index is whole before any cache is
reconciled) and an event handler after it, which knows the event's type; NodeFilter joins the two: indexed() applies
the Node and remembers what changed, decide() says what that event comes to.
"""

import threading

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import GPU_BACKEND_LABEL, NODE_LABEL

NODE_OBJECT_KINDS = ("PersistentVolumeClaim", "PersistentVolume")


def _gpu(node):
    return GPU_BACKEND_LABEL in (((node or {}).get("metadata") or {}).get("labels") or {})


def holds_cache_objects(index, node_name):
    """True when the index holds a PVC or PV of a cache labelled with the node."""
    return any(index.select(kind, label_selector="%s=%s" % (NODE_LABEL, node_name)) for kind in NODE_OBJECT_KINDS)


class NodeDecision:
    """What one Node event came to: changed (the index's copy changed), starts (a reconcile may follow), why."""

    __slots__ = ("changed", "name", "reason", "starts")

    def __init__(self, name, changed, starts, reason):
        self.name, self.changed, self.starts, self.reason = name, changed, starts, reason

    def __repr__(self):
        return "NodeDecision(%r, changed=%r, starts=%r, %r)" % (self.name, self.changed, self.starts, self.reason)


def decide(index, name, event_type, changed, before, node):
    """The NodeDecision of a Node event whose application to the index changed it or not; before: the index's copy
    before the event (None for a node it did not hold)."""
    if not changed:
        return NodeDecision(name, False, False, "nothing the facts read changed (a heartbeat or a status update)")
    if event_type is None:
        return NodeDecision(name, True, False, "initial listing (every cache is resumed once it is done)")
    if _gpu(before) or (event_type != "DELETED" and _gpu(node)):
        return NodeDecision(name, True, True, "a GPU node changed")
    if holds_cache_objects(index, name):
        return NodeDecision(name, True, True, "the node holds a cache's objects")
    return NodeDecision(name, True, False, "neither a GPU node nor one holding a cache's objects")


def on_node_event(index, event_type, node):
    """Apply one Node event to the index and say what it comes to (a NodeDecision), in one call.

    event_type: ADDED, MODIFIED, DELETED, or None for the initial listing (which starts nothing: the cache handlers'
    resume covers every cache once the listing is done).
    """
    name = node["metadata"]["name"]
    before = index.get("Node", name)
    changed = index.apply(event_type, node)
    return decide(index, name, event_type, changed, before, node)


class NodeFilter:
    """on_node_event split over kopf's two calls for one event (index handler, then event handler).

    indexed(node): from the index handler (every event but a deletion, before the readiness gate): apply the Node to
    the index and keep (changed, before) for the event handler. decide(event_type, node): from the event handler,
    for the same event (kopf handles one object's events in order); a deletion is applied here, as kopf calls no
    index handler for it.
    """

    def __init__(self, index):
        self.index = index
        self._pending = {}
        self._lock = threading.Lock()

    def indexed(self, node):
        name = node["metadata"]["name"]
        before = self.index.get("Node", name)
        changed = self.index.apply("MODIFIED", node)
        with self._lock:
            # Two events indexed before their event handlers ran: the node changed if either changed it.
            earlier = self._pending.get(name)
            if earlier is not None:
                changed, before = changed or earlier[0], earlier[1]
            self._pending[name] = (changed, before)

    def decide(self, event_type, node):
        name = node["metadata"]["name"]
        with self._lock:
            pending = self._pending.pop(name, None)
        if event_type == "DELETED":
            before = self.index.get("Node", name)
            return decide(self.index, name, event_type, self.index.apply("DELETED", node), before, node)
        if pending is None:  # not indexed first: apply it now
            return on_node_event(self.index, event_type, node)
        changed, before = pending
        return decide(self.index, name, event_type, changed, before, node)
