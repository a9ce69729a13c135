# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Caches that are over, pure: objects whose cache resource is gone, and resources the inventory no longer
declares. The caches role removes both at every run that reconciles caches (deploy.yml, reconfigure.yml).

An object names its resource through its labels (ownership.py: cache kind, cache namespace, cache name), so
objects of caches distributed without a resource (cache_distribute) are never taken for orphans. Labels are not
ownership, since anyone who may create an object may label it: an object counts as the collection's only when it
is a PV (cluster-scoped, which no tenant creates; they never get an owner reference, ownership.py), is in the system
namespace (no tenant writes there) carrying the uid of the resource it was made for (a GKMCache's Jobs, their
Secret and access PVCs, which no owner reference can reach across namespaces), or references the resource its
labels name (a GKMCache's in that GKMCache's namespace), and the names are resource names.
Anything else labelled so is foreign: reported, never a removal's target. A resource is
the inventory's through DECLARED_LABEL, which the role sets on what it applies from `caches_declared`; one
created with kubectl lacks it and is never removed for being undeclared.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import name_problem
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    DECLARED_LABEL,
    GROUP,
    OWNER_UID_ANNOTATION,
    SYSTEM_NAMESPACE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.ownership import owner_key

DECLARED_BY = "inventory"
CACHE_KINDS = ("GKMCache", "ClusterGKMCache")


def resource_key(resource):
    """(kind, namespace or '', name) of a GKMCache or ClusterGKMCache dict."""
    metadata = resource.get("metadata") or {}
    kind = resource.get("kind")
    return kind, (metadata.get("namespace") or "") if kind == "GKMCache" else "", metadata.get("name")


def _target(key):
    return {"kind": key[0], "namespace": key[1], "name": key[2]}


def _labelled(obj):
    """The (kind, namespace or '', name) of the cache resource an object's labels name, or None."""
    key = owner_key((obj.get("metadata") or {}).get("labels"))
    return key if key and key[0] in CACHE_KINDS else None


def _foreign(obj, key, system_namespace):
    """Why an object labelled with the cache resource `key` is not the collection's, or None when it is."""
    problem = name_problem(CACHE_LABEL, key[2]) or (key[1] and name_problem(CACHE_NAMESPACE_LABEL, key[1]))
    if problem:
        return problem
    if obj.get("kind") == "PersistentVolume":
        return None
    metadata = obj.get("metadata") or {}
    if metadata.get("namespace") == system_namespace and (metadata.get("annotations") or {}).get(OWNER_UID_ANNOTATION):
        return None
    if key[0] == "GKMCache" and metadata.get("namespace") != key[1]:
        return "outside the namespace of the GKMCache its labels name"
    if not any(str(ref.get("apiVersion", "")).startswith(GROUP + "/") and (ref.get("kind"), ref.get("name")) ==
               (key[0], key[2]) for ref in metadata.get("ownerReferences") or ()):
        return "no owner reference to the %s its labels name" % key[0]
    return None


def orphaned_caches(objects, resources, system_namespace=SYSTEM_NAMESPACE):
    """One target per cache whose objects are labelled with a resource that does not exist, in key order; foreign
    objects (foreign_objects) name none.

    objects: live objects of any kind (PVCs, PVs, Jobs, Secrets); resources: every cache resource found;
    system_namespace: the collection's own, where the extraction Jobs run.
    """
    existing = {resource_key(resource) for resource in resources}
    orphans = set()
    for obj in objects:
        key = _labelled(obj)
        if key and key not in existing and not _foreign(obj, key, system_namespace):
            orphans.add(key)
    return [_target(key) for key in sorted(orphans)]


def foreign_objects(objects, system_namespace=SYSTEM_NAMESPACE):
    """One line per object labelled with a cache resource that the collection did not make, and why, in order."""
    lines = []
    for obj in objects:
        key = _labelled(obj)
        reason = key and _foreign(obj, key, system_namespace)
        if reason:
            metadata = obj.get("metadata") or {}
            where = "%s/%s" % (metadata["namespace"], metadata.get("name")) if metadata.get("namespace") \
                else metadata.get("name")
            lines.append("%s %s, labelled as %s %s: %s; left alone" % (
                obj.get("kind") or "object", where, key[0], "/".join(part for part in key[1:] if part), reason))
    return sorted(lines)


def is_declared(resource):
    return ((resource.get("metadata") or {}).get("labels") or {}).get(DECLARED_LABEL) == DECLARED_BY


def undeclared_caches(resources, declared):
    """One target per resource the inventory applied (DECLARED_LABEL) and `declared` no longer lists."""
    wanted = {resource_key(resource) for resource in declared}
    gone = {resource_key(resource) for resource in resources if is_declared(resource)} - wanted
    return [_target(key) for key in sorted(gone)]
