"""What a Node event that passed the filter (node_filter.py) reconciles: the caches it affects, decided over the
index with today's rule (operator/node_events.affected_caches: the node joins or leaves a cache's placement, or its
GPUs changed), never a cache being deleted.

This first version hands each affected cache to the cache reconcile (submit), which is always right; the
incremental node reconcile (facts narrowed to the node, only that node's writes: docs/controller-design.md,
section 5) replaces it where it is shown to plan the same.
"""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CACHE_KINDS
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import NODE_NAMED_KINDS
from ansible_collections.gkm.cluster.plugins.module_utils.operator.node_events import affected_caches, holders

from .deletion import deletion_requested
from .node_filter import NODE_OBJECT_KINDS


def _on_node(index, name):
    """(the node's PVCs and PVs of any cache, its per-node status objects of every cache kind)."""
    objects = [obj for kind in NODE_OBJECT_KINDS for obj in index.held_on_node(kind, name)]
    statuses = [obj for node_kind in NODE_NAMED_KINDS for obj in index.held_on_node(node_kind, name)]
    return objects, statuses


def _cache_key(resource):
    metadata = resource["metadata"]
    return metadata["name"], metadata.get("namespace") or ""


def caches_for_node(index, name, compatibility="skip"):
    """The cache resources (as the index holds them, kind set) a change of the node `name` calls to reconcile.

    A node the index no longer holds (deleted) affects the caches that hold objects on it.
    """
    resources = [resource for kind in sorted(CACHE_KINDS) for resource in index.select(kind)
                 if not deletion_requested(resource)]
    objects, statuses = _on_node(index, name)
    held = index.get("Node", name)
    if held is None:
        keys = holders(objects)
        return [resource for resource in resources if _cache_key(resource) in keys]
    return affected_caches(held, resources, objects, compatibility, statuses)


class NodeReconciles:
    """handlers.Controller's node_changed: submit(kind, resource) for each cache the node's change affects."""

    def __init__(self, index, submit, compatibility="skip"):
        self.index, self.submit, self.compatibility = index, submit, compatibility

    def __call__(self, decision):
        affected = caches_for_node(self.index, decision.name, self.compatibility)
        for resource in affected:
            self.submit(resource["kind"], resource)
        return affected
