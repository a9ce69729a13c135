"""The Node watch: the controller's list-and-watch of the Nodes (kind_watch.py), each event through the Node filter
(docs/controller-design.md, sections 3 and 10).

Nodes are the one kind whose events arrive all the time (every kubelet's heartbeat) and almost never matter. Through
kopf each one cost its per-event processing (diff base, cause detection, two handler calls on executor threads);
here it costs the JSON parse of the watch line, one trim and one comparison in the index (node_filter.on_node_event),
and nothing more when nothing the facts read changed.

A relist decides every listed Node as a MODIFIED event would have (a Node that joined or changed while the watch was
down starts its node path) before the Relister hands on the caches of the Nodes that vanished. The first listing
starts nothing: every cache is resumed by kopf once it is in.
"""

import logging

from .kind_watch import KindWatch
from .node_filter import on_node_event

LOG = logging.getLogger(__name__)


class NodeWatch(KindWatch):
    """KindWatch of the Nodes at `path` (feed.own_watches); node_changed(decision): a Node event that passed the
    filter (node_reconciles)."""

    def __init__(self, kube, index, path, node_changed, submit, compatibility="skip", on_listed=None):
        super().__init__(kube, index, "Node", path, submit, compatibility=compatibility, on_listed=on_listed)
        self.node_changed = node_changed

    def take_listing(self, objects, first):
        for node in objects:
            self.handle(None if first else "MODIFIED", node)
        return self.relister.relist(self.kind, objects)

    def handle(self, event_type, obj):
        """One Node event through the filter; node_changed when it starts something. The NodeDecision."""
        decision = on_node_event(self.index, event_type, obj)
        LOG.debug("node event %s: %r", event_type, decision)
        if decision.starts:
            self.node_changed(decision)
        return decision
