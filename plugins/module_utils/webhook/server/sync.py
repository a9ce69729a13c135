# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keeps the webhook's WatchedCluster current: one list+watch thread per source, events handed to the event loop.

Every LIST is paged (the API server's `limit` and `continue`) and every object cut down to what the views read
(watched.py's `kept_*`) as its page arrives, so the server holds one page of whole objects at a time, never a whole
list; the view is replaced once the last page is in, so no request is answered from half a list.

Sources: the managed PVCs (both views: node PVCs, serving PVCs), the GKMCache / ClusterGKMCache objects (both views),
their per-node objects (why a node gets no PVC) and the Nodes (their labels: readiness and GPUs, for steering);
absent CRDs count as "none yet" and are looked for again. The views are only ever touched by the loop thread.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import logging
import threading
from functools import partial

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import LIST_PAGE_SIZE, KubeError, resource_path
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    CACHE_KINDS,
    CLUSTER_CACHE_KIND,
    GROUP,
    NODE_KINDS,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.view import MANAGED_PVC_SELECTOR
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import (
    kept_cache,
    kept_node,
    kept_node_object,
    kept_pvc,
)

LOG = logging.getLogger("gkm.webhook")

WATCH_TIMEOUT_SECONDS = 300
# How often a missing CRD is looked for again, and the back-off bounds after a failed LIST or watch.
ABSENT_RETRY_SECONDS = 15
ERROR_RETRY_SECONDS = (1, 30)
# A tenant's cache may be as large as the API server stores (about 1.5 MiB, etcd's limit; parsed, one of tens of
# thousands of short annotations takes about 10 MB): pages of these few bound the whole objects held at once.
CACHE_PAGE_SIZE = 5


class _Source:
    """One list+watch of a resource, feeding the view through the event loop."""

    def __init__(self, name, path, label_selector, apply_event, replace, optional, keep, page_size=LIST_PAGE_SIZE):
        self.name = name
        self.path = path
        self.label_selector = label_selector
        self.apply_event = apply_event
        self.replace = replace
        self.optional = optional  # a 404 (CRD not installed) means "none of these yet"
        self.keep = keep  # the part of an object the views read
        self.page_size = page_size


class ViewSync:
    """Keeps the WatchedCluster current with one thread per watched source."""

    def __init__(self, kube, cluster, metrics, loop):
        self.kube = kube
        self.cluster = cluster
        self.metrics = metrics
        self.loop = loop
        self.synced = {}
        self._stop = threading.Event()

        def gkm_source(plural, on_event, on_list, keep, page_size=LIST_PAGE_SIZE):
            # The CRDs may come after the server: a 404 reads as "none of these yet".
            return _Source(plural, "/apis/%s/%s/%s" % (GROUP, VERSION, plural), None, on_event, on_list,
                           optional=True, keep=keep, page_size=page_size)

        def cache_source(kind, plural):
            return gkm_source(plural, partial(cluster.apply_cache_event, kind), partial(cluster.replace_caches, kind),
                              kept_cache, CACHE_PAGE_SIZE)

        def node_object_source(kind):
            return gkm_source(NODE_KINDS[kind][1], partial(cluster.apply_node_object_event, kind),
                              partial(cluster.replace_node_objects, kind), kept_node_object)

        self.sources = [
            _Source("persistentvolumeclaims", resource_path("PersistentVolumeClaim"), MANAGED_PVC_SELECTOR,
                    cluster.apply_pvc_event, cluster.replace_pvcs, optional=False, keep=kept_pvc),
            cache_source(CACHE_KIND, CACHE_KINDS[CACHE_KIND][0]),
            cache_source(CLUSTER_CACHE_KIND, CACHE_KINDS[CLUSTER_CACHE_KIND][0]),
            node_object_source(CACHE_KIND),
            node_object_source(CLUSTER_CACHE_KIND),
            # Every node: steering must know the ones without a GPU or a cache too (a pod may fit nowhere else).
            _Source("nodes", resource_path("Node"), None, cluster.apply_node_event, cluster.replace_nodes,
                    optional=False, keep=kept_node),
        ]
        for source in self.sources:
            self.synced[source.name] = False

    def start(self):
        for source in self.sources:
            threading.Thread(target=self._run, args=(source,), name="watch-" + source.name, daemon=True).start()

    def stop(self):
        self._stop.set()

    def is_synced(self):
        return all(self.synced.values())

    def _on_loop(self, function, *args):
        self.loop.call_soon_threadsafe(function, *args)

    def _mark_synced(self, source):
        if not self.synced[source.name]:
            self.synced[source.name] = True
            LOG.info("view synced: %s", source.name)

    def _run(self, source):
        delay = ERROR_RETRY_SECONDS[0]
        while not self._stop.is_set():
            try:
                resource_version = self._list(source)
                delay = ERROR_RETRY_SECONDS[0]
                if resource_version is None:
                    self._stop.wait(ABSENT_RETRY_SECONDS)
                    continue
                self._watch(source, resource_version)
            except Exception as error:  # API and connection errors alike: re-list and go on
                # 410 Gone: the resource version expired, so re-LIST at once.
                if not (isinstance(error, KubeError) and error.status == 410):
                    LOG.warning("watch of %s failed (%s); re-listing in %ss", source.name, error, delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, ERROR_RETRY_SECONDS[1])
            # Once stopped, the event loop may be closed already.
            if not self._stop.is_set():
                self._on_loop(self.metrics.count_watch_restart, source.name)

    def _list(self, source):
        """LIST into the view; returns the resource version to watch from, None when the CRD is absent."""
        query = [("labelSelector", source.label_selector)] if source.label_selector else []
        kept, resource_version = [], None
        for page in self.kube.pages(source.path, query, source.page_size):
            kept.extend(source.keep(obj) for obj in page.get("items") or ())
            resource_version = page["metadata"]["resourceVersion"]
        if resource_version is None:  # no page: the path is not served
            if not source.optional:
                raise KubeError("list %s: the API server does not serve it" % source.name, 404)
            self._on_loop(source.replace, [])
            self._on_loop(self._mark_synced, source)
            return None
        self._on_loop(source.replace, kept)
        self._on_loop(self._mark_synced, source)
        return resource_version

    def _watch(self, source, resource_version):
        events = self.kube.watch(source.path, resource_version, source.label_selector, WATCH_TIMEOUT_SECONDS)
        for event_type, obj in events:
            if self._stop.is_set():
                events.close()
                return
            if event_type not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            self._on_loop(source.apply_event, event_type, source.keep(obj))
            self._on_loop(self.metrics.count_watch_event, source.name)
        # The watch ended on its timeout: the caller re-lists, which also repairs any missed event.
