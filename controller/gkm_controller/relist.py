"""The relist gap closed: a complete listing of one indexed kind replaces what the index holds of it, and the caches an
object that vanished meanwhile belonged to are re-planned (docs/controller-design.md, section 3, "the relist gap").

kopf 1.45.2 relists a kind after 410 Gone without DELETED events for what went while the watch was down, and shows
its handlers no sign that a relist happened. The listing handed here comes from the controller's own list-and-watch
of the indexed kinds, which knows when it relists (at start and after 410 Gone); this module is the pure part: no
request, no thread. Which caches a vanished object calls to re-plan:

- an object labelled with a cache (PVC, PV, Job, Secret of ours): that cache;
- a PVC of someone else: the caches named like it (the rivals' check, row 6 of the reads, may now pass);
- a Node: the caches holding objects on it (node_reconciles.caches_for_node, over the index already relisted);
- a per-node status object: the caches of its kind in its namespace (cluster-wide for the cluster kind);
- a Namespace or a StorageClass: every cache (rare, and always right);
- a Pod: the caches labelled on a claim it named, unless it is one of our own Jobs' pods, which hold no claim
  (pod_use.claim_holder, the planner's rule). A claim a pod names, running or finished, is kept at its digest
  until the pod goes (pvc-protection, and make before break), and nothing else would reconcile the cache then; the
  cache's status cannot tell, since a reconcile under way when the pod went wrote it from what it read before. Any
  other pod starts nothing (a waiting reconcile is woken by the index's version, which the relist moves);
- a cache resource: none; it carries the finalizer, so it cannot be gone unhandled.

The same rules serve a single deletion the watch delivers (handlers.Controller.watched).

A cache being deleted is never handed on (deletion is final); the finalizer's reconcile is kopf's.
"""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_KINDS, NODE_KINDS
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.pod_use import claim_holder, claims_named
from ansible_collections.gkm.cluster.plugins.module_utils.operator.node_events import holders

from .deletion import deletion_requested
from .node_reconciles import caches_for_node

EVERY_CACHE_KINDS = ("Namespace", "StorageClass")
PER_NODE_KINDS = {node_kind: cache_kind for cache_kind, (node_kind, _plural, _namespaced) in NODE_KINDS.items()}


def _key(obj):
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata["name"]


def _cache_key(resource):
    metadata = resource["metadata"]
    return metadata["name"], metadata.get("namespace") or ""


def _claims_held_for(index, pod):
    """The claims of the index a pod held, as the planner counts holders (pod_use.claim_holder): none for one of our
    own Jobs' pods, whose going releases nothing, so a finished extraction's pod collected re-plans no cache."""
    if not claim_holder(pod):
        return []
    namespace = pod["metadata"].get("namespace")
    return [claim for claim in (index.get("PersistentVolumeClaim", name, namespace) for name in claims_named(pod))
            if claim]


def caches_for_vanished(index, vanished, compatibility="skip"):
    """The cache resources (as the index holds them, kind set; no duplicates, in the index's order) that objects
    gone from the index call to re-plan; never a cache being deleted."""
    # (object, the claims it held when a Pod, else None), each pod's claims looked up once.
    gone = [(obj, _claims_held_for(index, obj) if obj.get("kind") == "Pod" else None) for obj in vanished]
    if all(claims == [] for _obj, claims in gone):
        return []  # the common case, any pod deleted anywhere: no cache is looked at
    resources = [resource for kind in sorted(CACHE_KINDS) for resource in index.select(kind)
                 if not deletion_requested(resource)]
    chosen = set()
    for obj, claims in gone:
        kind = obj.get("kind")
        if kind in EVERY_CACHE_KINDS:
            chosen.update((resource["kind"], _key(resource)) for resource in resources)
        elif kind == "Node":
            chosen.update((resource["kind"], _key(resource))
                          for resource in caches_for_node(index, obj["metadata"]["name"], compatibility))
        elif kind in PER_NODE_KINDS:
            cache_kind, (namespace, _name) = PER_NODE_KINDS[kind], _key(obj)
            chosen.update((resource["kind"], _key(resource)) for resource in resources
                          if resource["kind"] == cache_kind and _key(resource)[0] == namespace)
        else:
            # Ours by its labels; a Pod by the labels of the claims it named.
            owners = holders(claims if kind == "Pod" else [obj])
            if not owners and kind == "PersistentVolumeClaim":
                chosen.update((resource["kind"], _key(resource)) for resource in resources
                              if resource["metadata"]["name"] == obj["metadata"]["name"])
            chosen.update((resource["kind"], _key(resource)) for resource in resources
                          if _cache_key(resource) in owners)
    return [resource for resource in resources if (resource["kind"], _key(resource)) in chosen]


class Relister:
    """relist(kind, objects): a complete listing of an indexed kind into the index; each cache an object vanished
    from is handed to submit(kind, resource), meant to be the cache reconcile. Returns the Relisting and the caches
    handed on. A listing that holds what the index held changes nothing and submits nothing, so a relist of an
    idle cluster writes nothing."""

    def __init__(self, index, submit, compatibility="skip"):
        self.index, self.submit, self.compatibility = index, submit, compatibility

    def relist(self, kind, objects):
        relisting = self.index.relisted(kind, objects)
        affected = caches_for_vanished(self.index, relisting.vanished, self.compatibility) if relisting.vanished else []
        for resource in affected:
            self.submit(resource["kind"], resource)
        return relisting, affected
