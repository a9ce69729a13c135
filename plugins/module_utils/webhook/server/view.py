# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The webhook's in-memory view of caches and their per-node PVCs, fed by list+watch events.

Pure data: no API calls. The server applies watch events to it on its event loop and the
admission logic asks it one question per PVC volume: "in namespace N, does claim name C name a
cache, and if so which PVC serves node X?".

Three sources make a cache visible from a namespace:
- a GKMCache in that namespace;
- a ClusterGKMCache whose spec.workloadNamespaces lists the namespace;
- PVCs of the namespace labelled by cache_distribute (the collection can distribute without the CRDs).
A namespaced cache shadows a cluster cache of the same name.
A PVC is handed out only once it is marked extracted (`gkm.io/extracted-digest` at its own digest, written when
its Job completed): the current digest's on the node, or else the newest extracted PVC of a previous digest the
node still has (the planner keeps it until the new one is extracted: make before break).
Why a node gets no PVC comes from the per-node objects the reconcile writes (GKMCacheNode,
ClusterGKMCacheNode; distribute/node_objects.py): the reason of each cache excluded on the node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import holds_extracted
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import label_value, short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    CLUSTER_CACHE_KIND,
    DIGEST_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
    SERVING_LABEL,
    SLOT_ACCESS_LABEL,
)

# Selector for the only PVCs the webhook needs to see.
MANAGED_PVC_SELECTOR = "{0}={1},{2}".format(MANAGED_BY_LABEL, MANAGER, CACHE_LABEL)


class CacheClaim:
    """What a claim name resolves to in one namespace.

    scope is 'namespaced' or 'cluster'; digest is the short digest pods should get (None when no
    PVC exists yet and the cache object does not pin one); read_only is True for ReadOnlyMany
    caches, whose single PVC is named as the cache and needs no rewrite.
    """

    __slots__ = ("_excluded", "_node_pvcs", "_previous_pvc", "digest", "name", "namespace", "read_only", "scope")

    def __init__(self, name, namespace, scope, digest, node_pvcs, read_only, excluded=None, previous_pvc=None):
        self.name = name
        self.namespace = namespace
        self.scope = scope
        self.digest = digest
        self._node_pvcs = node_pvcs
        # node label -> the node's newest extracted PVC of a previous digest, or None
        self._previous_pvc = previous_pvc or (lambda node: None)
        self.read_only = read_only
        self._excluded = excluded or (lambda node: None)

    def pvc_for(self, node):
        """Name of the extracted PVC of the current digest on node, else of the newest previous digest it still
        has extracted, or None."""
        # cache_distribute writes the node label through label_value (long names get a hash).
        key = label_value(node)
        return self._node_pvcs.get(key) or self._previous_pvc(key)

    def excluded_reason(self, node):
        """Why the last reconcile gave node no PVC (incompatible GPU, no GPU, an untolerated taint, ...), or None."""
        return self._excluded(node)

    def describe(self):
        if self.scope == "cluster":
            return 'ClusterGKMCache "{0}"'.format(self.name)
        return 'GKMCache "{0}/{1}"'.format(self.namespace, self.name)


class _DeclaredCache:
    __slots__ = ("digest", "read_only", "workload_namespaces")

    def __init__(self, digest, read_only, workload_namespaces):
        self.digest = digest
        self.read_only = read_only
        self.workload_namespaces = workload_namespaces


class _PvcRecord:
    __slots__ = ("cache", "cache_namespace", "created", "digest", "extracted", "node")

    def __init__(self, cache, cache_namespace, node, digest, created, extracted):
        self.cache = cache
        self.cache_namespace = cache_namespace
        self.node = node
        self.digest = digest
        self.created = created
        self.extracted = extracted


def _node_exclusions(obj):
    """{cache: why it is not on the node} from a per-node object's status (see distribute/node_objects.py)."""
    status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
    caches = status.get("caches") if isinstance(status.get("caches"), dict) else {}
    exclusions = {}
    for cache, digests in caches.items():
        for state in (digests or {}).values() if isinstance(digests, dict) else ():
            if isinstance(state, dict) and state.get("reason"):
                exclusions[cache] = state.get("message") or state["reason"]
    return exclusions


