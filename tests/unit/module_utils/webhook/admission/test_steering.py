"""Steering decisions (admission/steering.py) over a mixed cluster: AMD nodes at two digests and none, an NVIDIA node,
a CPU node; pods and workload templates, merged affinity, denials with the reason, opt-out, without a cluster."""

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission import node_affinity
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.steering import steer
from tests.helpers.steering import (
    AMD,
    DIGEST_B,
    NVIDIA,
    READY_KEY,
    REQUIRED,
    SHORT_A,
    SHORT_B,
    apply_patch,
    cache,
    mixed_nodes,
    node,
    pod_request,
    pod_spec,
    required_terms,
    serving_pvc,
    terms,
    view,
    workload_request,
)

AMD_EXPRESSIONS = [
    {"key": "gkm.io/gpu-backend", "operator": "In", "values": ["hip"]},
    {"key": "gkm.io/gpu-arch", "operator": "In", "values": ["gfx90a"]},
    {"key": "gkm.io/gpu-warp-size", "operator": "In", "values": ["64"]},
]
ZONE = {"key": "zone", "operator": "In", "values": ["z1"]}


def ready_at(digest):
    return {"key": READY_KEY, "operator": "In", "values": [digest]}


def steered_pod(steering_view, request):
    result = steer(request, steering_view)
    assert result.denial is None, result.denial
    return apply_patch(request["object"], result.operations)


def fitting_nodes(steering_view, spec):
    return [name for name in sorted(steering_view.all_nodes())
            if node_affinity.node_fits(steering_view.node(name), spec, node_affinity.required_terms(spec))]


def test_a_pod_naming_the_serving_pvc_gets_one_term_with_the_readiness_label_at_its_digest_and_the_gpu_labels():
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    request = pod_request(pod_spec("vector-add"))
    result = steer(request, steering_view)
    assert result.operations == [{"op": "add", "path": "/spec/affinity", "value": terms(
        {"matchExpressions": [ready_at(SHORT_A), *AMD_EXPRESSIONS]})}]
    pod = apply_patch(request["object"], result.operations)
    assert fitting_nodes(steering_view, pod["spec"]) == ["amd-1"]
    # Admitting the patched pod again changes nothing.
    assert steer(pod_request(pod["spec"]), steering_view).operations == []


def test_the_pods_own_terms_are_each_kept_and_extended_and_its_preferred_terms_stay():
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    affinity = terms({"matchExpressions": [ZONE]}, {"matchFields": [{"key": "metadata.name", "operator": "In",
                                                                     "values": ["amd-1"]}]})
    affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = [{"weight": 1, "preference": {
        "matchExpressions": [ZONE]}}]
    affinity["podAntiAffinity"] = {"x": 1}
    request = pod_request(pod_spec("vector-add", affinity=affinity))
    result = steer(request, steering_view)
    assert [op["path"] for op in result.operations] == ["/spec/affinity/nodeAffinity/" + REQUIRED]
    spec = apply_patch(request["object"], result.operations)["spec"]
    assert required_terms(spec) == [
        {"matchExpressions": [ZONE, ready_at(SHORT_A), *AMD_EXPRESSIONS]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["amd-1"]}],
         "matchExpressions": [ready_at(SHORT_A), *AMD_EXPRESSIONS]},
    ]
    assert spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert spec["affinity"]["podAntiAffinity"] == {"x": 1}


def test_a_pod_that_fits_nowhere_is_denied_with_the_reason_the_fix_and_the_opt_out():
    # Nothing extracted at the serving PVC's digest yet.
    steering_view = view([cache("vector-add", digest=DIGEST_B)],
                         pvcs=[serving_pvc("vector-add", digest="sha256:" + "c" * 64)])
    denial = steer(pod_request(pod_spec("vector-add")), steering_view).denial
    assert 'pod "apps/p" cannot be placed' in denial
    assert ('GKMCache "apps/vector-add" no node holds it extracted at digest cccccccccccc yet '
            "(2 node(s) hold another digest)") in denial
    assert "gkm.cluster.cache_info" in denial and "gkm.io/cache-steering: disabled" in denial
    # A cache built for a GPU the cluster lacks.
    steering_view = view([cache("vector-add", targets=[{"backend": "cuda", "arch": "80", "warpSize": 32}])],
                         pvcs=[serving_pvc("vector-add")])
    denial = steer(pod_request(pod_spec("vector-add")), steering_view).denial
    assert "no node has a GPU it was built for (cuda/80/32)" in denial
    # Usable nodes exist, but the pod's own selector keeps it off them.
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    denial = steer(pod_request(pod_spec("vector-add", nodeSelector={"zone": "z9"})), steering_view).denial
    assert "also fits the pod's own nodeName, nodeSelector and required node affinity (1 node(s) are usable" in denial
    denial = steer(pod_request(pod_spec("vector-add", nodeName="amd-2")), steering_view).denial
    assert denial and "widen the pod's placement" in denial


