# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a reconcile's cluster facts come from, behind one interface (the seam of issue 33).

A FactsSource answers each read the facts stage makes (facts/cluster.py), one method per read. ListSource answers
them with the same paged LISTs the modules send today; IndexSource answers them from a ClusterIndex, an in-memory
copy of the cluster that a controller keeps current from watch events, and sends no request at all.
assemble_facts(source, spec) builds the planner's ClusterFacts from either, in the same order and with the same
trimming as gather_facts, so the plan, apply and status stages see identical facts whichever source fed them.

Nothing here is wired into pipeline.py yet: gather_facts(kube, spec) still reads with LISTs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    cache_selector,
    managed_selector,
    pinned_reference,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KINDS,
    GROUP,
    NODE_KINDS,
    NODE_LABEL,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    OBJECT_KINDS,
    UNFINISHED_PODS,
    ClusterFacts,
    _failing_job_namespaces,
    _storage_class,
    node_facts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.node_objects import list_node_objects
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import spec_claims

FINISHED_PHASES = ("Succeeded", "Failed")


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


def labels_match(obj, selector):
    """True when the object's labels satisfy an equality-based label selector."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return _matches(parse_selector(selector), labels.get)


def fields_match(obj, selector):
    """True when the object satisfies an equality-based field selector (metadata.name=x, status.phase!=y)."""
    return _matches(parse_selector(selector), lambda path: _field(obj, path))


# ------------------------------------------------------------------ the interface


class FactsSource:
    """Every read of the cluster a reconcile's facts stage makes, one method per read.

    gather(calls, what) runs independent reads (callables without arguments) and returns their results in order;
    a source that talks to the API server may run them at once. Each other method returns plain API dicts.
    """

    def gather(self, calls, what):
        raise NotImplementedError

    def pause(self, seconds):
        """Wait before reading again (a poll of apply/wait.py): at most `seconds`, less when the source knows the
        cluster changed. Returns True when it saw a change, False when it only waited."""
        raise NotImplementedError

    def cache_objects(self, kind, selector):
        """Objects of one of OBJECT_KINDS carrying the cache's labels (cache_selector), cluster-wide."""
        raise NotImplementedError

    def nodes(self, pulled_image=None):
        """Every Node as node_facts(node, pulled_image) keeps it."""
        raise NotImplementedError

    def namespace_names(self):
        raise NotImplementedError

    def storage_classes(self):
        raise NotImplementedError

    def unfinished_pods(self, namespace):
        """Pods of the namespace whose phase is neither Succeeded nor Failed."""
        raise NotImplementedError

    def failed_managed_pods(self, namespace):
        """Failed pods of the namespace labelled as the collection's (its Jobs' pods)."""
        raise NotImplementedError

    def claims_named(self, name):
        """PVCs of that name in every namespace, whoever made them."""
        raise NotImplementedError

    def cache_resources_named(self, kind, name):
        """Cache resources of a kind (GKMCache or ClusterGKMCache) with that name, each with its kind set."""
        raise NotImplementedError

    def node_objects(self, cache_kind, namespace):
        """The collection's per-node objects of a cache kind (in the cache's namespace for a GKMCache): what
        status/node_writer.py compares its writes with."""
        raise NotImplementedError


def _strip(obj):
    obj["metadata"].pop("managedFields", None)
    return obj


class ListSource(FactsSource):
    """The reads as LISTs through common/kube.py, exactly the requests facts/cluster.py sends."""

    def __init__(self, kube):
        self.kube = kube

    def gather(self, calls, what):
        return self.kube.map_all(lambda call: call(), calls, what, DistributeError)

    def pause(self, seconds):
        time.sleep(seconds)
        return False

    def cache_objects(self, kind, selector):
        return [_strip(obj) for obj in self.kube.items(kind, label_selector=selector)]

    def nodes(self, pulled_image=None):
        return [node_facts(node, pulled_image) for node in self.kube.items("Node")]

    def namespace_names(self):
        return {namespace["metadata"]["name"] for namespace in self.kube.items("Namespace", metadata_only=True)}

    def storage_classes(self):
        return self.kube.list("StorageClass")

    def unfinished_pods(self, namespace):
        return [_strip(pod) for pod in self.kube.items("Pod", namespace=namespace, field_selector=UNFINISHED_PODS)]

    def failed_managed_pods(self, namespace):
        return [_strip(pod) for pod in self.kube.items("Pod", namespace=namespace, label_selector=managed_selector(),
                                                       field_selector="status.phase=Failed")]

    def claims_named(self, name):
        return self.kube.list("PersistentVolumeClaim", field_selector="metadata.name=%s" % name)

    def cache_resources_named(self, kind, name):
        path = "/apis/%s/%s/%s" % (GROUP, VERSION, CACHE_KINDS[kind][0])
        status, data = self.kube.request("GET", path, [("fieldSelector", "metadata.name=%s" % name)],
                                         what="list %s" % path)
        return [dict(item, kind=kind) for item in ((data or {}).get("items") or []) if status == 200]

    def node_objects(self, cache_kind, namespace):
        return list_node_objects(self.kube, cache_kind, namespace)


