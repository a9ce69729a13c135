"""The controller's own list-and-watch of one indexed kind, a thread outside kopf (docs/controller-design.md, sections
3 and 10).

kopf watches the kinds it calls handlers for (the caches) and the few counted per cluster or namespace; the kinds
whose objects grow with the nodes and the pods (feed.OWN_WATCHES) are watched here, where an event costs the JSON
parse of its watch line and one comparison in the index, and where a relist is known to be one: kopf relists after
410 Gone without telling its handlers (the relist gap), and stops the operator when a paged listing's continue
token expires before its last page.

One thread per kind: the collection's Kube client (its TLS and token, paged LISTs, watches with bookmarks) is
blocking, and a burst of events parsed here never delays kopf's handling of the cache resources. The index has its
own lock; what an event starts (a hook, the Relister's submit) is thread-safe.

The loop: LIST the kind, paged, and take the complete listing (never a part) as the whole truth; then WATCH from the
listing's resourceVersion with bookmarks, resuming from the last resourceVersion seen when the server ends the watch
on its timeout. 410 Gone (an expired resourceVersion, on the watch or on a listing's continue token) relists at
once, from the first page; any other failure (a dropped connection, an API error) relists after a back-off. A
relist hands the caches of the objects that vanished meanwhile to the cache reconcile (relist.Relister): no DELETED
event comes for them. The first listing sets `listed` and calls on_listed, the controller's readiness gate.
"""

import logging
import threading

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError

from .relist import Relister

LOG = logging.getLogger(__name__)

# The back-off before a relist after a failure other than 410 Gone: first, then doubled up to the last.
RETRY_SECONDS = (1, 30)


class KindWatch:
    """The list-and-watch of `kind` at the collection path `path` (every namespace), only the objects
    `label_selector` selects when given.

    kube: the collection's Kube. submit(kind, resource): the cache reconcile of a cache an object vanished from during
    a relist. on_event(event_type, obj): called after the index took each event, the listed objects with None (every
    listing's, the relists' too); None: the index is all. on_listed(): called once, when the first listing is in.
    """

    def __init__(self, kube, index, kind, path, submit, label_selector=None, compatibility="skip", on_event=None,
                 on_listed=None):
        self.kube, self.index, self.kind, self.path = kube, index, kind, path
        self.label_selector, self.on_event, self.on_listed = label_selector, on_event, on_listed
        self.relister = Relister(index, submit, compatibility)
        self.listed = threading.Event()
        self.relists = 0
        self._stop = threading.Event()

    def start(self):
        threading.Thread(target=self.run, name="gkm-watch-%s" % self.kind, daemon=True).start()

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
                    LOG.info("%s watch: %s; relisting", self.kind, error)
            except Exception as error:  # a dropped connection: what happened meanwhile is in the next listing
                delay = self._back_off(error, delay)

    def _back_off(self, error, delay):
        LOG.warning("%s watch failed (%s); relisting in %s s", self.kind, error, delay)
        self._stop.wait(delay)
        return min(delay * 2, RETRY_SECONDS[1])

    def relist(self):
        """One complete listing of the kind into the index (the module's doc); the resourceVersion to watch from."""
        first = not self.listed.is_set()
        objects, resource_version = [], None
        query = [("labelSelector", self.label_selector)] if self.label_selector else []
        for page in self.kube.pages(self.path, query):
            objects.extend(dict(item, kind=self.kind) for item in page.get("items") or ())
            resource_version = page["metadata"]["resourceVersion"]
        if resource_version is None:
            raise KubeError("list %s: the API server does not serve it" % self.path, 404)
        relisting, affected = self.take_listing(objects, first)
        if first:
            LOG.info("%s watch: %d listed", self.kind, len(objects))
            self.listed.set()
            if self.on_listed:
                self.on_listed()
        else:
            self.relists += 1
            LOG.info("%s watch: relisted %d, %d vanished, %d caches handed on",
                     self.kind, len(objects), len(relisting.vanished), len(affected))
        return resource_version

    def take_listing(self, objects, first):
        """A complete listing into the index (the Relister), then each object to the on_event hook with None; the
        Relister's (Relisting, caches handed on). first: the first listing (nothing was held before it)."""
        taken = self.relister.relist(self.kind, objects)
        if self.on_event:
            for obj in objects:
                self.on_event(None, obj)
        return taken

    def watch(self, resource_version):
        """One watch from resource_version until the server ends it; the last resourceVersion seen (a bookmark's
        too), to resume from."""
        events = self.kube.watch(self.path, resource_version, self.label_selector)
        for event_type, obj in events:
            if self._stop.is_set():
                events.close()
                break
            resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
            if event_type != "BOOKMARK":
                self.handle(event_type, obj if obj.get("kind") else dict(obj, kind=self.kind))
        return resource_version

    def handle(self, event_type, obj):
        """One watch event into the index, then the on_event hook; True when the index changed."""
        changed = self.index.apply(event_type, obj)
        if self.on_event:
            self.on_event(event_type, obj)
        return changed