def test_a_cache_not_reconciled_yet_denies_its_pods_but_not_its_workloads():
    steering_view = view([cache("vector-add", digest=None)])
    denial = steer(pod_request(pod_spec("vector-add")), steering_view).denial
    assert "has not been resolved or extracted yet" in denial
    result = steer(workload_request("Deployment", pod_spec("vector-add")), steering_view)
    assert result.denial is None and result.operations == []


def test_opt_out_keeps_the_placement_as_written():
    steering_view = view([cache("vector-add", digest=None)])
    result = steer(pod_request(pod_spec("vector-add"), annotations={"gkm.io/cache-steering": "disabled"}),
                   steering_view)
    assert result.denial is None and result.operations == [] and "disabled" in result.note


def test_opted_out_pods_still_mount_the_cache_read_only_and_templates_are_left_as_written():
    """Issue 31, class 1: the placement is the pod's choice, a writable mount of the node's copy is nobody's."""
    steering_view = view([cache("vector-add", digest=None)])
    result = steer(pod_request(pod_spec("vector-add", read_only=False), annotations={
        "gkm.io/cache-steering": "disabled"}), steering_view)
    assert result.denial is None and result.operations == [
        {"op": "add", "path": "/spec/volumes/0/persistentVolumeClaim/readOnly", "value": True}]
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    template = steer(workload_request("Deployment", pod_spec("vector-add", read_only=False)), steering_view)
    assert template.operations == []  # its pods get it when they are created


def test_workload_templates_are_checked_but_never_changed():
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    for kind in ("Deployment", "StatefulSet", "DaemonSet"):
        for operation in ("CREATE", "UPDATE"):
            result = steer(workload_request(kind, pod_spec("vector-add", affinity={}), operation=operation),
                           steering_view)
            assert result.operations == [] and result.denial is None and "steered when they are created" in result.note
        unknown = steer(workload_request(kind, pod_spec(), annotations={
            "gkm.io/cache": "nope", "gkm.io/cache-mount-path": "/kernels"}), steering_view)
        assert 'names "nope", which is neither a GKMCache' in unknown.denial


def test_an_annotated_workloads_template_is_steered_at_any_digest_and_its_pods_then_at_theirs():
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    steer_template = {"gkm.io/cache-steering": "template"}
    any_digest = {"key": READY_KEY, "operator": "Exists"}
    for kind in ("Deployment", "StatefulSet", "DaemonSet"):
        request = workload_request(kind, pod_spec("vector-add", affinity=terms({"matchExpressions": [ZONE]})),
                                   workload_annotations=steer_template)
        result = steer(request, steering_view)
        assert result.denial is None and "template steered" in result.note
        workload = apply_patch(request["object"], result.operations)
        template_spec = workload["spec"]["template"]["spec"]
        # Merged with the template's own term; the label at any digest (a template outlives digests).
        assert required_terms(template_spec) == [{"matchExpressions": [ZONE, any_digest, *AMD_EXPRESSIONS]}]
        # amd-2 holds the previous digest: a DaemonSet counts it, and its pod there is steered to its digest.
        assert fitting_nodes(steering_view, dict(template_spec, affinity=terms(
            {"matchExpressions": [any_digest, *AMD_EXPRESSIONS]}))) == ["amd-1", "amd-2"]
        pod = steered_pod(steering_view, pod_request(template_spec, controller=kind))
        assert required_terms(pod["spec"]) == [{"matchExpressions": [ZONE, ready_at(SHORT_A), *AMD_EXPRESSIONS]}]
        # An update with the template as stored changes nothing.
        again = workload_request(kind, template_spec, operation="UPDATE", workload_annotations=steer_template)
        assert steer(again, steering_view).operations == []
    # Not annotated, or the template opts out: left as written.
    opted_out = workload_request("DaemonSet", pod_spec("vector-add"), annotations={"gkm.io/cache-steering": "disabled"},
                                 workload_annotations=steer_template)
    assert steer(opted_out, steering_view).operations == []