# ------------------------------------------------------------------ the in-memory copy a controller keeps


INDEXED_KINDS = (*OBJECT_KINDS, "Node", "Namespace", "StorageClass", "Pod", *sorted(CACHE_KINDS),
                 *sorted(kind for kind, _plural, _namespaced in NODE_KINDS.values()))


def _key(obj):
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata["name"]


class ClusterIndex:
    """The objects a reconcile reads, kept current from watch events, trimmed as the facts stage trims them.

    apply(event_type, obj) takes one event (ADDED, MODIFIED, DELETED; kopf's initial listing passes None, read as
    ADDED) and returns True when what the index holds changed. A Node is held as node_facts keeps it, plus the
    digest-pinned names of the images its kubelet reports (only `watched_images` when that set is given), so a
    heartbeat that changes only conditions, addresses or the resourceVersion changes nothing here and returns False:
    the controller starts no reconcile for it. managedFields is dropped from everything.

    Reads and writes hold one lock: watch events arrive on the controller's event loop while a reconcile reads from
    a worker thread. `version` counts the changes; wait_for_change(since, timeout) lets a reconcile that polls (a
    Job to complete, a PVC to bind) wake at the change instead of at the end of its poll interval.
    """

    def __init__(self, watched_images=None):
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects = {kind: {} for kind in INDEXED_KINDS}
        self.watched_images = watched_images
        self.version = 0

    def _trim(self, kind, obj):
        """What the index holds of an event's object: its own copy, never sharing a dict with the event's body."""
        return _copy(self._trimmed(kind, obj))

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
        trimmed = dict(obj, metadata=dict(obj.get("metadata") or {}))
        trimmed["metadata"].pop("managedFields", None)
        return trimmed

    def apply(self, event_type, obj):
        kind = obj.get("kind")
        if kind not in self._objects:
            raise ValueError("the index holds no %r objects" % kind)
        key = _key(obj)
        trimmed = None if event_type == "DELETED" else self._trim(kind, obj)
        with self._lock:
            held = self._objects[kind]
            if trimmed is None:
                if held.pop(key, None) is None:
                    return False
            elif held.get(key) == trimmed:
                return False
            else:
                held[key] = trimmed
            self.version += 1
            self._changed.notify_all()
            return True

    def relisted(self, kind, objects):
        """Take a fresh listing of a kind as the whole truth (a watch restarted after 410 Gone lists again, and an
        object deleted meanwhile gets no DELETED event): objects not in it are dropped. True when anything changed."""
        fresh = {}
        for obj in objects:
            if obj.get("kind") != kind:
                raise ValueError("a listing of %s holds a %r" % (kind, obj.get("kind")))
            fresh[_key(obj)] = self._trim(kind, obj)
        with self._lock:
            if self._objects[kind] == fresh:
                return False
            self._objects[kind] = fresh
            self.version += 1
            self._changed.notify_all()
            return True

    def wait_for_change(self, since, timeout):
        """Block until `version` passes `since` or `timeout` seconds pass; True when it changed."""
        with self._lock:
            return self._changed.wait_for(lambda: self.version > since, timeout)

    def _all(self, kind, namespace=None):
        with self._lock:
            objects = list(self._objects[kind].values()) if namespace is None else [
                obj for (ns, _name), obj in self._objects[kind].items() if ns == namespace]
        return [_copy(obj) for obj in objects]

    def select(self, kind, namespace=None, label_selector=None, field_selector=None):
        """Held objects of a kind (in a namespace), filtered as the API server filters a LIST."""
        return [obj for obj in self._all(kind, namespace)
                if (not label_selector or labels_match(obj, label_selector))
                and (not field_selector or fields_match(obj, field_selector))]

    def count(self, kind):
        with self._lock:
            return len(self._objects[kind])


