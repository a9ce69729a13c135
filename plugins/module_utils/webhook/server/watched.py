# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server's one view of its watch streams, pure: every event applied once, each cache resource read once
(contract.read_cache, with the installation's default mount mode), then indexed for both decisions - the claim
rewrite (`claims`, view.CacheView) and steering (`steering`, steering_view.SteeringView).

The `kept_*` functions cut each object down to the fields those views read, before anything holds it: server/sync.py
passes every listed and watched object through them, so what tenants write elsewhere in their objects (a cache's
podTemplate may be as large as the API server accepts) is dropped with the page it came in."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import SPEC_FIELDS, read_cache
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    DIGEST_LABEL,
    EXTRACTED_DIGEST_ANNOTATION,
    KERNEL_OVERLAY_STATUS,
    KERNEL_USE_STATUS,
    MANAGED_BY_LABEL,
    NODE_LABEL,
    PVC,
    SERVING_LABEL,
    SIGNATURE_FORMAT_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.steering_view import SteeringView
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.view import CacheView

# What the views read of each kind (view.py, steering_view.py, contract/marks.py, contract/cache_resource.py).
_PVC_LABELS = (MANAGED_BY_LABEL, CACHE_LABEL, CACHE_NAMESPACE_LABEL, NODE_LABEL, DIGEST_LABEL, SERVING_LABEL)
_PVC_ANNOTATIONS = (EXTRACTED_DIGEST_ANNOTATION,)
_PVC_METADATA = ("name", "namespace", "creationTimestamp", "deletionTimestamp")
_CACHE_LABELS = (SIGNATURE_FORMAT_LABEL,)
_CACHE_SPEC = tuple(dict(SPEC_FIELDS)[option]
                    for option in ("image", "access_modes", "mount_mode", "workload_namespaces"))
_CACHE_STATUS = ("resolvedDigest", "targets", KERNEL_OVERLAY_STATUS)


def _mapping(value):
    return value if isinstance(value, dict) else {}


def _picked(mapping, keys):
    mapping = _mapping(mapping)
    return {key: mapping[key] for key in keys if key in mapping}


def _metadata(obj, fields=("name", "namespace"), labels=None, annotations=None):
    metadata = _mapping(obj.get("metadata"))
    kept = _picked(metadata, fields)
    every_label = _mapping(metadata.get("labels"))
    kept["labels"] = dict(every_label) if labels is None else _picked(every_label, labels)
    if annotations:
        kept["annotations"] = _picked(metadata.get("annotations"), annotations)
    return kept


def kept_pvc(obj):
    return {"metadata": _metadata(obj, _PVC_METADATA, _PVC_LABELS, _PVC_ANNOTATIONS)}


def kept_cache(obj):
    status = _picked(obj.get("status"), _CACHE_STATUS)
    kernel_use = _mapping(_mapping(obj.get("status")).get(KERNEL_USE_STATUS))
    if "nodes" in kernel_use:
        # /metrics exports the per-node rows; the pods listed beside them are not read here.
        status[KERNEL_USE_STATUS] = {"nodes": kernel_use["nodes"]}
    return {"metadata": _metadata(obj, labels=_CACHE_LABELS),
            "spec": _picked(obj.get("spec"), _CACHE_SPEC), "status": status}


def kept_node_object(obj):
    """A GKMCacheNode / ClusterGKMCacheNode: the per-cache entries of its status (written by the reconcile only)."""
    return {"metadata": _metadata(obj, labels=()), "status": _picked(obj.get("status"), ("caches",))}


def kept_node(obj):
    """A Node: its name and every label (readiness, GPUs, hostname); its status (images, conditions) goes."""
    return {"metadata": _metadata(obj, ("name",))}


def object_key(obj):
    metadata = obj.get("metadata") or {}
    return metadata.get("namespace") or "", metadata.get("name") or ""


class WatchedCluster:
    """default_mount_mode: the mount mode of a cache without spec.mountMode, the reconcile's own default.
    tools_image: the image the server runs, which runs the kernel overlay in pods (None: no overlay)."""

    def __init__(self, default_mount_mode=PVC, tools_image=None):
        self.default_mount_mode = default_mount_mode
        self.claims = CacheView()
        self.steering = SteeringView(tools_image)
        # {(kind, (cache namespace or '', cache)): status.kernelUse's per-node rows}, which /metrics exports.
        self.kernel_use = {}

    def apply_cache_event(self, kind, event_type, obj):
        cache = None if event_type == "DELETED" else read_cache(obj, self.default_mount_mode, kind)
        for index in (self.claims, self.steering):
            index.set_cache(kind, object_key(obj), cache)
        if cache is not None and cache.kernel_use:
            self.kernel_use[(kind, object_key(obj))] = cache.kernel_use
        else:
            self.kernel_use.pop((kind, object_key(obj)), None)

    def replace_caches(self, kind, items):
        caches = {object_key(obj): read_cache(obj, self.default_mount_mode, kind) for obj in items}
        for index in (self.claims, self.steering):
            index.set_caches(kind, caches)
        # Changed in place: the app's /metrics holds this dict.
        for key in [key for key in self.kernel_use if key[0] == kind]:
            del self.kernel_use[key]
        self.kernel_use.update({(kind, key): cache.kernel_use for key, cache in caches.items() if cache.kernel_use})

    def apply_pvc_event(self, event_type, obj):
        for index in (self.claims, self.steering):
            index.apply_pvc_event(event_type, obj)

    def replace_pvcs(self, items):
        for index in (self.claims, self.steering):
            index.replace_pvcs(items)

    def apply_node_object_event(self, kind, event_type, obj):
        self.claims.apply_node_object_event(kind, event_type, obj)

    def replace_node_objects(self, kind, items):
        self.claims.replace_node_objects(kind, items)

    def apply_node_event(self, event_type, obj):
        self.steering.apply_node_event(event_type, obj)

    def replace_nodes(self, items):
        self.steering.replace_nodes(items)
