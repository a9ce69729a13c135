"""The Node watch, the controller's own list-and-watch loop (docs/controller-design.md, sections 3 and 10).

Nodes are the one kind whose events arrive all the time (every kubelet's heartbeat) and almost never matter. Through
kopf each one cost its per-event processing (diff base, cause detection, two handler calls on executor threads);
here it costs the JSON parse of the watch line, one trim and one comparison in the index (node_filter.on_node_event),
and nothing more when nothing the facts read changed.

One thread, not a task on kopf's loop: the collection's Kube client (its TLS and token, paged LISTs, watches with
bookmarks) is blocking, and a burst of heartbeats parsed here never delays kopf's handling of the cache resources.
The index has its own lock; what a passed event starts (node_changed, the Relister's submit) is thread-safe.

The loop: LIST every Node, paged, and take the complete listing (never a part) as the whole truth; then WATCH from
the listing's resourceVersion with bookmarks, resuming from the last resourceVersion seen when the server ends the
watch on its timeout. 410 Gone (an expired resourceVersion, on the watch or on a listing's continue token) relists
at once; any other failure (a dropped connection, an API error) relists after a back-off. A relist decides every
listed Node as a MODIFIED event would have (a Node that joined or changed while the watch was down starts its node
path) and hands the caches of the Nodes that vanished to the cache reconcile (relist.Relister): no DELETED event
comes for them. The first listing starts nothing (every cache is resumed by kopf once it is in) and sets `listed`,
the controller's readiness gate for the Nodes.
"""

import logging
import threading

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError, resource_path

from .node_filter import on_node_event
from .relist import Relister

LOG = logging.getLogger(__name__)

NODES_PATH = resource_path("Node")
# The back-off before a relist after a failure other than 410 Gone: first, then doubled up to the last.
RETRY_SECONDS = (1, 30)


class NodeWatch:
    """kube: the collection's Kube. node_changed(decision): a Node event that passed the filter (node_reconciles).
    submit(kind, resource): the cache reconcile of a cache whose Node vanished during a relist. on_listed(): called
    once, when the first listing is in the index."""

    def __init__(self, kube, index, node_changed, submit, compatibility="skip", on_listed=None):
        self.kube, self.index, self.node_changed, self.on_listed = kube, index, node_changed, on_listed
        self.relister = Relister(index, submit, compatibility)
        self.listed = threading.Event()
        self.relists = 0
        self._stop = threading.Event()

    def start(self):
        threading.Thread(target=self.run, name="gkm-nodes", daemon=True).start()

    def stop(self):
        """No more events taken; a watch held open ends with the process (the thread is a daemon)."""
        self._stop.set()

    def run(self):
        delay = RETRY_SECONDS[0]
        while not self._stop.is_set():
            try:
                resource_version = self.relist()
                delay = RETRY_SECONDS[0]
                while not self._stop.is_set():
                    resource_version = self.watch(resource_version)
            except KubeError as error:
                if error.status != 410:
                    delay = self._back_off(error, delay)
                else:
                    LOG.info("node watch: %s; relisting", error)
            except Exception as error:  # a dropped connection: what happened meanwhile is in the next listing
                delay = self._back_off(error, delay)

    def _back_off(self, error, delay):
        LOG.warning("node watch failed (%s); relisting in %s s", error, delay)
        self._stop.wait(delay)
        return min(delay * 2, RETRY_SECONDS[1])

    def relist(self):
        """One complete listing of the Nodes into the index (the module's doc); the resourceVersion to watch from."""
        first = not self.listed.is_set()
        nodes, resource_version = [], None
        for page in self.kube.pages(NODES_PATH):
            nodes.extend(dict(item, kind="Node") for item in page.get("items") or ())
            resource_version = page["metadata"]["resourceVersion"]
        if resource_version is None:
            raise KubeError("list %s: the API server does not serve it" % NODES_PATH, 404)
        for node in nodes:
            self.handle(None if first else "MODIFIED", node)
        relisting, affected = self.relister.relist("Node", nodes)
        if first:
            LOG.info("node watch: %d nodes listed", len(nodes))
            self.listed.set()
            if self.on_listed:
                self.on_listed()
        else:
            self.relists += 1
            LOG.info("node watch: relisted %d nodes, %d vanished, %d caches handed on",
                     len(nodes), len(relisting.vanished), len(affected))
        return resource_version

    def watch(self, resource_version):
        """One watch from resource_version until the server ends it; the last resourceVersion seen (a bookmark's
        too), to resume from."""
        events = self.kube.watch(NODES_PATH, resource_version)
        for event_type, obj in events:
            if self._stop.is_set():
                events.close()
                break
            resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
            if event_type != "BOOKMARK":
                self.handle(event_type, obj)
        return resource_version

    def handle(self, event_type, node):
        """One Node event through the filter; node_changed when it starts something. The NodeDecision."""
        decision = on_node_event(self.index, event_type, node if node.get("kind") else dict(node, kind="Node"))
        LOG.debug("node event %s: %r", event_type, decision)
        if decision.starts:
            self.node_changed(decision)
        return decision