def _copy(obj):
    """A copy deep enough that a reconcile editing its facts (node_labels keeps written labels on the facts' nodes)
    never edits the index."""
    if isinstance(obj, dict):
        return {key: _copy(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_copy(value) for value in obj]
    return obj


class IndexSource(FactsSource):
    """The reads answered from a ClusterIndex: no request to the API server."""

    def __init__(self, index):
        self.index = index
        self._seen = index.version

    def pause(self, seconds):
        """Wait for a change the index has not shown this source yet, at most `seconds`."""
        changed = self.index.wait_for_change(self._seen, seconds)
        self._seen = self.index.version
        return changed

    def gather(self, calls, what):
        self._seen = self.index.version
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
        return [pod for pod in self.index.select("Pod", namespace)
                if (pod.get("status") or {}).get("phase") not in FINISHED_PHASES]

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


# ------------------------------------------------------------------ the facts stage over a source


def source_pods(source, namespaces, objects, existing_namespaces=None):
    """list_pods (facts/cluster.py) over a source: the unfinished pods of the cache's namespaces and of every namespace
    its PVCs and Jobs are in, and the failed pods of namespaces with a failing Job."""
    namespaces = set(namespaces)
    for kind in ("PersistentVolumeClaim", "Job"):
        namespaces.update(obj["metadata"]["namespace"] for obj in objects.get(kind, []))
    if existing_namespaces is not None:
        namespaces &= existing_namespaces
    calls = [lambda ns=ns: source.unfinished_pods(ns) for ns in sorted(namespaces)]
    calls += [lambda ns=ns: source.failed_managed_pods(ns)
              for ns in sorted(_failing_job_namespaces(objects.get("Job", [])))]
    return [pod for pods in source.gather(calls, "listing pods") for pod in pods]


def source_conflicts(source, spec):
    """conflict_facts (facts/cluster.py) over a source: (rival cache resources, live PVCs of the cache's name)."""
    if not spec_claims(spec):
        return [], []
    kinds = sorted(CACHE_KINDS) if spec.owner else []
    calls = [lambda: source.claims_named(spec.name)]
    calls += [lambda kind=kind: source.cache_resources_named(kind, spec.name) for kind in kinds]
    results = source.gather(calls, "reading the cluster")
    return [item for listed in results[1:] for item in listed], results[0]


def assemble_facts(source, spec):
    """gather_facts (facts/cluster.py) over a source: the same reads in the same groups, the same ClusterFacts."""
    selector = cache_selector(spec.name, spec.cache_namespace)
    present = spec.state == "present"
    calls = [lambda kind=kind: source.cache_objects(kind, selector) for kind in OBJECT_KINDS]
    if present:
        pulled_image = pinned_reference(spec.image, spec.digest) if spec.image_volume else None
        calls += [lambda: source.nodes(pulled_image), source.namespace_names, source.storage_classes]
    results = source.gather(calls, "reading the cluster")
    objects = {kind: results[index] for index, kind in enumerate(OBJECT_KINDS)}
    nodes, namespace_names, classes = results[len(OBJECT_KINDS):] if present else ([], set(), [])
    rivals, named_claims = source_conflicts(source, spec) if present else ([], [])
    return ClusterFacts(nodes, namespace_names, objects, source_pods(source, spec.namespaces, objects, namespace_names),
                        _storage_class(spec, classes) if present else None, rivals, named_claims)


# ------------------------------------------------------------------ a node's share of the facts


def node_of(obj):
    """The node an object of a cache belongs to (its gkm.io/node label), None for a namespace-level one (a serving
    PVC and its PV, the registry Secret)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(NODE_LABEL)


def narrow_to_node(facts, node_name):
    """The facts a node event's reconcile plans with: that Node alone (none when it is gone), the cache's objects on
    that node, and the namespace-level objects as they are. Only the plan's actions on that node's objects may be
    written from such a plan (a plan that sees one node would judge the namespace-level objects by it alone)."""
    objects = {kind: [obj for obj in listed if node_of(obj) in (None, node_name)]
               for kind, listed in facts.objects.items()}
    return ClusterFacts([node for node in facts.nodes if node["metadata"]["name"] == node_name], facts.namespaces,
                        objects, facts.pods, facts.storage_class, facts.rivals, facts.named_claims)
