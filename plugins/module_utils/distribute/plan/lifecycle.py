# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Caches that are over, pure: objects whose cache resource is gone, and resources the inventory no longer
declares. The caches role removes both at every run that reconciles caches (deploy.yml, reconfigure.yml).

An object belongs to a resource through its labels (ownership.py: cache kind, cache namespace, cache name), so
objects of caches distributed without a resource (cache_distribute) are never taken for orphans. A resource is
the inventory's through DECLARED_LABEL, which the role sets on what it applies from `caches_declared`; one
created with kubectl lacks it and is never removed for being undeclared.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DECLARED_LABEL,
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


def orphaned_caches(objects, resources):
    """One target per cache whose objects are labelled with a resource that does not exist, in key order.

    objects: live objects of any kind (PVCs, PVs, Jobs, Secrets); resources: every cache resource found.
    """
    existing = {resource_key(resource) for resource in resources}
    orphans = set()
    for obj in objects:
        key = owner_key((obj.get("metadata") or {}).get("labels"))
        if key and key[0] in CACHE_KINDS and key not in existing:
            orphans.add(key)
    return [_target(key) for key in sorted(orphans)]


def is_declared(resource):
    return ((resource.get("metadata") or {}).get("labels") or {}).get(DECLARED_LABEL) == DECLARED_BY


def undeclared_caches(resources, declared):
    """One target per resource the inventory applied (DECLARED_LABEL) and `declared` no longer lists."""
    wanted = {resource_key(resource) for resource in declared}
    gone = {resource_key(resource) for resource in resources if is_declared(resource)} - wanted
    return [_target(key) for key in sorted(gone)]
