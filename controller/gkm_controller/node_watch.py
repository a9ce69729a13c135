"""The Node watch: the controller's list-and-watch of the Nodes (kind_watch.py), each event through the Node filter
(docs/controller-design.md, sections 3 and 10).

Nodes are the one kind whose events arrive all the time (every kubelet's heartbeat) and almost never matter. Through
kopf each one cost its per-event processing (diff base, cause detection, two handler calls on executor threads);
here it costs the JSON parse of the watch line, one trim and one comparison in the index (node_filter.on_node_event),
and nothing more when nothing the facts read changed.

A relist takes the listing into the index once (the Relister, which hands on the caches of the Nodes that vanished),
then decides each Node the index now holds differently as a MODIFIED event would have (a Node that joined or changed
while the watch was down starts its node path). The first listing starts nothing: every cache is resumed by kopf once
it is in.
"""

import logging

from .kind_watch import KindWatch
from .node_filter import decide, on_node_event

LOG = logging.getLogger(__name__)


class NodeWatch(KindWatch):
    """KindWatch of the Nodes at `path` (feed.own_watches); node_changed(decision): a Node event that passed the
    filter (node_reconciles)."""

    def __init__(self, kube, index, path, node_changed, submit, compatibility="skip", on_listed=None):
        super().__init__(kube, index, "Node", path, submit, compatibility=compatibility, on_listed=on_listed)
        self.node_changed = node_changed

    def take_listing(self, objects, first):
        taken = self.relister.relist(self.kind, objects)
        if not first:
            listed = {node["metadata"]["name"]: node for node in objects}
            for (_namespace, name), before in taken[0].modified:
                self._decided("MODIFIED", decide(self.index, name, "MODIFIED", True, before, listed[name]))
        return taken

    def handle(self, event_type, obj):
        """One Node event through the filter; node_changed when it starts something. The NodeDecision."""
        return self._decided(event_type, on_node_event(self.index, event_type, obj))

    def _decided(self, event_type, decision):
        LOG.debug("node event %s: %r", event_type, decision)
        if decision.starts:
            self.node_changed(decision)
        return decision
