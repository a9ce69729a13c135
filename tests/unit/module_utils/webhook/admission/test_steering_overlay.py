"""The kernel overlay through steering: the view reads the variable the reconcile recorded (status.kernelOverlay),
and a pod given a Triton cache by annotation gets the emptyDir, the init container and the variable."""

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import WatchedCluster
from tests.helpers.steering import cache, serving_pvc, view


def test_the_view_carries_the_overlay_variable_the_status_records_and_drops_it_with_the_field():
    steering_view = view([cache("vector-add", overlay="TRITON_CACHE_DIR"), cache("plain")])
    assert steering_view.resolve("apps", "vector-add").overlay_variable == "TRITON_CACHE_DIR"
    assert steering_view.resolve("apps", "plain").overlay_variable is None
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    assert steering_view.resolve("apps", "vector-add").overlay_variable is None


def test_the_server_s_tools_image_reaches_the_steering_view():
    assert WatchedCluster("PVC", "reg/tools:1").steering.tools_image == "reg/tools:1"
    assert WatchedCluster().steering.tools_image is None
