"""The kernel overlay a pod annotated gkm.io/cache gets (admission/kernel_overlay.py, the variable from
kernels/plan.py), applied after the cache's own mount operations as the webhook's one patch would be: these call the
pure parts directly (steer() wires them; test_steering_overlay.py)."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.kernels import overlay_main, plan, usage_main
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.cache_mount import (
    MountError,
    mount_operations,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.cache_use import cache_uses
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.kernel_overlay import (
    OVERLAY_PATH,
    overlay_name,
    overlay_operations,
)
from tests.helpers.steering import apply_patch, cache, pod_spec, serving_pvc, view

TOOLS = "registry.local:5000/gkm/tools:0.9.0"
ANNOTATIONS = {"gkm.io/cache": "vector-add", "gkm.io/cache-mount-path": "/kernels"}
TRITON_LABELS = {"cache.triton.image/summary": '{"targets": []}', "cache.triton.image/entry-count": "6"}
OVERLAY_MOUNT = {"name": "gkm-kernels-vector-add", "mountPath": OVERLAY_PATH}
CACHE_MOUNT = {"name": "gkm-cache-vector-add", "mountPath": "/kernels", "readOnly": True}
TRITON_ENV = {"name": "TRITON_CACHE_DIR", "value": OVERLAY_PATH}


def _given(spec, annotations=None, mode="imageVolume", variable="TRITON_CACHE_DIR"):
    """The pod after the cache's mount and the overlay, and the overlay's own operations."""
    annotations = ANNOTATIONS if annotations is None else annotations
    if mode == "imageVolume":
        steering_view = view([cache("vector-add", mountMode="imageVolume")])
    else:
        steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    (use,) = cache_uses({"annotations": annotations}, spec, "apps", steering_view)
    operations = mount_operations(spec, use)
    overlay = overlay_operations(spec, use, variable, TOOLS)
    return apply_patch({"spec": spec}, operations + overlay)["spec"], overlay


@pytest.mark.parametrize("mode", ["imageVolume", "PVC"])
def test_each_container_given_the_cache_gets_the_overlay_as_triton_cache_dir_and_an_init_container_writes_it(mode):
    pod, _operations = _given(pod_spec(containers=("main", "sidecar")), mode=mode)
    assert [v["name"] for v in pod["volumes"]] == ["gkm-cache-vector-add", "gkm-kernels-vector-add"]
    assert pod["volumes"][1] == {"name": "gkm-kernels-vector-add", "emptyDir": {}}
    for container in pod["containers"]:
        assert container["volumeMounts"] == [CACHE_MOUNT, OVERLAY_MOUNT]
        assert container["env"] == [TRITON_ENV]
    init, use = pod["initContainers"]
    assert init["name"] == "gkm-kernels-vector-add" and init["image"] == TOOLS
    # The kernel-use sidecar after it: it starts once the overlay is written, reads it read-only, runs as restricted.
    assert (use["name"], use["image"], use["restartPolicy"]) == ("gkm-kernel-use-vector-add", TOOLS, "Always")
    assert use["volumeMounts"] == [dict(OVERLAY_MOUNT, readOnly=True)]
    assert use["command"] == ["python3", "-m", usage_main.__name__, OVERLAY_PATH]
    assert use["securityContext"] == init["securityContext"]
    # The cache at the path the workload sees it at: the group files the init container writes name that path.
    assert init["volumeMounts"] == [CACHE_MOUNT, OVERLAY_MOUNT]
    # Pod Security restricted, whatever the pod's own securityContext.
    assert init["securityContext"] == {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                       "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    python, flag, module, *arguments = init["command"]
    assert (python, flag, module) == ("python3", "-m", overlay_main.__name__)
    parsed = overlay_main.build_parser().parse_args(arguments)
    assert (parsed.cache, parsed.into, parsed.termination_log) == ("/kernels", OVERLAY_PATH, "/dev/termination-log")


def test_the_pods_own_init_containers_and_variables_come_first_and_the_containers_annotation_chooses():
    spec = pod_spec(containers=("main", "sidecar"))
    spec["initContainers"] = [{"name": "setup", "image": "app:1"}]
    spec["containers"][0]["env"] = [{"name": "MODEL", "value": "llama"}]
    pod, _operations = _given(spec, dict(ANNOTATIONS, **{"gkm.io/cache-containers": "main"}))
    assert [c["name"] for c in pod["initContainers"]] == [
        "setup", "gkm-kernels-vector-add", "gkm-kernel-use-vector-add"]
    assert pod["containers"][0]["env"] == [{"name": "MODEL", "value": "llama"}, TRITON_ENV]
    assert "env" not in pod["containers"][1] and "volumeMounts" not in pod["containers"][1]


def test_a_variable_set_to_the_plain_mount_is_replaced_and_one_set_elsewhere_is_the_users_choice():
    spec = pod_spec(containers=("main", "sidecar"))
    spec["containers"][0]["env"] = [{"name": "TRITON_CACHE_DIR", "value": "/kernels/io.triton.cache"}]
    spec["containers"][1]["env"] = [{"name": "TRITON_CACHE_DIR", "value": "/scratch/triton"}]
    pod, _operations = _given(spec)
    assert pod["containers"][0]["env"] == [TRITON_ENV]
    assert OVERLAY_MOUNT in pod["containers"][0]["volumeMounts"]
    assert pod["containers"][1]["env"] == [{"name": "TRITON_CACHE_DIR", "value": "/scratch/triton"}]
    assert pod["containers"][1]["volumeMounts"] == [CACHE_MOUNT]

    alone = pod_spec()
    alone["containers"][0]["env"] = [{"name": "TRITON_CACHE_DIR", "value": "/scratch/triton"}]
    pod, operations = _given(alone)
    assert operations == [] and "initContainers" not in pod and len(pod["volumes"]) == 1


def test_a_container_that_mounts_the_cache_itself_elsewhere_is_left_as_written():
    spec = pod_spec(containers=("main", "sidecar"))
    spec["containers"][1]["volumeMounts"] = [{"name": "gkm-cache-vector-add", "mountPath": "/other", "readOnly": True}]
    pod, _operations = _given(spec)
    assert pod["containers"][0]["env"] == [TRITON_ENV]
    assert "env" not in pod["containers"][1]
    assert pod["containers"][1]["volumeMounts"] == [{"name": "gkm-cache-vector-add", "mountPath": "/other",
                                                     "readOnly": True}]


def test_the_variable_the_image_names_is_the_one_set():
    labels = dict(TRITON_LABELS, **{"io.kserve.km/cache-root-env": "MY_TRITON_CACHE=/tmp/triton"})
    variable, why = plan.overlay_plan(labels)
    assert (variable, why) == ("MY_TRITON_CACHE", None)
    pod, _operations = _given(pod_spec(), variable=variable)
    assert pod["containers"][0]["env"] == [{"name": "MY_TRITON_CACHE", "value": OVERLAY_PATH}]


@pytest.mark.parametrize(("labels", "expected"), [
    (TRITON_LABELS, ("TRITON_CACHE_DIR", None)),
    (dict(TRITON_LABELS, **{"io.kserve.km/cache-root-env": "not a name=/x"}), ("TRITON_CACHE_DIR", None)),
    (dict(TRITON_LABELS, **{"io.kserve.km/cache-root-env": "novalue"}), ("TRITON_CACHE_DIR", None)),
    ({"cache.vllm.image/summary": "{}", "io.kserve.km/cache-root-env": "VLLM_CACHE_ROOT=/tmp/vllm"},
     (None, plan.VLLM_LAYOUT)),
    ({"org.opencontainers.image.title": "app"}, (None, plan.NOT_A_CACHE)),
    (None, (None, plan.NOT_A_CACHE)),
])
def test_the_plan_from_an_images_labels(labels, expected):
    assert plan.overlay_plan(labels) == expected


def test_a_pod_that_has_the_overlay_gets_nothing_more():
    pod, _operations = _given(pod_spec())
    again, operations = _given(pod)
    assert operations == [] and again == pod


def test_a_mount_where_the_overlay_goes_is_refused_with_the_fix_and_one_above_it_is_not():
    spec = pod_spec()
    spec["volumes"] = [{"name": "run", "emptyDir": {}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "run", "mountPath": OVERLAY_PATH + "/"}]
    steering_view = view([cache("vector-add", mountMode="imageVolume")])
    (use,) = cache_uses({"annotations": ANNOTATIONS}, spec, "apps", steering_view)
    with pytest.raises(MountError, match="mount it elsewhere"):
        overlay_operations(spec, use, "TRITON_CACHE_DIR", TOOLS)
    spec["containers"][0]["volumeMounts"] = [{"name": "run", "mountPath": "/var/run/gkm"}]
    assert overlay_operations(spec, use, "TRITON_CACHE_DIR", TOOLS)


def test_names_stay_within_kubernetes_limits():
    name = overlay_name("c" * 80)
    assert len(name) == 63 and name.startswith("gkm-kernels-")
