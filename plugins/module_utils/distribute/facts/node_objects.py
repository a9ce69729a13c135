# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-node objects (GKMCacheNode / ClusterGKMCacheNode) as read (I/O): one paged, label-selected LIST of a cache
kind's (and namespace's) objects, and every cache's entries grouped for reports."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import managed_selector, node_object_path
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import NODE_KINDS


class NodeObjectsError(KubeError):
    """Per-node objects could not be written; the message names the first node and the server's reason."""


def list_node_objects(kube, cache_kind, namespace):
    """The live per-node objects of a cache kind (and namespace) written by the collection."""
    return kube.list_pages(node_object_path(cache_kind, namespace), label_selector=managed_selector())


def node_objects_by_cache(kube, name=None, namespace=None):
    """{(cache, cache namespace or ''): [per-node objects listing it]}: one cache's (name, and namespace for a
    GKMCache) or every cache's, for reports (cache_info)."""
    kinds = [("GKMCache" if namespace else "ClusterGKMCache", namespace)] if name else [
        ("GKMCache", None), ("ClusterGKMCache", None)]
    listings = kube.map_all(lambda kind: list_node_objects(kube, *kind), kinds, "reading the per-node objects",
                            NodeObjectsError)
    by_cache = {}
    for (kind, _namespace), objects in zip(kinds, listings):
        for obj in objects:
            cache_namespace = obj["metadata"].get("namespace") or "" if NODE_KINDS[kind][2] else ""
            for cache in (obj.get("status") or {}).get("caches") or {}:
                if name is None or cache == name:
                    by_cache.setdefault((cache, cache_namespace), []).append(obj)
    return by_cache
