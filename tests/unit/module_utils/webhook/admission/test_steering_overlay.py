"""The kernel overlay through steering: the view reads the variable the reconcile recorded (status.kernelOverlay)
and the server's tools image, and a pod given a Triton cache by annotation gets the emptyDir, the init container and
the variable; declined by annotation, without a plan or a tools image, or for a claim, it gets the plain mount."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    OVERLAY_ANNOTATION,
    OVERLAY_DISABLED,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.kernel_overlay import (
    ENTRY_POINT,
    OVERLAY_PATH,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.steering import steer
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import WatchedCluster
from tests.helpers.steering import apply_patch, cache, pod_request, pod_spec, serving_pvc, view, workload_request

TOOLS = "registry.local:5000/gkm/tools:1"
ANNOTATIONS = {"gkm.io/cache": "vector-add", "gkm.io/cache-mount-path": "/kernels"}


def triton_view(overlay="TRITON_CACHE_DIR", tools_image=TOOLS):
    return view([cache("vector-add", overlay=overlay)], pvcs=[serving_pvc("vector-add")], tools_image=tools_image)


def admitted(steering_view, request):
    result = steer(request, steering_view)
    assert result.denial is None, result.denial
    return apply_patch(request["object"], result.operations)["spec"]


def test_the_view_carries_the_overlay_variable_the_status_records():
    steering_view = view([cache("vector-add", overlay="TRITON_CACHE_DIR"), cache("plain")])
    assert steering_view.resolve("apps", "vector-add").overlay_variable == "TRITON_CACHE_DIR"
    assert steering_view.resolve("apps", "plain").overlay_variable is None


def test_the_server_s_tools_image_reaches_the_steering_view():
    assert WatchedCluster("PVC", TOOLS).steering.tools_image == TOOLS
    assert WatchedCluster().steering.tools_image is None


def test_a_pod_given_a_triton_cache_by_annotation_gets_the_overlay_beside_the_mount():
    steering_view = triton_view()
    spec = admitted(steering_view, pod_request(pod_spec(containers=("main", "sidecar")), annotations=ANNOTATIONS))
    assert [v["name"] for v in spec["volumes"]] == ["gkm-cache-vector-add", "gkm-kernels-vector-add"]
    assert spec["volumes"][1] == {"name": "gkm-kernels-vector-add", "emptyDir": {}}
    [init] = spec["initContainers"]
    assert (init["name"], init["image"]) == ("gkm-kernels-vector-add", TOOLS)
    assert init["command"][:4] == ["python3", "-m", ENTRY_POINT, "/kernels"] and init["command"][4] == OVERLAY_PATH
    assert {"name": "gkm-cache-vector-add", "mountPath": "/kernels", "readOnly": True} in init["volumeMounts"]
    for container in spec["containers"]:
        assert container["env"] == [{"name": "TRITON_CACHE_DIR", "value": OVERLAY_PATH}]
        assert [m["mountPath"] for m in container["volumeMounts"]] == ["/kernels", OVERLAY_PATH]
    # Admitted again (a re-invocation), the pod gets nothing more.
    assert steer(pod_request(spec, annotations=ANNOTATIONS), steering_view).operations == []


def test_the_variable_the_image_names_is_the_one_set():
    spec = admitted(triton_view("MY_KERNELS"), pod_request(pod_spec(), annotations=ANNOTATIONS))
    assert spec["containers"][0]["env"] == [{"name": "MY_KERNELS", "value": OVERLAY_PATH}]


@pytest.mark.parametrize("steering_view, annotations", [
    (triton_view(), dict(ANNOTATIONS, **{OVERLAY_ANNOTATION: OVERLAY_DISABLED})),
    (triton_view(overlay=None), ANNOTATIONS),
    (triton_view(tools_image=None), ANNOTATIONS),
], ids=["declined", "no plan (vLLM or plain image)", "server without its tools image"])
def test_the_plain_mount_only(steering_view, annotations):
    spec = admitted(steering_view, pod_request(pod_spec(), annotations=annotations))
    assert [v["name"] for v in spec["volumes"]] == ["gkm-cache-vector-add"]
    assert "initContainers" not in spec and "env" not in spec["containers"][0]


def test_a_pod_naming_the_cache_by_claim_mounts_it_itself_and_gets_no_overlay():
    spec = admitted(triton_view(), pod_request(pod_spec("vector-add")))
    assert "initContainers" not in spec and [v["name"] for v in spec["volumes"]] == ["kernels"]


def test_a_pod_whose_overlay_directory_is_taken_is_denied_naming_it_and_so_is_such_a_template():
    spec = pod_spec()
    spec["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": OVERLAY_PATH}]
    spec["volumes"] = [{"name": "mine", "emptyDir": {}}]
    denial = steer(pod_request(spec, annotations=ANNOTATIONS), triton_view()).denial
    assert "mine" in denial and OVERLAY_PATH in denial and "mount it elsewhere" in denial
    template = steer(workload_request("Deployment", spec, annotations=ANNOTATIONS), triton_view())
    assert template.denial is not None and OVERLAY_PATH in template.denial


def test_a_workload_template_is_only_checked_its_pods_get_the_overlay_when_created():
    result = steer(workload_request("Deployment", pod_spec(), annotations=ANNOTATIONS), triton_view())
    assert (result.operations, result.denial) == ([], None)
