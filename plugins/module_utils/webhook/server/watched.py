# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The server's one view of its watch streams, pure: every event applied once, each cache resource read once
(contract.read_cache, with the installation's default mount mode), then indexed for both decisions - the claim
rewrite (`claims`, view.CacheView) and steering (`steering`, steering_view.SteeringView)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import read_cache
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import PVC
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.steering_view import SteeringView
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.view import CacheView


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

    def apply_cache_event(self, kind, event_type, obj):
        cache = None if event_type == "DELETED" else read_cache(obj, self.default_mount_mode, kind)
        for index in (self.claims, self.steering):
            index.set_cache(kind, object_key(obj), cache)

    def replace_caches(self, kind, items):
        caches = {object_key(obj): read_cache(obj, self.default_mount_mode, kind) for obj in items}
        for index in (self.claims, self.steering):
            index.set_caches(kind, caches)

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
