"""Pods annotated gkm.io/cache (admission/cache_mount.py through admission/steering.py): the image volume of an
imageVolume cache, the serving PVC of a PVC cache, the mounts, and the annotation's mistakes, without a cluster."""

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.steering import steer
from tests.helpers.steering import (
    DIGEST_A,
    apply_patch,
    cache,
    pod_request,
    pod_spec,
    required_terms,
    serving_pvc,
    view,
    workload_request,
)

ANNOTATIONS = {"gkm.io/cache": "vector-add", "gkm.io/cache-mount-path": "/kernels"}
IMAGE_VOLUME = {"name": "gkm-cache-vector-add", "image": {
    "reference": "registry.local:5000/caches/vector-add@" + DIGEST_A, "pullPolicy": "IfNotPresent"}}
MOUNT = {"name": "gkm-cache-vector-add", "mountPath": "/kernels", "readOnly": True}


def image_volume_view(**fields):
    return view([cache("vector-add", mountMode="imageVolume", **fields)])


def test_an_annotated_pod_gets_the_digest_pinned_image_volume_mounted_in_every_container_and_gpu_steering():
    steering_view = image_volume_view()
    request = pod_request(pod_spec(containers=("main", "sidecar")), annotations=ANNOTATIONS)
    result = steer(request, steering_view)
    assert result.denial is None
    assert result.operations[:3] == [
        {"op": "add", "path": "/spec/volumes", "value": [IMAGE_VOLUME]},
        {"op": "add", "path": "/spec/containers/0/volumeMounts", "value": [MOUNT]},
        {"op": "add", "path": "/spec/containers/1/volumeMounts", "value": [MOUNT]},
    ]
    pod = apply_patch(request["object"], result.operations)
    # No readiness label in imageVolume mode: every node with a fitting GPU.
    assert [e["key"] for e in required_terms(pod["spec"])[0]["matchExpressions"]] == [
        "gkm.io/gpu-backend", "gkm.io/gpu-arch", "gkm.io/gpu-warp-size"]
    assert steer(pod_request(pod["spec"], annotations=ANNOTATIONS), steering_view).operations == []


