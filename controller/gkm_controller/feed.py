"""The index fed by watch events: each event of a watched kind goes to the ClusterIndex once, delivered by kopf or
by the controller's own list-and-watch (kind_watch.py, node_watch.py), which kind by which is decided here.

kopf passes the raw event ({"type": ..., "object": ...}); objects of its initial listing come with type None and
carry their kind (kopf sets it from the list's kind). What a changed object wakes is the index's business
(ClusterIndex.version and its condition: a reconcile waiting in IndexSource.pause); what a Node event starts is
node_filter's.
"""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KINDS,
    GROUP,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_KINDS,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import INDEXED_KINDS

EVENT_TYPES = (None, "ADDED", "MODIFIED", "DELETED")
# Kinds watched through a server-side label selector: only the collection's objects reach the controller (the
# Secrets above all: no other Secret is ever held in memory). PVCs are watched whole: a cache that names a PVC
# after itself is checked against everyone's PVCs of that name (facts/cluster.py, the rivals and named claims).
MANAGED_ONLY = ("PersistentVolume", "Job", "Secret")
MANAGED_SELECTOR = "%s=%s" % (MANAGED_BY_LABEL, MANAGER)
# Kinds the controller watches itself, not through kopf: those whose objects grow with the nodes and the pods, and our
# Secrets (watched in the system namespace alone when every one of them lives there). An event costs a parse and a
# comparison there, where kopf's per-event processing cost about 1.9 ms (docs/controller-design.md, section 10), and
# a paged listing that outlives its continue token is listed again, where it stops kopf. kopf keeps the caches (its
# handlers) and the kinds counted per cluster; a Namespace always lists, so kopf's first event handler call is its
# readiness gate (handlers.Controller.watched).
OWN_WATCHES = ("Node", "PersistentVolumeClaim", "PersistentVolume", "Job", "Pod", "Secret",
               *sorted(kind for kind, _plural, _namespaced in NODE_KINDS.values()))


def watched_kinds():
    """{kind: (group, version, plural, server-side label selector or None)} of every kind the index holds."""
    core = {"PersistentVolumeClaim": ("", "v1", "persistentvolumeclaims"),
            "PersistentVolume": ("", "v1", "persistentvolumes"),
            "Job": ("batch", "v1", "jobs"),
            "Secret": ("", "v1", "secrets"),
            "Node": ("", "v1", "nodes"),
            "Namespace": ("", "v1", "namespaces"),
            "StorageClass": ("storage.k8s.io", "v1", "storageclasses"),
            "Pod": ("", "v1", "pods")}
    ours = {kind: (GROUP, VERSION, plural) for kind, (plural, _namespaced) in CACHE_KINDS.items()}
    ours.update({node_kind: (GROUP, VERSION, plural) for node_kind, plural, _namespaced in NODE_KINDS.values()})
    kinds = dict(core, **ours)
    return {kind: (*kinds[kind], MANAGED_SELECTOR if kind in MANAGED_ONLY else None) for kind in INDEXED_KINDS}


def collection_path(group, version, plural, namespace=None):
    """The API path of a kind's objects in every namespace, or in `namespace` alone."""
    prefix = "/apis/%s/%s" % (group, version) if group else "/api/%s" % version
    return "%s/%s%s" % (prefix, "namespaces/%s/" % namespace if namespace else "", plural)


def own_watches(secrets_namespace=None):
    """{kind: (path, server-side label selector or None)} of the OWN_WATCHES, in their order; the Secrets' path in
    `secrets_namespace` alone when given (render.registry_secrets_namespace: every registry Secret of ours is there,
    and the in-cluster operator may read Secrets nowhere else)."""
    kinds = watched_kinds()
    return {kind: (collection_path(*kinds[kind][:3], namespace=secrets_namespace if kind == "Secret" else None),
                   kinds[kind][3]) for kind in OWN_WATCHES}


def kopf_kinds():
    """{kind: (group, version, plural)} of the kinds kopf watches for the index: watched_kinds() less the
    OWN_WATCHES, all watched whole (none is in MANAGED_ONLY)."""
    return {kind: value[:3] for kind, value in watched_kinds().items() if kind not in OWN_WATCHES}


def feed(index, event, kind=None):
    """Apply one raw watch event to the index; True when what the index holds changed.

    kind: the watched kind, for an object that does not say its own (an event's object normally does).
    """
    event_type = event.get("type")
    if event_type not in EVENT_TYPES:
        raise ValueError("unknown watch event type %r" % event_type)
    obj = event["object"]
    if kind and obj.get("kind") != kind:
        obj = dict(obj, kind=kind)
    return index.apply(event_type, obj)
