"""The Node filter, in process: which Node events may start a reconcile.

The index holds a Node as the facts stage reads it (facts/index.py), so a kubelet's heartbeat or any status-only
update (conditions, addresses, images by tag, resourceVersion) changes nothing held and starts nothing: the cost is
one trim and one comparison. A change that is held goes further only for a node that matters to some cache: a GPU
node (gkm.io/gpu-backend set, before or after the event), or one that holds a cache's objects (its PVCs and PVs
carry gkm.io/node). Which caches it affects is decided next (operator/node_events.affected_caches over the index).

The controller's own Node watch (node_watch.py) calls on_node_event once per event.
"""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import GPU_BACKEND_LABEL

NODE_OBJECT_KINDS = ("PersistentVolumeClaim", "PersistentVolume")


def _gpu(node):
    return GPU_BACKEND_LABEL in (((node or {}).get("metadata") or {}).get("labels") or {})


def holds_cache_objects(index, node_name):
    """True when the index holds a PVC or PV of a cache labelled with the node."""
    return any(index.held_on_node(kind, node_name) for kind in NODE_OBJECT_KINDS)


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
