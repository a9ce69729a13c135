# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-node status objects one cache reconcile writes (GKMCacheNode, ClusterGKMCacheNode), pure.

As in GKM, one object per node, named as the node and labelled with its hostname: a GKMCacheNode in
the namespace of the GKMCaches it lists, a ClusterGKMCacheNode for every ClusterGKMCache. Its status
holds the node's GPUs, per cache and digest the state node_status.py computes, and the node's counts.
Caches share a node's object, so a reconcile owns `status.caches.<its name>` only: it recomputes the
counts from every cache listed and writes a JSON merge patch of what changed, guarded by the
resourceVersion it read (a concurrent writer gets a conflict and reads again). `lastUpdated` and a
condition's `lastTransitionTime` are kept while the state says the same thing, so a run that changes
nothing writes nothing. The API server ignores the status of a create: a new object is a create
followed by a status patch. An object left with no cache is deleted.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.common.merge_patch import merge_patch
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import label_value
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
    EXTRACTED,
    GROUP,
    HOSTNAME_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_KINDS,
    OUTDATED,
    RUNNING,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_status import node_gpus

# cache kind -> (per-node kind, plural, namespaced)
CREATE, PATCH_STATUS, DELETE = "create", "patch_status", "delete"


class NodeWrite:
    """One request: create (body: the object), patch_status (body: a merge patch) or delete.

    resource_version: the one read, for the patch's or the delete's precondition (None right after a create).
    """

    __slots__ = ("body", "name", "resource_version", "verb")

    def __init__(self, verb, name, body=None, resource_version=None):
        self.verb = verb
        self.name = name
        self.body = body
        self.resource_version = resource_version

    def to_dict(self):
        return {"action": self.verb, "name": self.name}


def _meaning(state):
    """A state without its timestamps."""
    state = copy.deepcopy(state)
    state.pop("lastUpdated", None)
    for pvc in (state.get("pvcStatus") or {}).values():
        for condition in pvc.get("conditions") or []:
            condition.pop("lastTransitionTime", None)
    return state


def _stamped(desired, previous, now):
    """{digest: state} with timestamps: the previous state itself while it means the same."""
    stamped = {}
    for digest, state in desired.items():
        before = (previous or {}).get(digest)
        if before is not None and _meaning(before) == state:
            stamped[digest] = before
            continue
        state = copy.deepcopy(state)
        state["lastUpdated"] = now
        old_pvcs = (before or {}).get("pvcStatus") or {}
        for namespace, pvc in (state.get("pvcStatus") or {}).items():
            old = {(c.get("type"), c.get("status")): c for c in (old_pvcs.get(namespace) or {}).get("conditions") or []}
            for condition in pvc["conditions"]:
                kept = old.get((condition["type"], condition["status"]))
                condition["lastTransitionTime"] = (kept or {}).get("lastTransitionTime") or now
        stamped[digest] = state
    return stamped


def node_counts(caches):
    """GKM's counts of one node over every cache on it: node counts are 0 or 1, pods are summed."""
    states = [state for digests in caches.values() for state in digests.values()]
    pods = {OUTDATED: 0, RUNNING: 0}
    for state in states:
        pods[OUTDATED if state.get("state") == OUTDATED else RUNNING] += len(state.get("pods") or [])
    kinds = {state.get("state") for state in states}
    in_use = RUNNING in kinds
    return {"nodeCnt": 1, "nodeInUseCnt": int(in_use), "nodeNotInUseCnt": int(not in_use and EXTRACTED in kinds),
            "nodeErrorCnt": int(ERROR in kinds), "podRunningCnt": pods[RUNNING], "podDeletingCnt": 0,
            "podOutdatedCnt": pods[OUTDATED]}


def _new_object(node_kind, namespace, name):
    metadata = {"name": name, "labels": {MANAGED_BY_LABEL: MANAGER, HOSTNAME_LABEL: label_value(name)}}
    if namespace:
        metadata["namespace"] = namespace
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": node_kind, "metadata": metadata}


def plan_node_objects(cache_kind, namespace, cache, states, nodes, existing, now):
    """The NodeWrites that make the per-node objects say `states` for the cache, and nothing else.

    states: {node: {digest: state}} (node_status.node_cache_states; {} removes the cache everywhere).
    nodes: the cluster's Node objects (their GPUs). existing: the live per-node objects of the cache's
    kind (and namespace). now: an RFC 3339 timestamp. Objects another manager wrote are left alone.
    """
    node_kind, _plural, namespaced = NODE_KINDS[cache_kind]
    namespace = namespace if namespaced else None
    by_name = {node["metadata"]["name"]: node for node in nodes}
    live = {obj["metadata"]["name"]: obj for obj in existing}
    writes = []
    for name in sorted(set(states) | {n for n, obj in live.items() if cache in _caches(obj)}):
        obj = live.get(name)
        if obj is not None and (obj["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) != MANAGER:
            continue
        before = (obj or {}).get("status") or {}
        caches = dict(before.get("caches") or {})
        if states.get(name):
            caches[cache] = _stamped(states[name], caches.get(cache), now)
        else:
            caches.pop(cache, None)
        if not caches:
            if obj is not None:
                writes.append(NodeWrite(DELETE, name, resource_version=obj["metadata"].get("resourceVersion")))
            continue
        after = {"nodeName": name, "counts": node_counts(caches), "caches": caches}
        gpus = node_gpus(by_name[name]) if name in by_name else before.get("gpus")
        if gpus:
            after["gpus"] = gpus
        if obj is None:
            writes.append(NodeWrite(CREATE, name, _new_object(node_kind, namespace, name)))
            writes.append(NodeWrite(PATCH_STATUS, name, {"status": after}))
            continue
        patch = merge_patch(before, after)
        if patch:
            writes.append(NodeWrite(PATCH_STATUS, name, {"status": patch}, obj["metadata"].get("resourceVersion")))
    return writes


def _caches(obj):
    return (obj.get("status") or {}).get("caches") or {}
