"""The kernel overlay through steering: the view reads the variable the reconcile recorded (status.kernelOverlay)
and the server's tools image, and a pod given a Triton cache by annotation gets the emptyDir, the init container and
the variable, and so does a pod naming it by claim for its own mount; declined by annotation, or without a plan or a
tools image, it gets the plain mount."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    OVERLAY_ANNOTATION,
    OVERLAY_DISABLED,
)
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.capture_frame import DEFAULT_MAX_BYTES
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
    init, _use = spec["initContainers"]
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


def claimed(mounts_by_container, volumes=("vector-add",), env=None):
    """A pod naming caches by claim (volume name = claim name); mounts_by_container: {container: [mount fields]}."""
    spec = pod_spec(containers=tuple(mounts_by_container),
                    volumes=[{"name": v, "persistentVolumeClaim": {"claimName": v, "readOnly": True}} for v in volumes])
    for container in spec["containers"]:
        container["volumeMounts"] = [dict(m, readOnly=True) for m in mounts_by_container[container["name"]]]
        if env and container["name"] in env:
            container["env"] = env[container["name"]]
    return spec


def test_a_pod_naming_the_cache_by_claim_gets_the_overlay_for_its_own_mount_path_and_sub_path():
    spec = admitted(triton_view(), pod_request(claimed({
        "main": [{"name": "vector-add", "mountPath": "/models/k", "subPath": "cache"}],
        "sidecar": [{"name": "vector-add", "mountPath": "/models/k", "subPath": "cache"}]})))
    init, _use = spec["initContainers"]
    # The cache where the containers see it: the groups the init container writes name that path.
    assert init["command"][3:5] == ["/models/k", OVERLAY_PATH]
    assert init["volumeMounts"][0] == {"name": "vector-add", "mountPath": "/models/k", "readOnly": True,
                                       "subPath": "cache"}
    for container in spec["containers"]:
        assert container["env"] == [{"name": "TRITON_CACHE_DIR", "value": OVERLAY_PATH}]
        assert [m["mountPath"] for m in container["volumeMounts"]] == ["/models/k", OVERLAY_PATH]
    assert steer(pod_request(spec), triton_view()).operations == []


def test_by_claim_only_the_containers_that_see_the_first_mount_s_path_get_it_and_a_set_variable_is_kept():
    spec = admitted(triton_view(), pod_request(claimed({
        "main": [{"name": "vector-add", "mountPath": "/kernels"}],
        "elsewhere": [{"name": "vector-add", "mountPath": "/other"}],
        "own-variable": [{"name": "vector-add", "mountPath": "/kernels"}],
        "expr": [{"name": "vector-add", "mountPath": "/kernels", "subPathExpr": "$(POD)"}],
        "none": []}, env={"own-variable": [{"name": "TRITON_CACHE_DIR", "value": "/kernels/io.triton.cache"}]})))
    assert [c.get("env") for c in spec["containers"]] == [
        [{"name": "TRITON_CACHE_DIR", "value": OVERLAY_PATH}], None,
        [{"name": "TRITON_CACHE_DIR", "value": "/kernels/io.triton.cache"}], None, None]
    assert [len(c["volumeMounts"]) for c in spec["containers"]] == [2, 1, 1, 1, 0]
    assert spec["initContainers"][0]["command"][3] == "/kernels"


@pytest.mark.parametrize("mounts, env, annotations", [
    ({"main": [{"name": "vector-add", "mountPath": "/kernels"}]},
     {"main": [{"name": "TRITON_CACHE_DIR", "value": "/kernels"}]}, None),
    ({"main": [{"name": "vector-add", "mountPath": "/kernels"}, {"name": "mine", "mountPath": OVERLAY_PATH}]},
     None, None),
    ({"main": [{"name": "vector-add", "mountPath": "/kernels"}]}, None, {OVERLAY_ANNOTATION: OVERLAY_DISABLED}),
    ({"main": []}, None, None),
], ids=["its own variable", "the overlay's directory taken", "declined", "not mounted"])
def test_a_pod_by_claim_that_cannot_take_the_overlay_is_admitted_as_written(mounts, env, annotations):
    spec = claimed(mounts, env=env)
    given = admitted(triton_view(), pod_request(spec, annotations=annotations))
    given.pop("affinity")  # steered as any pod of the cache
    assert given == spec


def two_caches_view():
    return view([cache(name, overlay="TRITON_CACHE_DIR") for name in ("vector-add", "softmax")],
                pvcs=[serving_pvc("vector-add"), serving_pvc("softmax")], tools_image=TOOLS)


# Placement is not what these test (the view's nodes hold only vector-add).
UNSTEERED = {"gkm.io/cache-steering": "disabled"}


def test_two_caches_by_claim_each_get_an_overlay_and_a_container_mounting_both_gets_the_first_s():
    steering_view = two_caches_view()
    spec = admitted(steering_view, pod_request(claimed({
        "both": [{"name": "softmax", "mountPath": "/s"}, {"name": "vector-add", "mountPath": "/v"}],
        "softmax-only": [{"name": "softmax", "mountPath": "/s"}],
        "vector-add-only": [{"name": "vector-add", "mountPath": "/v"}]}, volumes=("vector-add", "softmax")),
        annotations=UNSTEERED))
    # Volume order decides: vector-add's overlay first; the pod had no init containers, the list is made once.
    assert [(i["name"], i["command"][3]) for i in spec["initContainers"] if "restartPolicy" not in i] == [
        ("gkm-kernels-vector-add", "/v"), ("gkm-kernels-softmax", "/s")]
    assert [[m["name"] for m in c["volumeMounts"] if m["mountPath"] == OVERLAY_PATH] for c in spec["containers"]] == [
        ["gkm-kernels-vector-add"], ["gkm-kernels-softmax"], ["gkm-kernels-vector-add"]]
    assert all(len(c["env"]) == 1 for c in spec["containers"])


def test_an_annotated_cache_skips_a_container_a_claimed_cache_overlaid_instead_of_refusing_it():
    steering_view = two_caches_view()
    request = pod_request(claimed({"main": [{"name": "softmax", "mountPath": "/s"}]}, volumes=("softmax",)),
                          annotations=dict(ANNOTATIONS, **UNSTEERED))
    spec = admitted(steering_view, request)
    [main] = spec["containers"]
    assert [i["name"] for i in spec.get("initContainers", [])] == ["gkm-kernels-softmax", "gkm-kernel-use-softmax"]
    assert [m["mountPath"] for m in main["volumeMounts"]] == ["/s", OVERLAY_PATH, "/kernels"]


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


@pytest.mark.parametrize("capture, framed", [("vector-add", True), ("other-cache", False), (None, False)],
                         ids=["opted in", "another cache", "not opted in"])
def test_a_pod_opted_in_to_capture_into_the_cache_gets_a_sidecar_that_frames_its_kernels(capture, framed):
    annotations = dict(ANNOTATIONS, **({"gkm.io/capture": capture} if capture else {}))
    spec = admitted(triton_view(), pod_request(pod_spec(), annotations=annotations))
    _init, use = spec["initContainers"]
    assert use["command"][3] == OVERLAY_PATH
    assert use["command"][4:] == (["--capture-max-bytes", str(DEFAULT_MAX_BYTES)] if framed else [])
