"""Steering while a serving PVC is kept at an old digest (admission/steering.py, steering_view.py), without a cluster:
the readiness labels have moved on to the new digest, the nodes that still hold the old one are read from their slot
PVCs marked extracted and named by hostname, so a new pod naming the serving PVC is placed where its digest is."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission import node_affinity
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.steering import steer
from tests.helpers.steering import (
    DIGEST_A,
    DIGEST_B,
    READY_KEY,
    SHORT_A,
    SHORT_B,
    apply_patch,
    cache,
    node,
    pod_request,
    pod_spec,
    required_terms,
    serving_pvc,
    view,
)

HOSTNAME = "kubernetes.io/hostname"
LONG = "amd-" + "x" * 70  # its gkm.io/node label value is a readable prefix plus a hash
AMD_EXPRESSIONS = [
    {"key": "gkm.io/gpu-backend", "operator": "In", "values": ["hip"]},
    {"key": "gkm.io/gpu-arch", "operator": "In", "values": ["gfx90a"]},
    {"key": "gkm.io/gpu-warp-size", "operator": "In", "values": ["64"]},
]


def amd(name, digest=SHORT_B, hostname=True):
    labels = {READY_KEY: digest} if digest else {}
    if hostname:
        labels[HOSTNAME] = name[:63]
    return node(name, ("hip", "gfx90a", 64), **labels)


def slot_pvc(node_name, digest=DIGEST_A, extracted=True, deleting=False, namespace="apps"):
    slot = Slot("vector-add", "apps", namespace, node_name, digest)
    metadata = {"name": slot.pvc_name(), "namespace": namespace, "labels": slot.labels(),
                "annotations": {"gkm.io/extracted-digest": digest} if extracted else {}}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-25T10:00:00Z"
    return {"metadata": metadata}


def kept_serving_view(pvcs, nodes=None):
    """The cache is at digest B and labelled so on the nodes; the namespace's serving PVC is kept at A."""
    return view([cache("vector-add", digest=DIGEST_B)], pvcs=[serving_pvc("vector-add", digest=DIGEST_A), *pvcs],
                nodes=nodes if nodes is not None else [amd("amd-1"), amd("amd-2"), amd("amd-3", digest=None)])


