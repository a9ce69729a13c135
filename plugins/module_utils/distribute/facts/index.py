# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The in-memory copy of the cluster a controller keeps current from watch events (ClusterIndex), and the facts
stage's reads answered from it (IndexSource) with the API server's selector semantics and no request at all.
Nothing in the modules uses it: they read through facts/source.py ListSource."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import logging
import sys
import threading
import time

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import managed_selector, unmanaged_selector
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_KINDS, NODE_KINDS, NODE_LABEL
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.source import FactsSource
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import (
    FINISHED_PODS,
    OBJECT_KINDS,
    UNFINISHED_PODS,
    node_facts,
    object_facts,
)

# ------------------------------------------------------------------ selectors, as the API server reads them


def parse_selector(selector):
    """[(key, operator, value)] of an equality-based selector ('a=b,c!=d'); operator is '=' or '!='.

    Only the forms the facts stage sends are understood; anything else is refused rather than misread.
    """
    terms = []
    for term in (selector or "").split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append((key.strip(), "!=", value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=", 1).split("=", 1)
            terms.append((key.strip(), "=", value.strip()))
        else:
            raise ValueError("selector term %r is not key=value or key!=value" % term)
    return terms


def _field(obj, path):
    value = obj
    for part in path.split("."):
        value = (value or {}).get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _matches(terms, lookup):
    return all((lookup(key) == value) == (operator == "=") for key, operator, value in terms)


def _terms(selector):
    """A selector's terms: parsed here from its text, or as parse_selector already returned them."""
    return selector if isinstance(selector, list) else parse_selector(selector)


def labels_match(obj, selector):
    """True when the object's labels satisfy an equality-based label selector (text or parsed terms)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return _matches(_terms(selector), labels.get)


def fields_match(obj, selector):
    """True when the object satisfies an equality-based field selector (metadata.name=x, status.phase!=y; text or
    parsed terms)."""
    return _matches(_terms(selector), lambda path: _field(obj, path))


# ------------------------------------------------------------------ the in-memory copy a controller keeps


INDEXED_KINDS = (*OBJECT_KINDS, "Node", "Namespace", "StorageClass", "Pod", *sorted(CACHE_KINDS),
                 *sorted(kind for kind, _plural, _namespaced in NODE_KINDS.values()))
# Kinds held without their resourceVersion, so that an event changing nothing the facts read (a heartbeat) changes
# nothing held; the index keeps the last one seen beside them, for wait_for_writes.
UNVERSIONED_KINDS = ("Node", "Namespace")


# Kinds named after their node (the per-node status objects); the others are on a node by their NODE_LABEL.
NODE_NAMED_KINDS = tuple(sorted(kind for kind, _plural, _namespaced in NODE_KINDS.values()))


def _key(obj):
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata["name"]


def _node_of(kind, obj):
    """The node an object is of (held_on_node's key), or None."""
    metadata = obj.get("metadata") or {}
    if kind in NODE_NAMED_KINDS:
        return metadata["name"]
    return (metadata.get("labels") or {}).get(NODE_LABEL)


class ClusterIndex:
    """The objects a reconcile reads, kept current from watch events, trimmed as the facts stage trims them.

    apply(event_type, obj) takes one event (ADDED, MODIFIED, DELETED; kopf's initial listing passes None, read as
    ADDED) and returns True when what the index holds changed. A Node is held as node_facts keeps it, plus the
    digest-pinned names of the images its kubelet reports (only `watched_images` when that set is given), so a
    heartbeat that changes only conditions, addresses or the resourceVersion changes nothing here and returns False:
    the controller starts no reconcile for it. managedFields is dropped from everything, and a Job is held as
    job_facts keeps it.

    Reads and writes hold one lock: watch events arrive on the controller's event loop while a reconcile reads from
    a worker thread. `version` counts the changes; wait_for_change(since, timeout) lets a reconcile that polls (a
    Job to complete, a PVC to bind) wake at the change instead of at the end of its poll interval. The last
    resourceVersion of each Node and Namespace is kept beside what is held (UNVERSIONED_KINDS), and an event that
    moves only it wakes wait_for_writes alone.
    """

    def __init__(self, watched_images=None):
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._seen = threading.Condition(self._lock)
        self._objects = {kind: {} for kind in INDEXED_KINDS}
        # {kind: {node: {key}}}: a Node event's lookups of what is on that node cost no scan of every claim and PV.
        self._on_node = {kind: collections.defaultdict(set) for kind in INDEXED_KINDS}
        self._versions = {kind: {} for kind in UNVERSIONED_KINDS}
        self.watched_images = watched_images
        self.version = 0

    def _trim(self, kind, obj):
        """What the index holds of an event's object: its own copy, never sharing a dict with the event's body."""
        return _interned(self._trimmed(kind, obj))

    def _trimmed(self, kind, obj):
        if kind == "Node":
            trimmed = node_facts(obj)
            names = sorted({name for image in (obj.get("status") or {}).get("images") or []
                            for name in image.get("names") or []
                            if "@" in name and (self.watched_images is None or name in self.watched_images)})
            if names:
                trimmed["status"]["images"] = [{"names": names}]
            return trimmed
        if kind == "Namespace":
            return {"metadata": {"name": obj["metadata"]["name"]}}
        return object_facts(kind, dict(obj, metadata=dict(obj.get("metadata") or {})))

    def apply(self, event_type, obj):
        kind = obj.get("kind")
        if kind not in self._objects:
            raise ValueError("the index holds no %r objects" % kind)
        key = _key(obj)
        trimmed = None if event_type == "DELETED" else self._trim(kind, obj)
        with self._lock:
            if kind in self._versions:
                self._note_version(kind, key, None if trimmed is None else obj)
            held = self._objects[kind]
            if trimmed is None:
                before = held.pop(key, None)
                if before is None:
                    return False
            elif held.get(key) == trimmed:
                return False
            else:
                before = held.get(key)
                held[key] = trimmed
            self._move_on_node(kind, key, before, trimmed)
            self.version += 1
            self._changed.notify_all()
            self._seen.notify_all()
            return True

    def _move_on_node(self, kind, key, before, after):
        """Keep _on_node as the object moved from `before` to `after` (either None), under the lock."""
        was, now = (None if obj is None else _node_of(kind, obj) for obj in (before, after))
        if was == now:
            return
        if was is not None:
            keys = self._on_node[kind][was]
            keys.discard(key)
            if not keys:
                del self._on_node[kind][was]
        if now is not None:
            self._on_node[kind][now].add(key)

    def _note_version(self, kind, key, obj):
        """Keep the resourceVersion of an object of UNVERSIONED_KINDS (None: deleted), under the lock."""
        versions = self._versions[kind]
        if obj is None:
            versions.pop(key, None)
        else:
            versions[key] = (obj.get("metadata") or {}).get("resourceVersion")
        self._seen.notify_all()

    def relisted(self, kind, objects):
        """Take a complete fresh listing of a kind as the whole truth, returning a Relisting.

        A watch restarted after 410 Gone lists again, and an object deleted while it was down gets no DELETED event:
        what the index held of the kind and the listing lacks is dropped and reported as vanished, so the caller can
        re-plan the caches those objects belonged to. Objects of other kinds are left alone. Nothing changes, and
        `version` does not move, when the listing holds what the index held (a relist of an idle cluster).
        """
        fresh = {}
        for obj in objects:
            if obj.get("kind") != kind:
                raise ValueError("a listing of %s holds a %r" % (kind, obj.get("kind")))
            fresh[_key(obj)] = self._trim(kind, obj)
        with self._lock:
            if kind in self._versions:
                self._versions[kind] = {_key(obj): (obj.get("metadata") or {}).get("resourceVersion")
                                        for obj in objects}
                self._seen.notify_all()
            held = self._objects[kind]
            if held == fresh:
                return Relisting(kind, False, [])
            vanished = [_copy(dict(obj, kind=kind)) for key, obj in sorted(held.items()) if key not in fresh]
            # The objects held before are the index's no longer once replaced: handed out as they are.
            modified = [(key, held.get(key)) for key, obj in fresh.items() if held.get(key) != obj]
            self._objects[kind] = fresh
            on_node = self._on_node[kind] = collections.defaultdict(set)
            for key, obj in fresh.items():
                node = _node_of(kind, obj)
                if node is not None:
                    on_node[node].add(key)
            self.version += 1
            self._changed.notify_all()
            return Relisting(kind, True, vanished, modified)

    def wait_for_change(self, since, timeout):
        """Block until `version` passes `since` or `timeout` seconds pass; True when it changed."""
        with self._lock:
            return self._changed.wait_for(lambda: self.version > since, timeout)

    def wait_for_writes(self, written, timeout, most=None):
        """Block until the index shows every write of `written` (Kube.written's entries, each object's last write
        only: last_writes), or until `timeout` seconds pass in which it shows none more of them, or `most` seconds in
        all (None: no such bound); True when it shows them all. An object applied shows at its reply's resourceVersion
        or a later one (for a Node or a Namespace, the last event's), an object deleted once it is gone or being
        deleted. Kinds the index does not hold are not waited for."""
        pending = collections.deque(last_writes(written))
        deadline = None if most is None else time.monotonic() + most

        def shown():
            # Front to back, each write checked until it shows: a change costs one check while the events come in
            # the writes' order, not one per write of thousands.
            while pending and self._shows(*pending[0]):
                pending.popleft()
            return not pending

        with self._lock:
            while True:
                left = len(pending)
                remaining = timeout if deadline is None else min(timeout, deadline - time.monotonic())
                if self._seen.wait_for(shown, max(remaining, 0)):
                    return True
                # Still coming in (thousands of writes trail their events): wait on while the index catches up.
                if len(pending) == left or (deadline is not None and time.monotonic() >= deadline):
                    return False

    def unshown(self, written):
        """The writes of `written` the index does not show yet (wait_for_writes's test, without waiting), each
        object's last write only."""
        with self._lock:
            return [write for write in last_writes(written) if not self._shows(*write)]

    def _shows(self, kind, namespace, name, resource_version):
        if kind not in self._objects:
            return True
        key = (namespace or "", name)
        held = self._objects[kind].get(key)
        if resource_version is None:
            return held is None or bool(held["metadata"].get("deletionTimestamp"))
        if kind in self._versions:
            return held is not None and _not_older(self._versions[kind].get(key), resource_version)
        return held is not None and _not_older(held["metadata"].get("resourceVersion"), resource_version)

    def select(self, kind, namespace=None, label_selector=None, field_selector=None):
        """Copies of the held objects of a kind (in a namespace), filtered as the API server filters a LIST.

        Only the matches are copied: the held objects are never changed in place (apply replaces them), so they are
        read outside the lock, and a Node event's lookups cost a scan, not a copy of every node.
        """
        labels, fields = parse_selector(label_selector), parse_selector(field_selector)
        with self._lock:
            held = list(self._objects[kind].items())
        return [_copy(obj) for (held_namespace, _name), obj in held
                if (namespace is None or held_namespace == namespace)
                and labels_match(obj, labels) and fields_match(obj, fields)]

    def held_on_node(self, kind, node):
        """Copies of the held objects of a kind that are on `node`: labelled with it (NODE_LABEL), or, for a per-node
        status kind, named after it; in (namespace, name) order. The same as select(kind, label_selector=
        'gkm.io/node=<node>') (field_selector='metadata.name=<node>' for a per-node status kind), without a scan."""
        with self._lock:
            held = self._objects[kind]
            objects = [held[key] for key in sorted(self._on_node[kind].get(node, ()))]
        return [_copy(obj) for obj in objects]

    def get(self, kind, name, namespace=None):
        """A copy of the held object of that name (in that namespace; none for a cluster-scoped kind), or None."""
        with self._lock:
            obj = self._objects[kind].get((namespace or "", name))
        return None if obj is None else _copy(obj)

    def count(self, kind):
        with self._lock:
            return len(self._objects[kind])


class Relisting:
    """What ClusterIndex.relisted did to one kind: `changed` (what is held differs from before: added, modified or
    vanished objects), `vanished` (copies of the objects held before and absent from the listing, kind set; in
    (namespace, name) order) and `modified` (((namespace, name), the object held before or None) of each listed
    object the index now holds differently or newly, in the listing's order)."""

    __slots__ = ("changed", "kind", "modified", "vanished")

    def __init__(self, kind, changed, vanished, modified=()):
        self.kind, self.changed, self.vanished, self.modified = kind, changed, vanished, list(modified)

    def __repr__(self):
        return "Relisting(%s, changed=%s, vanished=%d)" % (self.kind, self.changed, len(self.vanished))


def _not_older(held, written):
    """True when a held resourceVersion is the written one or came after it. The API server's are etcd revisions,
    decimal and increasing, which is what is compared; any other form must be the same string."""
    if held == written:
        return True
    return bool(held and written and held.isdigit() and written.isdigit() and int(held) > int(written))


def last_writes(written):
    """Each object's last write of `written` (Kube.written's entries), in the order the objects were first written:
    an object the run applied and then deleted (a scrub's PVC, PV and Job) shows once it is gone. Its apply never
    would: the index's copy of it went with its DELETED event, so a wait for that write would run out every time."""
    return list({write[:3]: write for write in written}.values())


def _copy(obj):
    """A copy deep enough that a reconcile editing its facts (node_labels keeps written labels on the facts' nodes)
    never edits the index."""
    if isinstance(obj, dict):
        return {key: _copy(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_copy(value) for value in obj]
    return obj


def _interned(obj):
    """The index's own copy of an event's object, its strings interned: each watch event is decoded on its own, so
    every object brings its own copy of the same keys, labels, namespaces and digests, and interning them more than
    halves the index (docs/controller-design.md, section 10)."""
    if isinstance(obj, dict):
        return {sys.intern(key): _interned(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_interned(value) for value in obj]
    if isinstance(obj, str):
        return sys.intern(obj)
    return obj


# How long a read waits for the index to show the reconcile's own writes: watch events follow a write within
# milliseconds on a quiet machine, seconds on a loaded one, and thousands of writes (2,000 nodes' labels) trail their
# events for longer. The read waits while the index shows more of them, until it shows none more for
# WRITES_SHOWN_SECONDS or WRITES_SHOWN_MOST_SECONDS pass; then it goes on with what the index holds.
WRITES_SHOWN_SECONDS = 15
WRITES_SHOWN_MOST_SECONDS = 300
# A wait longer than this is logged.
LAGGING_SECONDS = 1
LOG = logging.getLogger("gkm.index")


class IndexSource(FactsSource):
    """The reads answered from a ClusterIndex: no request to the API server.

    written: the reconcile's Kube.written. Each read first waits (bounded: WRITES_SHOWN_SECONDS) until the index
    shows the writes made since the last read: planned again from an index a write had not reached yet, a run took
    the slot PVC it had just created for missing and replaced the slot's PV, which then waited a minute on its
    finalizer (seen on a loaded machine). earlier: writes of an earlier run of the same cache the index did not show
    when it ended (ClusterIndex.unshown), which the first read waits for too. settled_at: (index version, digest) of
    an earlier run of the same cache that read the index at that version and found nothing to do, or None.
    read_version: the index's version when this source was first read (None before), what such a run records."""

    def __init__(self, index, written=None, earlier=(), settled_at=None):
        self.index = index
        self._seen = index.version
        self._written = written if written is not None else []
        self._shown = 0
        self._earlier = list(earlier)
        self._settled_at = settled_at
        self.read_version = None

    def settled(self, digest):
        return not self._earlier and self._settled_at == (self.index.version, digest)

    def pause(self, seconds):
        """Wait for a change the index has not shown this source yet, at most `seconds`."""
        changed = self.index.wait_for_change(self._seen, seconds)
        self._seen = self.index.version
        return changed

    def gather(self, calls, what):
        pending = last_writes(self._earlier + self._written[self._shown:])
        self._shown, self._earlier = len(self._written), []
        started = time.monotonic()
        if pending:
            # How far the watches lag behind the writes on a large cluster (docs/controller-design.md, section 10).
            if not self.index.wait_for_writes(pending, WRITES_SHOWN_SECONDS, WRITES_SHOWN_MOST_SECONDS):
                LOG.warning("%s: the index shows %d of the reconcile's last %d writes after %.1f s; read as it is",
                            what, len(pending) - len(self.index.unshown(pending)), len(pending),
                            time.monotonic() - started)
            elif time.monotonic() - started > LAGGING_SECONDS:
                LOG.info("%s: the index showed the reconcile's last %d writes after %.1f s", what, len(pending),
                         time.monotonic() - started)
        self._seen = self.index.version
        if self.read_version is None:
            self.read_version = self._seen
        try:
            return [call() for call in calls]
        except (KeyError, ValueError) as error:
            raise DistributeError("%s from the index: %s" % (what, error)) from error

    def cache_objects(self, kind, selector):
        return self.index.select(kind, label_selector=selector)

    def nodes(self, pulled_image=None):
        return [node_facts(node, pulled_image) for node in self.index.select("Node")]

    def namespace_names(self):
        return {namespace["metadata"]["name"] for namespace in self.index.select("Namespace")}

    def storage_classes(self):
        return self.index.select("StorageClass")

    def unfinished_pods(self, namespace):
        return self.index.select("Pod", namespace, field_selector=UNFINISHED_PODS)

    def finished_workload_pods(self, namespace):
        return self.index.select("Pod", namespace, label_selector=unmanaged_selector(), field_selector=FINISHED_PODS)

    def pods(self, namespace):
        return self.index.select("Pod", namespace)

    def failed_managed_pods(self, namespace):
        return self.index.select("Pod", namespace, label_selector=managed_selector(),
                                 field_selector="status.phase=Failed")

    def claims_named(self, name):
        return self.index.select("PersistentVolumeClaim", field_selector="metadata.name=%s" % name)

    def cache_resources_named(self, kind, name):
        return [dict(item, kind=kind) for item in self.index.select(kind, field_selector="metadata.name=%s" % name)]

    def node_objects(self, cache_kind, namespace):
        node_kind, _plural, namespaced = NODE_KINDS[cache_kind]
        return self.index.select(node_kind, namespace if namespaced else None, label_selector=managed_selector())