def test_an_annotated_template_of_a_cache_nothing_holds_yet_is_steered_not_denied():
    steering_view = view([cache("vector-add", digest=None)])
    result = steer(workload_request("DaemonSet", pod_spec("vector-add"),
                                    workload_annotations={"gkm.io/cache-steering": "template"}), steering_view)
    assert result.denial is None and result.operations


def test_a_daemonset_pod_keeps_its_node_pin_and_is_pinned_to_the_digest_instead_of_any():
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")])
    pin = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["amd-1"]}],
           "matchExpressions": [{"key": READY_KEY, "operator": "Exists"}, *AMD_EXPRESSIONS]}
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add", affinity=terms(pin))))
    assert required_terms(pod["spec"]) == [{"matchFields": pin["matchFields"],
                                            "matchExpressions": [ready_at(SHORT_A), *AMD_EXPRESSIONS]}]
    # Pinned to a node that holds only the old digest: a bare pod is denied with the reason; the DaemonSet's own
    # pod is admitted with the affinity and waits Pending (a denial would only back its controller off).
    pin["matchFields"][0]["values"] = ["amd-2"]
    assert "no node is usable" in steer(pod_request(pod_spec("vector-add", affinity=terms(pin))), steering_view).denial
    waiting = steer(pod_request(pod_spec("vector-add", affinity=terms(pin)), controller="DaemonSet"), steering_view)
    assert waiting.denial is None and "waits Pending" in waiting.note
    assert fitting_nodes(steering_view, apply_patch({"spec": pod_spec("vector-add", affinity=terms(pin))},
                                                    waiting.operations)["spec"]) == []


def test_a_kept_outdated_serving_pvc_steers_its_pods_to_its_own_digest_and_a_mutation_pod_to_the_current_one():
    steering_view = view([cache("vector-add", digest=DIGEST_B)], pvcs=[serving_pvc("vector-add")])
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add")))
    assert fitting_nodes(steering_view, pod["spec"]) == ["amd-1"]
    labelled = steered_pod(steering_view, pod_request(pod_spec("vector-add"), labels={"gkm.io/pvc-mutation": "true"}))
    assert required_terms(labelled["spec"])[0]["matchExpressions"][0] == ready_at(SHORT_B)
    assert fitting_nodes(steering_view, labelled["spec"]) == ["amd-2"]


def test_read_only_many_and_unknown_targets_steer_by_what_is_known():
    steering_view = view([cache("vector-add", accessModes=["ReadOnlyMany"])])
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add")))
    assert required_terms(pod["spec"]) == [{"matchExpressions": AMD_EXPRESSIONS}]
    assert fitting_nodes(steering_view, pod["spec"]) == ["amd-1", "amd-2", "amd-3"]
    # A status without targets (written before they were recorded): the readiness label alone.
    steering_view = view([cache("vector-add", targets=[])], pvcs=[serving_pvc("vector-add")])
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add")))
    assert required_terms(pod["spec"]) == [{"matchExpressions": [ready_at(SHORT_A)]}]


def test_targets_of_two_gpu_kinds_are_two_alternatives_for_every_term():
    nodes = mixed_nodes()
    for zoned in nodes[1:]:
        zoned["metadata"]["labels"]["zone"] = "z1"
    steering_view = view([cache("vector-add", targets=AMD + NVIDIA, accessModes=["ReadOnlyMany"])], nodes=nodes)
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add", affinity=terms({"matchExpressions": [ZONE]}))))
    assert [term["matchExpressions"][1]["values"] for term in required_terms(pod["spec"])] == [["cuda"], ["hip"]]
    assert required_terms(pod["spec"])[0]["matchExpressions"][2]["values"] == ["90", "sm_90"]
    assert fitting_nodes(steering_view, pod["spec"]) == ["amd-2", "amd-3", "nv-1"]