def holders_term(*hostnames):
    return {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": list(hostnames)}, *AMD_EXPRESSIONS]}


def fitting(steering_view, spec):
    return sorted(name for name in steering_view.all_nodes()
                  if node_affinity.node_fits(steering_view.node(name), spec, required_terms(spec)))


def test_a_new_pod_naming_a_kept_serving_pvc_goes_to_the_nodes_holding_its_old_digest_by_hostname():
    steering_view = kept_serving_view([slot_pvc("amd-1"), slot_pvc("amd-2"), slot_pvc("amd-1", DIGEST_B)])
    request = pod_request(pod_spec("vector-add"))
    result = steer(request, steering_view)
    assert result.denial is None, result.denial
    pod = apply_patch(request["object"], result.operations)
    assert required_terms(pod["spec"]) == [holders_term("amd-1", "amd-2")]
    assert fitting(steering_view, pod["spec"]) == ["amd-1", "amd-2"]
    # Admitting the patched pod again changes nothing.
    assert steer(pod_request(pod["spec"]), steering_view).operations == []


def test_a_node_still_labelled_at_the_old_digest_is_named_with_the_unlabelled_holders():
    steering_view = kept_serving_view([slot_pvc("amd-2")], nodes=[amd("amd-1", SHORT_A), amd("amd-2")])
    pod = apply_patch(pod_request(pod_spec("vector-add"))["object"],
                      steer(pod_request(pod_spec("vector-add")), steering_view).operations)
    assert required_terms(pod["spec"]) == [holders_term("amd-1", "amd-2")]


def test_a_pvc_not_marked_extracted_or_being_deleted_holds_nothing_and_the_pod_is_denied_as_before():
    for pvc in (slot_pvc("amd-1", extracted=False), slot_pvc("amd-1", deleting=True),
                slot_pvc("amd-1", namespace="other")):
        denial = steer(pod_request(pod_spec("vector-add")), kept_serving_view([pvc])).denial
        assert "no node holds it extracted at digest %s yet (2 node(s) hold another digest)" % SHORT_A in denial


def test_a_deleted_slot_pvc_and_a_node_gone_are_forgotten():
    pvc = slot_pvc("amd-1")
    steering_view = kept_serving_view([pvc])
    assert steer(pod_request(pod_spec("vector-add")), steering_view).denial is None
    steering_view.apply_pvc_event("DELETED", pvc)
    assert steer(pod_request(pod_spec("vector-add")), steering_view).denial is not None
    steering_view.apply_pvc_event("ADDED", pvc)
    steering_view.apply_node_event("DELETED", amd("amd-1"))
    assert steer(pod_request(pod_spec("vector-add")), steering_view).denial is not None


def test_a_node_whose_name_is_hashed_in_the_pvc_label_is_found_by_its_name():
    steering_view = kept_serving_view([slot_pvc(LONG)], nodes=[amd(LONG), amd("amd-2")])
    spec = apply_patch(pod_request(pod_spec("vector-add"))["object"],
                       steer(pod_request(pod_spec("vector-add")), steering_view).operations)["spec"]
    assert fitting(steering_view, spec) == [LONG]


def test_a_holder_without_a_hostname_label_cannot_be_named_and_the_label_decides():
    steering_view = kept_serving_view([slot_pvc("amd-1")], nodes=[amd("amd-1", hostname=False), amd("amd-2")])
    assert "no node holds it extracted at digest %s" % SHORT_A in steer(
        pod_request(pod_spec("vector-add")), steering_view).denial


def test_a_pvc_mutation_pod_keeps_the_readiness_label_at_the_current_digest():
    steering_view = kept_serving_view([slot_pvc("amd-1")])
    request = pod_request(pod_spec("vector-add"), labels={"gkm.io/pvc-mutation": "true"})
    pod = apply_patch(request["object"], steer(request, steering_view).operations)
    assert required_terms(pod["spec"]) == [{"matchExpressions": [
        {"key": READY_KEY, "operator": "In", "values": [SHORT_B]}, *AMD_EXPRESSIONS]}]


def test_once_the_serving_pvc_is_renewed_the_label_is_used_again():
    steering_view = view([cache("vector-add", digest=DIGEST_B)],
                         pvcs=[serving_pvc("vector-add", digest=DIGEST_B), slot_pvc("amd-1", DIGEST_B),
                               slot_pvc("amd-2", DIGEST_B)],
                         nodes=[amd("amd-1"), amd("amd-2")])
    pod = apply_patch(pod_request(pod_spec("vector-add"))["object"],
                      steer(pod_request(pod_spec("vector-add")), steering_view).operations)
    assert required_terms(pod["spec"]) == [{"matchExpressions": [
        {"key": READY_KEY, "operator": "In", "values": [SHORT_B]}, *AMD_EXPRESSIONS]}]


def test_the_holders_requirement_replaces_the_readiness_expression_and_owns_the_key():
    requirement = node_affinity.cache_requirement(READY_KEY, SHORT_A, [], holders={"n2", "n1"})
    assert requirement.alternatives == [[{"key": HOSTNAME, "operator": "In", "values": ["n1", "n2"]}]]
    assert requirement.owns({"key": READY_KEY, "operator": "In", "values": [SHORT_B]})


ALIAS = "vector-add-" + SHORT_B


def alias_pvc(digest=DIGEST_B, cache_namespace="apps"):
    """The serving PVC a run adds at the cache's digest while the one named as the cache is kept."""
    pvc = serving_pvc("vector-add", digest=digest, cache_namespace=cache_namespace)
    pvc["metadata"]["name"] = ALIAS
    return pvc


def test_with_an_alias_at_the_new_digest_a_new_pod_is_rewritten_to_it_and_steered_by_the_label():
    steering_view = kept_serving_view([slot_pvc("amd-1"), alias_pvc()])
    spec = pod_spec("vector-add")
    spec["volumes"].insert(0, {"name": "scratch", "emptyDir": {}})
    request = pod_request(spec)
    result = steer(request, steering_view)
    assert result.denial is None, result.denial
    pod = apply_patch(request["object"], result.operations)
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v] \
        == [ALIAS]
    assert required_terms(pod["spec"]) == [{"matchExpressions": [
        {"key": READY_KEY, "operator": "In", "values": [SHORT_B]}, *AMD_EXPRESSIONS]}]
    assert fitting(steering_view, pod["spec"]) == ["amd-1", "amd-2"]
    # The patched pod names the alias, which is the cache of no name: nothing more to do.
    assert steer(pod_request(pod["spec"]), steering_view).operations == []


def test_an_alias_of_another_digest_or_cache_is_not_used():
    for alias in (alias_pvc(digest=DIGEST_A), alias_pvc(cache_namespace="other")):
        steering_view = kept_serving_view([slot_pvc("amd-1"), alias])
        pod = apply_patch(pod_request(pod_spec("vector-add"))["object"],
                          steer(pod_request(pod_spec("vector-add")), steering_view).operations)
        assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "vector-add"
        assert required_terms(pod["spec"]) == [holders_term("amd-1")]


def test_a_pvc_mutation_pod_is_not_rewritten_to_the_alias():
    steering_view = kept_serving_view([slot_pvc("amd-1"), alias_pvc()])
    request = pod_request(pod_spec("vector-add"), labels={"gkm.io/pvc-mutation": "true"})
    assert not [op for op in steer(request, steering_view).operations if op["path"].endswith("/claimName")]


def test_an_annotated_pod_gets_the_alias_as_its_volume():
    steering_view = kept_serving_view([slot_pvc("amd-1"), alias_pvc()])
    request = pod_request(pod_spec(), annotations={"gkm.io/cache": "vector-add", "gkm.io/cache-mount-path": "/k"})
    result = steer(request, steering_view)
    pod = apply_patch(request["object"], result.operations)
    assert [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]] == [ALIAS]
    assert fitting(steering_view, pod["spec"]) == ["amd-1", "amd-2"]
