# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Name conflicts between caches, pure: two caches that would own one object.

Every object name but one hashes the whole slot (cache, cache namespace, namespace, node, digest; see
contract/naming.py), so two caches never share it. The exception is what workloads name: a ReadOnlyMany cache's
PVC and a ReadWriteOnce cache's serving PVC (serving.py) are named as the cache, in each of its namespaces, so a
GKMCache and a ClusterGKMCache of one name whose namespaces meet want one PVC (a resource does not say whether
its serving PVC is turned off, so every resource is taken to want it). Of two such resources the ClusterGKMCache
keeps the PVC whenever it was created: the admin chose its namespaces, and a tenant's GKMCache made first must not
refuse it in all of them. The GKMCache is refused before anything is written, so it never deletes or overwrites
what the cluster cache owns.

A live PVC of that name is the cache's own only when its owner reference names the cache resource's uid (a cache
distributed without a resource has only its labels); labels are anyone's to write. Any other live PVC refuses the
cache in that namespace, the outranked GKMCache's included until it is deleted (nothing of it is overwritten under
its pods): whoever may create a PVC in one workload namespace of a ClusterGKMCache must not stop it in the others,
so a cluster cache is refused there only (its status names the PVC) and served in the rest; a cache left with no
namespace is refused whole.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    API_VERSION,
    CACHE_KIND_LABEL,
    CACHE_KINDS,
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    CLUSTER_CACHE_KIND,
    MANAGED_BY_LABEL,
    MANAGER,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import spec_claims
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scheduling import PlanError

# Sorts after every RFC 3339 timestamp: a manifest not applied yet (check mode) comes after what exists.
NOT_CREATED = "~"
# The reason of a refusal: the error's, and a refused namespace's status entry.
CONFLICT = "Conflict"


class CacheConflictError(PlanError, GkmError):
    """The cache would own an object another cache (or someone else) owns; the message names both and the fix."""

    def __init__(self, message):
        super(CacheConflictError, self).__init__(message, reason=CONFLICT)


def describe(kind, namespace, name):
    return "%s %s%s" % (kind, "%s/" % namespace if namespace else "", name)


def resource_claims(resource):
    """{(namespace, PVC name)} a GKMCache or ClusterGKMCache resource would name after itself."""
    spec = resource.get("spec") or {}
    metadata = resource.get("metadata") or {}
    namespaces = [metadata.get("namespace")] if resource.get("kind") == "GKMCache" else spec.get(
        "workloadNamespaces") or []
    return {(namespace, metadata["name"]) for namespace in namespaces if namespace}


def _order(kind, name, created):
    """A ClusterGKMCache before a GKMCache, then the earlier (only two kinds' PVC names can meet: the rank decides)."""
    return (kind != CLUSTER_CACHE_KIND, created or NOT_CREATED, kind, name)


def _self_order(spec):
    owner = spec.owner or {}
    return _order(owner.get("kind", ""), spec.name, owner.get("creationTimestamp"))


def _is_self(spec, resource):
    owner = spec.owner or {}
    metadata = resource.get("metadata") or {}
    return (resource.get("kind"), metadata.get("namespace") if resource.get("kind") == "GKMCache" else None,
            metadata.get("name")) == (owner.get("kind"), owner.get("namespace"), spec.name)


def _self_name(spec):
    owner = spec.owner
    if owner:
        return describe(owner["kind"], owner.get("namespace"), spec.name)
    return "cache %s" % (("%s/" % spec.cache_namespace if spec.cache_namespace else "") + spec.name)


def _fix(spec):
    return ("rename one of the two, keep their namespaces apart, or make one ReadWriteOnce with serving_pvc: false "
            "(per-node PVCs never collide); %s is refused until then, the other is unaffected" % _self_name(spec))


def _earlier_rival(spec, rivals, wanted):
    """The first rival resource, ahead of this cache, that wants one of the same PVCs: (resource, shared), or
    (None, empty set)."""
    mine = _self_order(spec)
    ahead = []
    for resource in rivals:
        if _is_self(spec, resource):
            continue
        metadata = resource.get("metadata") or {}
        shared = resource_claims(resource) & wanted
        order = _order(resource.get("kind", ""), metadata.get("name", ""), metadata.get("creationTimestamp"))
        if shared and order < mine:
            ahead.append((order, resource, shared))
    if not ahead:
        return None, set()
    _first, resource, shared = min(ahead, key=lambda entry: entry[0])
    return resource, shared