def _declared_cache(cache):
    return _DeclaredCache(
        digest=short_digest(cache.pinned_digest) if cache.pinned_digest else None,
        read_only=not cache.per_node,
        workload_namespaces=frozenset(cache.workload_namespaces),
    )


def pvc_record(obj):
    """A _PvcRecord for a PVC written by cache_distribute, or None for anything else."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGER or not labels.get(CACHE_LABEL) or labels.get(SERVING_LABEL) or (
            labels.get(SLOT_ACCESS_LABEL)):
        # A serving PVC (distribute/serving.py) is no node's PVC: pods mount it by the cache's name as it is; nor is
        # the PVC of the system namespace an extraction Job writes a slot through (render.render_access).
        return None
    digest = labels.get(DIGEST_LABEL) or ""
    return _PvcRecord(
        cache=labels[CACHE_LABEL],
        cache_namespace=labels.get(CACHE_NAMESPACE_LABEL, ""),
        node=labels.get(NODE_LABEL) or None,
        digest=digest,
        created=metadata.get("creationTimestamp") or "",
        extracted=holds_extracted(obj),
    )


def _key(obj):
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name") or ""


class _PvcGroup:
    """The PVCs of one cache in one namespace, with lookups derived lazily after changes.

    Derivation is deferred to the first lookup so that a LIST of thousands of PVCs costs one
    pass, not one pass per PVC.
    """

    __slots__ = ("_by_digest", "_extracted_by_node", "_newest_digest", "_read_only", "records")

    def __init__(self):
        self.records = {}  # pvc name -> _PvcRecord
        self._by_digest = None

    def changed(self):
        self._by_digest = None

    def _derive(self):
        by_digest, extracted_by_node = {}, {}
        newest = None
        read_only = False
        for pvc_name in sorted(self.records):
            record = self.records[pvc_name]
            if record.node is None:
                read_only = True
                continue
            if record.extracted:
                by_digest.setdefault(record.digest, {}).setdefault(record.node, pvc_name)
                extracted_by_node.setdefault(record.node, []).append((record.created, record.digest, pvc_name))
            if newest is None or (record.created, record.digest) > newest:
                newest = (record.created, record.digest)
        for records in extracted_by_node.values():
            records.sort(reverse=True)
        self._by_digest = by_digest
        self._extracted_by_node = extracted_by_node
        self._newest_digest = newest[1] if newest else None
        self._read_only = read_only

    def newest_digest(self):
        if self._by_digest is None:
            self._derive()
        return self._newest_digest

    def read_only(self):
        if self._by_digest is None:
            self._derive()
        return self._read_only

    def node_pvcs(self, digest):
        """{node label: PVC} of the extracted PVCs of one digest."""
        if self._by_digest is None:
            self._derive()
        return self._by_digest.get(digest, {})

    def previous_pvc(self, node, digest):
        """The node's newest extracted PVC of a digest other than `digest`, or None."""
        if self._by_digest is None:
            self._derive()
        return next((name for _created, other, name in self._extracted_by_node.get(node, ()) if other != digest),
                    None)


_NO_PVCS = _PvcGroup()