def test_cluster_caches_steer_in_their_workload_namespaces_and_a_namespaced_cache_shadows_them():
    cluster = cache("vector-add", namespace="", workloadNamespaces=["apps"], accessModes=["ReadOnlyMany"],
                    targets=NVIDIA)
    steering_view = view(cluster_caches=[cluster])
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add")))
    assert fitting_nodes(steering_view, pod["spec"]) == ["nv-1"]
    assert steer(pod_request(pod_spec("vector-add"), namespace="other"), steering_view).operations == []
    steering_view = view([cache("vector-add", accessModes=["ReadOnlyMany"])], cluster_caches=[cluster])
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add")))
    assert fitting_nodes(steering_view, pod["spec"]) == ["amd-1", "amd-2", "amd-3"]


def test_requests_steering_does_not_handle_change_nothing():
    steering_view = view([cache("vector-add")])
    for request in (pod_request(pod_spec("vector-add"), operation="UPDATE"),
                    workload_request("ReplicaSet", pod_spec("vector-add")),
                    dict(pod_request(pod_spec("vector-add")), subResource="status"),
                    pod_request(pod_spec("other-claim"))):
        result = steer(request, steering_view)
        assert (result.operations, result.denial) == ([], None)


def test_node_events_move_the_decision():
    steering_view = view([cache("vector-add")], pvcs=[serving_pvc("vector-add")],
                         nodes=[{"metadata": {"name": "amd-1", "labels": {}}}])
    request = pod_request(pod_spec("vector-add"))
    assert steer(request, steering_view).denial
    steering_view.apply_node_event("MODIFIED", {"metadata": {"name": "amd-1", "labels": {
        READY_KEY: SHORT_A, "gkm.io/gpu-backend": "hip", "gkm.io/gpu-arch": "gfx90a", "gkm.io/gpu-warp-size": "64"}}})
    assert steer(request, steering_view).denial is None
    steering_view.apply_node_event("DELETED", {"metadata": {"name": "amd-1"}})
    assert steer(request, steering_view).denial


def test_a_cluster_caches_serving_pvc_gives_its_digest_and_one_of_another_cache_namespace_does_not():
    cluster = cache("vector-add", namespace="", workloadNamespaces=["apps"], digest=DIGEST_B)
    cluster_key = "cache.gkm.io/vector-add"
    nodes = [node("amd-1", ("hip", "gfx90a", 64), **{cluster_key: SHORT_A}),
             node("amd-2", ("hip", "gfx90a", 64), **{cluster_key: SHORT_B})]
    steering_view = view(cluster_caches=[cluster], pvcs=[serving_pvc("vector-add", cache_namespace="")], nodes=nodes)
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add")))
    assert fitting_nodes(steering_view, pod["spec"]) == ["amd-1"]
    # A PVC of the name left by a namespaced cache of the same name is not this cache's serving PVC.
    steering_view = view(cluster_caches=[cluster], pvcs=[serving_pvc("vector-add")], nodes=nodes)
    pod = steered_pod(steering_view, pod_request(pod_spec("vector-add")))
    assert fitting_nodes(steering_view, pod["spec"]) == ["amd-2"]


def test_a_template_of_an_image_volume_cache_without_known_targets_is_left_alone():
    steering_view = view([cache("vector-add", mountMode="imageVolume", targets=[])])
    annotations = {"gkm.io/cache": "vector-add", "gkm.io/cache-mount-path": "/k"}
    result = steer(workload_request("DaemonSet", pod_spec(), annotations=annotations), steering_view)
    assert (result.operations, result.denial) == ([], None)


def test_a_cache_without_a_mount_mode_gets_the_installations_default_as_the_reconcile_does():
    """Under caches_mount_mode imageVolume the reconcile makes no PVC for a cache without spec.mountMode: the webhook
    must mount its image, not a serving PVC that never exists."""
    annotations = {"gkm.io/cache": "vector-add", "gkm.io/cache-mount-path": "/k"}
    unset = cache("vector-add")
    for default, volume_source in (("imageVolume", "image"), ("PVC", "persistentVolumeClaim")):
        steering_view = view([unset], pvcs=[serving_pvc("vector-add")], default_mount_mode=default)
        pod = steered_pod(steering_view, pod_request(pod_spec(), annotations=annotations))
        [volume] = pod["spec"]["volumes"]
        assert volume_source in volume, (default, volume)
    # A cache's own spec.mountMode wins over the default.
    steering_view = view([cache("vector-add", mountMode="PVC")], pvcs=[serving_pvc("vector-add")],
                         default_mount_mode="imageVolume")
    [volume] = steered_pod(steering_view, pod_request(pod_spec(), annotations=annotations))["spec"]["volumes"]
    assert "persistentVolumeClaim" in volume
