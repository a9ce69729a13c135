"""The kernel overlay through steering: the view reads the variable the reconcile recorded (status.kernelOverlay),
and a pod given a Triton cache by annotation gets the emptyDir, the init container and the variable."""

from tests.helpers.steering import cache, serving_pvc, view


def test_the_view_carries_the_overlay_variable_the_status_records_and_drops_it_with_the_field():
    steering_view = view([cache("vector-add", overlay="TRITON_CACHE_DIR"), cache("plain")])
    assert steering_view.resolve("apps", "vector-add").overlay_variable == "TRITON_CACHE_DIR"
    assert steering_view.resolve("apps", "plain").overlay_variable is None
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    assert steering_view.resolve("apps", "vector-add").overlay_variable is None