class CacheView:
    """Caches and managed PVCs, indexed for one dictionary lookup per PVC volume of a pod."""

    def __init__(self):
        self._pvc_groups = {}  # (pvc namespace, cache, cache namespace) -> _PvcGroup
        self._pvc_group_of = {}  # (namespace, pvc name) -> group key, to move or drop a PVC
        self._caches = {CACHE_KIND: {}, CLUSTER_CACHE_KIND: {}}  # kind -> {(namespace, name): _DeclaredCache}
        self._cluster_caches_by_name = {}
        # cache kind -> {(namespace or '', node): {cache: reason}}, only nodes with an exclusion
        self._exclusions = {CACHE_KIND: {}, CLUSTER_CACHE_KIND: {}}

    # -- feeding ---------------------------------------------------------------------------

    def apply_pvc_event(self, event_type, obj):
        """Apply one watch event (ADDED, MODIFIED, DELETED) of a PVC."""
        key = _key(obj)
        self._forget_pvc(key)
        if event_type == "DELETED":
            return
        record = pvc_record(obj)
        if record is None:
            return
        group_key = (key[0], record.cache, record.cache_namespace)
        group = self._pvc_groups.get(group_key)
        if group is None:
            group = self._pvc_groups[group_key] = _PvcGroup()
        group.records[key[1]] = record
        group.changed()
        self._pvc_group_of[key] = group_key

    def replace_pvcs(self, items):
        """Replace every PVC with the result of a fresh LIST."""
        self._pvc_groups = {}
        self._pvc_group_of = {}
        for obj in items:
            self.apply_pvc_event("ADDED", obj)

    def set_cache(self, kind, key, cache):
        """One cache read from its watch event (contract.read_cache), None once deleted; key: (namespace, name)."""
        if cache is None:
            self._caches[kind].pop(key, None)
        else:
            self._caches[kind][key] = _declared_cache(cache)
        self._caches_changed(kind)

    def set_caches(self, kind, caches):
        """Every cache of one kind, {key: CacheResource} from a fresh LIST (empty when the CRD is absent)."""
        self._caches[kind] = {key: _declared_cache(cache) for key, cache in caches.items()}
        self._caches_changed(kind)

    def apply_node_object_event(self, kind, event_type, obj):
        """Apply one watch event of a per-node object (kind: the cache kind it belongs to)."""
        key = _key(obj)
        exclusions = {} if event_type == "DELETED" else _node_exclusions(obj)
        if exclusions:
            self._exclusions[kind][key] = exclusions
        else:
            self._exclusions[kind].pop(key, None)

    def replace_node_objects(self, kind, items):
        """Replace the per-node objects of one cache kind with a fresh LIST (empty when the CRD is absent)."""
        self._exclusions[kind] = {}
        for obj in items:
            self.apply_node_object_event(kind, "ADDED", obj)

    def _caches_changed(self, kind):
        if kind == CLUSTER_CACHE_KIND:
            self._cluster_caches_by_name = {name: cache for (_namespace, name), cache in self._caches[kind].items()}

    def _forget_pvc(self, key):
        group_key = self._pvc_group_of.pop(key, None)
        if group_key is None:
            return
        group = self._pvc_groups[group_key]
        del group.records[key[1]]
        group.changed()
        if not group.records:
            del self._pvc_groups[group_key]

    # -- asking ----------------------------------------------------------------------------

    def counts(self):
        return {
            "pvcs": len(self._pvc_group_of),
            "namespaced_caches": len(self._caches[CACHE_KIND]),
            "cluster_caches": len(self._caches[CLUSTER_CACHE_KIND]),
        }

    def resolve(self, namespace, claim_name):
        """The CacheClaim that claim_name names in namespace, or None when it names no cache."""
        declared = self._caches[CACHE_KIND].get((namespace, claim_name))
        group = self._pvc_groups.get((namespace, claim_name, namespace))
        if declared is not None or group is not None:
            return self._claim(claim_name, namespace, "namespaced", declared, group, self._excluded(
                CACHE_KIND, namespace, claim_name))
        declared = self._cluster_caches_by_name.get(claim_name)
        if declared is not None and namespace not in declared.workload_namespaces:
            declared = None
        group = self._pvc_groups.get((namespace, claim_name, ""))
        if declared is not None or group is not None:
            return self._claim(claim_name, namespace, "cluster", declared, group, self._excluded(
                CLUSTER_CACHE_KIND, "", claim_name))
        return None

    def _excluded(self, kind, namespace, cache):
        """node -> why the cache is not on it, read from the per-node objects when asked."""
        by_node = self._exclusions[kind]
        return lambda node: by_node.get((namespace, node), {}).get(cache)

    @staticmethod
    def _claim(name, namespace, scope, declared, group, excluded):
        group = group or _NO_PVCS
        digest = declared.digest if declared is not None else None
        if digest is None:
            # Without a digest pinned in the cache object, the newest distributed digest is the
            # current one: cache_distribute creates a new digest's PVCs after an image change
            # and keeps the old ones only while pods still mount them.
            digest = group.newest_digest()
        read_only = (declared is not None and declared.read_only) or group.read_only()
        return CacheClaim(name, namespace, scope, digest, group.node_pvcs(digest), read_only, excluded,
                          lambda node: group.previous_pvc(node, digest))
