# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which cache resource an object belongs to, pure: the kind label every object of a resource-backed cache
carries, and the owner references that let the garbage collector remove what it can.

The garbage collector deletes a dependent once no owner with the referenced uid exists, within these rules:
a namespaced owner (GKMCache) can own objects of its own namespace only, and a cluster-scoped object cannot
have a namespaced owner; a cluster-scoped owner (ClusterGKMCache) can own both. Slot PVs never get an owner
reference, not even from a ClusterGKMCache: the collector would delete them at once, before the scrub Job
removed their directories from the nodes' disks (distribute/scrub_runner.py). They keep the kind label, so
the next run that reconciles caches finds them without a resource, scrubs and deletes them (lifecycle.py).
"""

from __future__ import absolute_import, division, print_function

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    API_VERSION,
    CACHE_KIND_LABEL,
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    OWNER_UID_ANNOTATION,
)

__metaclass__ = type


# The kind of the cache resource an object was distributed for; absent on the objects of a cache distributed
# without a resource (gkm.cluster.cache_distribute), which only their own module removes.
# Cluster-scoped objects the planner writes; none of them takes a reference (see above).
CLUSTER_SCOPED = ("PersistentVolume", "Namespace")


def resource_owner(resource):
    """The owner a cache resource (GKMCache or ClusterGKMCache dict) gives its objects.

    uid and creationTimestamp are None for a declared manifest not applied yet (check mode): its objects are
    labelled but get no reference.
    """
    metadata = resource.get("metadata") or {}
    return {"kind": resource["kind"], "name": metadata["name"],
            "namespace": metadata.get("namespace") if resource["kind"] == "GKMCache" else None,
            "uid": metadata.get("uid"), "creationTimestamp": metadata.get("creationTimestamp")}


def may_reference(owner, obj):
    """Whether the garbage collector may own `obj` through `owner` and the scrub lets it (module docstring)."""
    kind, namespace = obj["kind"], obj["metadata"].get("namespace")
    if not owner.get("uid") or kind in CLUSTER_SCOPED:
        return False
    return owner["namespace"] is None or owner["namespace"] == namespace


def owner_reference(owner):
    return {"apiVersion": API_VERSION, "kind": owner["kind"], "name": owner["name"], "uid": owner["uid"]}


def mark(obj, owner):
    """Label `obj` with its owner's kind and, where allowed, reference the owner; returns obj (changed in place).

    owner None (cache_distribute) leaves the object as rendered.
    """
    if owner is None or obj is None or obj["kind"] == "Namespace":
        return obj
    obj["metadata"].setdefault("labels", {})[CACHE_KIND_LABEL] = owner["kind"]
    if may_reference(owner, obj):
        obj["metadata"]["ownerReferences"] = [owner_reference(owner)]
    elif owner.get("uid") and obj["kind"] not in CLUSTER_SCOPED:
        # A GKMCache's object in the system namespace: the labels name the resource, the uid tells a resource
        # created again under its name from the one the object was made for (lifecycle.py).
        obj["metadata"].setdefault("annotations", {})[OWNER_UID_ANNOTATION] = owner["uid"]
    return obj


def references_outdated(live, desired):
    """True when `desired` references an owner uid the live object does not (new object, resource recreated)."""
    have = {ref.get("uid") for ref in live["metadata"].get("ownerReferences") or []}
    return any(ref["uid"] not in have for ref in desired["metadata"].get("ownerReferences") or [])


def owner_key(labels):
    """(kind, namespace or '', name) of the cache resource an object's labels name, or None without a kind label."""
    labels = labels or {}
    kind = labels.get(CACHE_KIND_LABEL)
    if not kind or not labels.get(CACHE_LABEL):
        return None
    return kind, labels.get(CACHE_NAMESPACE_LABEL) or "", labels[CACHE_LABEL]