def test_existing_volumes_and_mounts_are_appended_to_and_the_containers_annotation_chooses():
    steering_view = image_volume_view()
    spec = pod_spec(containers=("main", "sidecar"))
    spec["volumes"] = [{"name": "data", "emptyDir": {}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    annotations = dict(ANNOTATIONS, **{"gkm.io/cache-containers": "main"})
    result = steer(pod_request(spec, annotations=annotations), steering_view)
    assert result.operations[:2] == [{"op": "add", "path": "/spec/volumes/-", "value": IMAGE_VOLUME},
                                     {"op": "add", "path": "/spec/containers/0/volumeMounts/-", "value": MOUNT}]
    assert not any("/containers/1/" in op["path"] for op in result.operations)


def test_a_volume_of_the_name_at_another_digest_is_replaced():
    spec = pod_spec()
    old = "registry.local:5000/caches/vector-add@sha256:" + "0" * 64
    spec["volumes"] = [dict(IMAGE_VOLUME, image={"reference": old})]
    result = steer(pod_request(spec, annotations=ANNOTATIONS), image_volume_view())
    assert result.operations[0] == {"op": "replace", "path": "/spec/volumes/0", "value": IMAGE_VOLUME}


def test_a_pvc_cache_named_by_the_annotation_mounts_its_serving_pvc_and_steers_to_ready_nodes():
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    request = pod_request(pod_spec(), annotations=ANNOTATIONS)
    result = steer(request, steering_view)
    assert result.operations[0]["value"] == [{"name": "gkm-cache-vector-add", "persistentVolumeClaim": {
        "claimName": "vector-add", "readOnly": True}}]
    pod = apply_patch(request["object"], result.operations)
    assert required_terms(pod["spec"])[0]["matchExpressions"][0]["key"] == "cache.gkm.io/apps.vector-add"


def test_a_per_node_cache_without_a_serving_pvc_cannot_be_mounted_by_annotation():
    denial = steer(pod_request(pod_spec(), annotations=ANNOTATIONS), view([cache("vector-add")])).denial
    assert 'GKMCache "apps/vector-add" has no serving PVC in namespace apps' in denial


def test_annotation_mistakes_are_denied_with_the_fix():
    steering_view = image_volume_view()
    cases = [
        ({"gkm.io/cache": "vector-ad", "gkm.io/cache-mount-path": "/k"}, 'names "vector-ad", which is neither'),
        ({"gkm.io/cache": "vector-add"}, "gkm.io/cache-mount-path must be an absolute directory"),
        ({"gkm.io/cache": "vector-add", "gkm.io/cache-mount-path": "kernels"}, "got 'kernels'"),
        (dict(ANNOTATIONS, **{"gkm.io/cache-containers": "main,ghost"}), "names ghost, which the pod does not have"),
    ]
    for annotations, message in cases:
        denial = steer(pod_request(pod_spec(), annotations=annotations), steering_view).denial
        assert denial and message in denial, (annotations, denial)
    taken = pod_spec()
    taken["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/kernels/"}]
    denial = steer(pod_request(taken, annotations=ANNOTATIONS), steering_view).denial
    assert "container main already mounts volume data at /kernels" in denial
    # Templates are checked too, so a Deployment with a typo is refused before it makes pods.
    denial = steer(workload_request("Deployment", pod_spec(), annotations={"gkm.io/cache": "vector-add"}),
                   steering_view).denial
    assert "gkm.io/cache-mount-path" in denial


def test_annotated_templates_are_checked_but_get_neither_volume_nor_affinity():
    result = steer(workload_request("Deployment", pod_spec(), annotations=ANNOTATIONS), image_volume_view())
    assert result.operations == [] and result.denial is None
    relative = steer(workload_request("Deployment", pod_spec(), annotations=dict(
        ANNOTATIONS, **{"gkm.io/cache-mount-path": "kernels"})), image_volume_view())
    assert relative.denial


def test_an_unresolved_image_denies_pods_and_opt_out_still_mounts():
    steering_view = image_volume_view(digest=None)
    denial = steer(pod_request(pod_spec(), annotations=ANNOTATIONS), steering_view).denial
    assert "has no resolved image digest yet" in denial
    steering_view = image_volume_view()
    result = steer(pod_request(pod_spec(), annotations=dict(ANNOTATIONS, **{"gkm.io/cache-steering": "disabled"})),
                   steering_view)
    assert [op["path"] for op in result.operations] == ["/spec/volumes", "/spec/containers/0/volumeMounts"]


def test_an_image_pinned_in_the_spec_is_used_before_the_status_has_a_digest():
    pinned = "registry.local:5000/caches/vector-add@" + DIGEST_A
    steering_view = image_volume_view(digest=None, image=pinned)
    result = steer(pod_request(pod_spec(), annotations=ANNOTATIONS), steering_view)
    assert result.operations[0]["value"] == [IMAGE_VOLUME]


def test_a_cache_asking_for_a_signature_check_mounts_only_the_digest_its_reconcile_recorded():
    pinned = "registry.local:5000/caches/vector-add@" + DIGEST_A
    labelled = cache("vector-add", mountMode="imageVolume", digest=None, image=pinned)
    labelled["metadata"]["labels"] = {"gkm.io/signature-format": "cosign-v2"}
    denial = steer(pod_request(pod_spec(), annotations=ANNOTATIONS), view([labelled])).denial
    assert "has no resolved image digest yet" in denial and "a signature that does not verify" in denial
    labelled["status"]["resolvedDigest"] = DIGEST_A
    result = steer(pod_request(pod_spec(), annotations=ANNOTATIONS), view([labelled]))
    assert result.operations[0]["value"] == [IMAGE_VOLUME]