def _live_owner(pvc):
    """Who a live PVC belongs to: ('uid', uid) of the cache resource its owner reference names; ('cache', namespace,
    name) for a collection object of a cache without a resource (labels only, no kind label); None for anyone
    else's, labelled or not."""
    metadata = pvc["metadata"]
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("apiVersion") == API_VERSION and ref.get("kind") in CACHE_KINDS and ref.get("uid"):
            return "uid", ref["uid"]
    labels = metadata.get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != MANAGER or not labels.get(CACHE_LABEL) or labels.get(CACHE_KIND_LABEL):
        return None
    return "cache", labels.get(CACHE_NAMESPACE_LABEL) or "", labels[CACHE_LABEL]


def _is_own(spec, owner):
    if spec.owner is not None:
        return bool(spec.owner.get("uid")) and owner == ("uid", spec.owner["uid"])
    return owner == ("cache", spec.cache_namespace or "", spec.name)


def _holder(spec, rivals, owner):
    """Who holds a live PVC the cache is not the owner of, and what makes it free, for the refusal."""
    if owner is None:
        return "no cache (gkm.cluster did not make it): rename or delete that PVC, or rename the cache"
    if owner[0] == "cache":
        return ("cache %s, distributed without a resource (gkm.cluster.cache_distribute): remove it with "
                "cache_distribute state=absent" % "/".join(filter(None, owner[1:])))
    for resource in rivals:
        metadata = resource.get("metadata") or {}
        if metadata.get("uid") == owner[1]:
            rival = describe(resource["kind"], metadata.get("namespace") if resource["kind"] == "GKMCache" else None,
                             metadata["name"])
            return "%s, which %s outranks (that one is refused): delete %s to free it" % (
                rival, _self_name(spec), rival)
    return ("a cache resource that is gone (uid %s), whose objects the garbage collector removes (deploy.yml and "
            "reconfigure.yml remove the objects of deleted resources)" % owner[1])


def refuse_conflicts(spec, rivals, named_claims):
    """{namespace: why} of the namespaces where a cluster cache is refused (empty when none); raise
    CacheConflictError when the cache is refused whole: a rival resource came first, or someone else's PVC bears
    its name in its only namespace or in every one.

    rivals: GKMCache and ClusterGKMCache resources named as the cache (the only ones whose PVC names can meet);
    named_claims: live PVCs named as the cache, in any namespace.
    """
    wanted = spec_claims(spec)
    if not wanted:
        return {}
    resource, shared = _earlier_rival(spec, rivals, wanted)
    if resource is not None:
        metadata = resource["metadata"]
        raise CacheConflictError(
            "PVC %s is wanted by %s and by %s, which %s: %s" % (
                ", ".join("%s/%s" % claim for claim in sorted(shared)), _self_name(spec),
                describe(resource["kind"], metadata.get("namespace") if resource["kind"] == "GKMCache" else None,
                         metadata["name"]),
                "comes first (a ClusterGKMCache outranks the other caches of its name in its namespaces)"
                if resource["kind"] == CLUSTER_CACHE_KIND
                else "was created first (%s)" % (metadata.get("creationTimestamp") or "earlier"), _fix(spec)))
    refused = {}
    for pvc in sorted(named_claims, key=lambda pvc: pvc["metadata"]["namespace"]):
        metadata = pvc["metadata"]
        if (metadata.get("namespace"), metadata["name"]) not in wanted:
            continue
        owner = _live_owner(pvc)
        if _is_own(spec, owner):
            continue
        holder = _holder(spec, rivals, owner)
        refused[metadata["namespace"]] = "PVC %s/%s, which %s names after itself, belongs to %s; %s is refused " \
            "%suntil then" % (metadata["namespace"], metadata["name"], _self_name(spec), holder, _self_name(spec),
                              "" if spec.cache_namespace else "in namespace %s " % metadata["namespace"])
    if refused and (spec.cache_namespace or set(refused) >= set(spec.namespaces)):
        raise CacheConflictError("; ".join(refused[namespace] for namespace in sorted(refused)))
    return refused
