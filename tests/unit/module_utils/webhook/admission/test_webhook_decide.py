"""One answer per request (admission/decide.py): a labelled DaemonSet pod gets its claim rewritten and is steered in one
JSONPatch, a denial of either part denies, a DaemonSet pod whose node has no PVC of its cache waits Pending instead,
workloads get steering only, malformed reviews stay 400s."""

import base64
import json

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    CACHE_PENDING_ANNOTATION,
    EXTRACTED_DIGEST_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.claims import (
    ALLOWED,
    DENIED,
    INVALID,
    PATCHED,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.decide import decide
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import WatchedCluster
from tests.helpers.steering import (
    DIGEST_A,
    READY_KEY,
    SHORT_A,
    apply_patch,
    cache,
    mixed_nodes,
    pod_request,
    pod_spec,
    required_terms,
    serving_pvc,
    terms,
    view,
    workload_request,
)

MUTATION = {"gkm.io/pvc-mutation": "true"}


def review(request):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def pinned(node_name):
    return terms({"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]})


def views(tools_image=None, overlay=None):
    """The claim rewrite's and steering's views of one WatchedCluster, and amd-1's slot PVC name."""
    cluster = WatchedCluster("PVC", tools_image)
    cluster.replace_caches(CACHE_KIND, [cache("vector-add", overlay=overlay)])
    slot = Slot("vector-add", "apps", "apps", "amd-1", DIGEST_A)
    # Marked extracted: the webhook hands out no other node PVC (make before break).
    cluster.replace_pvcs([{"metadata": {"name": slot.pvc_name(), "namespace": "apps", "labels": slot.labels(),
                                        "annotations": {EXTRACTED_DIGEST_ANNOTATION: slot.digest}}},
                          serving_pvc("vector-add")])
    cluster.replace_nodes(mixed_nodes())
    return cluster.claims, cluster.steering, slot.pvc_name()


def operations(decision):
    return json.loads(base64.b64decode(decision.body["response"]["patch"]))


def test_a_labelled_daemonset_pod_gets_its_node_pvc_and_the_digest_in_one_patch():
    cache_view, steering_view, node_pvc = views()
    request = pod_request(pod_spec("vector-add", affinity=pinned("amd-1")), labels=MUTATION)
    decision = decide(review(request), cache_view, steering_view)
    assert decision.outcome == PATCHED
    pod = apply_patch(request["object"], operations(decision))
    assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == node_pvc
    [term] = required_terms(pod["spec"])
    assert term["matchFields"][0]["values"] == ["amd-1"]
    assert {"key": READY_KEY, "operator": "In", "values": [SHORT_A]} in term["matchExpressions"]
    assert "volume kernels -> " + node_pvc in decision.message and "steered" in decision.message
    # The reinvocation sees the rewritten claim: neither part changes anything.
    assert decide(review(dict(request, object=pod)), cache_view, steering_view).outcome == ALLOWED


def test_a_labelled_pod_mounting_its_node_s_pvc_of_a_triton_cache_gets_the_kernel_overlay_in_the_same_patch():
    cache_view, steering_view, node_pvc = views("tools:1", "TRITON_CACHE_DIR")
    spec = pod_spec("vector-add", affinity=pinned("amd-1"))
    spec["containers"][0]["volumeMounts"] = [{"name": "kernels", "mountPath": "/k", "subPath": "cache",
                                              "readOnly": True}]
    request = pod_request(spec, labels=MUTATION)
    pod = apply_patch(request["object"], operations(decide(review(request), cache_view, steering_view)))["spec"]
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == node_pvc
    init, _use = pod["initContainers"]
    # The init container mounts the pod's volume, whose claim the same patch rewrote, as the container does.
    assert init["volumeMounts"][0] == {"name": "kernels", "mountPath": "/k", "subPath": "cache", "readOnly": True}
    assert pod["containers"][0]["env"] == [{"name": "TRITON_CACHE_DIR", "value": "/var/run/gkm/kernels"}]
    assert decide(review(dict(request, object={"metadata": request["object"]["metadata"], "spec": pod})),
                  cache_view, steering_view).outcome == ALLOWED


def test_either_part_denies():
    cache_view, steering_view, _node_pvc = views()
    # amd-2 has no PVC at digest A (the rewrite denies) and is not ready at A (steering denies): the rewrite's reason
    # names the node.
    decision = decide(review(pod_request(pod_spec("vector-add", affinity=pinned("amd-2")), labels=MUTATION)),
                      cache_view, steering_view)
    assert decision.outcome == DENIED
    assert 'is not extracted for node "amd-2"' in decision.message and "no node is usable" not in decision.message
    # Steering alone denies an unlabelled pod the PVC mutation lets through.
    decision = decide(review(pod_request(pod_spec("vector-add", nodeName="cpu-1"))), cache_view, steering_view)
    assert decision.outcome == DENIED and "gkm.io/cache-steering: disabled" in decision.message


def test_a_daemonset_pod_whose_node_has_no_pvc_waits_pending_on_its_node_as_a_pod_of_the_serving_pvc():
    cache_view, steering_view, _node_pvc = views()
    # amd-2 holds only digest B and has no PVC: admitted, its claim kept (the serving PVC), its own node required
    # ready at the serving PVC's digest, which amd-2 is not, and the rewrite's reason on the pod.
    for node in ("amd-2", "cpu-1"):
        request = pod_request(pod_spec("vector-add", affinity=pinned(node)), labels=MUTATION, controller="DaemonSet")
        decision = decide(review(request), cache_view, steering_view)
        assert decision.outcome == PATCHED, decision.message
        pod = apply_patch(request["object"], operations(decision))
        assert pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "vector-add"
        [term] = required_terms(pod["spec"])
        assert term["matchFields"][0]["values"] == [node]
        assert {"key": READY_KEY, "operator": "In", "values": [SHORT_A]} in term["matchExpressions"]
        reason = pod["metadata"]["annotations"][CACHE_PENDING_ANNOTATION]
        assert reason.startswith('GKMCache "apps/vector-add" is not extracted for node "%s"' % node), reason
        assert reason.endswith("the pod waits Pending until its node holds it")
        # Reinvoked: the claim still names the cache, the answer is the same (the annotation is replaced).
        assert decide(review(dict(request, object=pod)), cache_view, steering_view).outcome == PATCHED


def test_a_pod_that_cannot_wait_on_its_node_is_still_denied():
    cache_view, steering_view, _node_pvc = views()

    def answer(spec, controller="DaemonSet", annotations=None, steering=steering_view):
        request = pod_request(spec, labels=MUTATION, controller=controller, annotations=annotations)
        return decide(review(request), cache_view, steering).outcome

    on_amd_2 = pod_spec("vector-add", affinity=pinned("amd-2"))
    assert answer(on_amd_2, controller=None) == DENIED  # a bare pod: no controller retries it
    assert answer(pod_spec("vector-add", nodeName="amd-2")) == DENIED  # placed already: no affinity can hold it
    assert answer(pod_spec("vector-add")) == DENIED  # its node is not known
    # No serving PVC: its claim names nothing that could be mounted.
    assert answer(on_amd_2, steering=view([cache("vector-add")], pvcs=[])) == DENIED
    # A cache known only by its PVCs (no resource): steering has no readiness label to hold the pod with.
    assert answer(on_amd_2, steering=view([], pvcs=[serving_pvc("vector-add")])) == DENIED
    assert answer(on_amd_2, annotations={"gkm.io/cache-steering": "disabled"}) == DENIED


def test_workloads_get_steering_only_and_malformed_reviews_stay_invalid():
    cache_view, steering_view, _node_pvc = views()
    decision = decide(review(workload_request("Deployment", pod_spec("vector-add"))), cache_view, steering_view)
    assert decision.outcome == ALLOWED  # checked, never changed: its pods are steered
    assert decide({"kind": "AdmissionReview"}, cache_view, steering_view).outcome == INVALID
    assert decide(review(pod_request(pod_spec("other"))), cache_view, steering_view).outcome == ALLOWED


def test_a_writable_claim_of_a_cache_is_mounted_read_only_whoever_wrote_the_pod():
    """Issue 31, class 1: a writable mount of a hostPath PV lets the pod replace the node's copy; the webhook makes
    every volume naming a cache read-only, the serving PVC's (by name) and a pvc-mutation pod's (rewritten) alike."""
    cache_view, steering_view, node_pvc = views()
    for labels, claim in (({}, "vector-add"), (MUTATION, node_pvc)):
        spec = pod_spec("vector-add", affinity=pinned("amd-1"), read_only=False)
        spec["volumes"].append({"name": "kernels-again", "persistentVolumeClaim": {"claimName": "vector-add",
                                                                                   "readOnly": False}})
        spec["volumes"].append({"name": "other", "persistentVolumeClaim": {"claimName": "team-data"}})
        request = pod_request(spec, labels=labels)
        decision = decide(review(request), cache_view, steering_view)
        assert decision.outcome == PATCHED, decision.message
        pod = apply_patch(request["object"], operations(decision))
        assert [volume["persistentVolumeClaim"] for volume in pod["spec"]["volumes"]] == [
            {"claimName": claim, "readOnly": True}, {"claimName": claim, "readOnly": True}, {"claimName": "team-data"}]
        assert decide(review(dict(request, object=pod)), cache_view, steering_view).outcome == ALLOWED
