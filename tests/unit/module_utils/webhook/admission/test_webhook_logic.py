"""Admission decisions of the PVC-mutation webhook and the view they are made from (no cluster)."""

import base64
import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import resource_terms
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot, label_value, short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KIND,
    CLUSTER_CACHE_KIND,
    EXTRACTED_DIGEST_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import render, serving
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.claims import (
    ALLOWED,
    DENIED,
    INVALID,
    PATCHED,
    admit,
    pod_node,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import WatchedCluster
from tests.helpers.distribute import make_spec

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


def pvc(slot, created="2026-01-01T00:00:00Z", extracted=True):
    """A PVC shaped like cache_distribute's: name and labels from naming.Slot, marked extracted unless told not."""
    return {
        "metadata": {
            "name": slot.pvc_name(),
            "namespace": slot.namespace,
            "labels": slot.labels(),
            "annotations": {EXTRACTED_DIGEST_ANNOTATION: slot.digest} if extracted else {},
            "creationTimestamp": created,
        }
    }


def cache_object(name, namespace="", image="quay.io/x/cache:v1", access_modes=None, workload_namespaces=None):
    spec = {"image": image}
    if access_modes is not None:
        spec["accessModes"] = access_modes
    if workload_namespaces is not None:
        spec["workloadNamespaces"] = workload_namespaces
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"metadata": metadata, "spec": spec}


def daemonset_affinity(*nodes):
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": list(nodes)}]}
    ]}}}


def review(pod=None, namespace="apps", operation="CREATE", kind=None, uid="uid-1", sub_resource=None):
    request = {
        "uid": uid,
        "kind": kind or {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "operation": operation,
        "object": pod,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def pod(claims=("vector-add",), labels=None, node=None, affinity=None):
    spec = {
        "containers": [{"name": "app", "image": "busybox"}],
        "volumes": [{"name": "empty", "emptyDir": {}}]
        + [{"name": "cache-%d" % i, "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)],
    }
    if node:
        spec["nodeName"] = node
    if affinity:
        spec["affinity"] = affinity
    return {
        "metadata": {"generateName": "ds-", "labels": {"gkm.io/pvc-mutation": "true"} if labels is None else labels},
        "spec": spec,
    }


def patch_of(decision):
    response = decision.body["response"]
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))


@pytest.fixture
def cluster():
    """apps: namespaced cache vector-add distributed to worker-1 and worker-2 (not worker-3)."""
    cluster = WatchedCluster()
    cluster.replace_pvcs([pvc(Slot("vector-add", "apps", "apps", node, DIGEST_A)) for node in ("worker-1", "worker-2")])
    return cluster


@pytest.fixture
def view(cluster):
    return cluster.claims


def test_labelled_pod_with_node_affinity_gets_its_node_pvc(view):
    decision = admit(review(pod(affinity=daemonset_affinity("worker-2"))), view)
    assert decision.outcome == PATCHED
    assert decision.http_status == 200
    assert decision.body["response"]["uid"] == "uid-1"
    assert decision.body["response"]["allowed"] is True
    assert patch_of(decision) == [{
        "op": "replace",
        "path": "/spec/volumes/1/persistentVolumeClaim/claimName",
        "value": Slot("vector-add", "apps", "apps", "worker-2", DIGEST_A).pvc_name(),
    }]
    assert decision.message == 'pod "apps/ds-<generated>" on node worker-2: volume cache-0 -> {0}'.format(
        Slot("vector-add", "apps", "apps", "worker-2", DIGEST_A).pvc_name())


def test_node_name_wins_over_affinity(view):
    decision = admit(review(pod(node="worker-1", affinity=daemonset_affinity("worker-2"))), view)
    assert patch_of(decision)[0]["value"] == Slot("vector-add", "apps", "apps", "worker-1", DIGEST_A).pvc_name()


def test_every_cache_volume_is_rewritten_and_others_left_alone(view):
    view.apply_pvc_event("ADDED", pvc(Slot("other", "apps", "apps", "worker-1", DIGEST_B)))
    decision = admit(review(pod(claims=("vector-add", "my-data", "other"), node="worker-1")), view)
    paths = {op["path"]: op["value"] for op in patch_of(decision)}
    assert paths == {
        "/spec/volumes/1/persistentVolumeClaim/claimName": Slot("vector-add", "apps", "apps", "worker-1",
                                                                DIGEST_A).pvc_name(),
        "/spec/volumes/3/persistentVolumeClaim/claimName": Slot("other", "apps", "apps", "worker-1",
                                                                DIGEST_B).pvc_name(),
    }


def test_node_without_pvc_is_denied_naming_cache_node_and_fix(view):
    decision = admit(review(pod(affinity=daemonset_affinity("worker-3"))), view)
    assert decision.outcome == DENIED
    response = decision.body["response"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert 'GKMCache "apps/vector-add"' in message
    assert '"worker-3"' in message
    assert "gkm.cluster.cache_distribute" in message
    assert DIGEST_A.split(":")[1][:12] in message


def test_pod_without_determinable_node_is_denied(view):
    decision = admit(review(pod()), view)
    assert decision.outcome == DENIED
    message = decision.body["response"]["status"]["message"]
    assert "DaemonSet" in message and "spec.nodeName" in message and "vector-add" in message


def test_unlabelled_pod_is_allowed_unchanged(view):
    for labels in ({}, {"gkm.io/pvc-mutation": "false"}, {"gkm.io/pvc-mutation": True}):
        decision = admit(review(pod(labels=labels, node="worker-1")), view)
        assert decision.outcome == ALLOWED
        assert "patch" not in decision.body["response"]


def test_claim_naming_no_cache_is_allowed(view):
    decision = admit(review(pod(claims=("my-data",), node="worker-1")), view)
    assert decision.outcome == ALLOWED
    assert decision.body["response"] == {"uid": "uid-1", "allowed": True}


def test_cache_is_only_visible_in_its_namespace(view):
    decision = admit(review(pod(node="worker-1"), namespace="elsewhere"), view)
    assert decision.outcome == ALLOWED


def test_reinvocation_of_an_already_rewritten_pod_changes_nothing(view):
    rewritten = Slot("vector-add", "apps", "apps", "worker-1", DIGEST_A).pvc_name()
    decision = admit(review(pod(claims=(rewritten,), node="worker-1")), view)
    assert decision.outcome == ALLOWED


def test_non_pod_non_create_and_subresources_are_allowed(view):
    deployment = {"group": "apps", "version": "v1", "kind": "Deployment"}
    assert admit(review(pod(node="worker-1"), kind=deployment), view).outcome == ALLOWED
    assert admit(review(pod(node="worker-1"), operation="UPDATE"), view).outcome == ALLOWED
    assert admit(review(pod(node="worker-1"), sub_resource="ephemeralcontainers"), view).outcome == ALLOWED


@pytest.mark.parametrize("body", [
    None, [], "text", 42, {}, {"kind": "AdmissionReview"},
    {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "x"}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}},
    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}},
])
def test_malformed_reviews_are_rejected_with_400(view, body):
    decision = admit(body, view)
    assert decision.outcome == INVALID
    assert decision.http_status == 400
    assert decision.body["error"]


@pytest.mark.parametrize("mangle", [
    lambda p: p.update(spec=None),
    lambda p: p.update(spec=[]),
    lambda p: p["spec"].update(volumes="oops"),
    lambda p: p["spec"].update(volumes=[None, 3, {"persistentVolumeClaim": None}, {"persistentVolumeClaim": {}}]),
    lambda p: p["spec"]["volumes"][1]["persistentVolumeClaim"].update(claimName=["vector-add"]),
    lambda p: p.update(metadata="x"),
    lambda p: p["metadata"].update(labels=["gkm.io/pvc-mutation"]),
])
def test_odd_pod_shapes_get_an_answer_not_an_exception(view, mangle):
    body = pod(node="worker-1")
    mangle(body)
    decision = admit(review(body), view)
    assert decision.http_status == 200
    assert decision.outcome == ALLOWED


def test_missing_object_is_allowed(view):
    assert admit(review(None), view).outcome == ALLOWED


@pytest.mark.parametrize("spec, node", [
    ({"nodeName": "n1"}, "n1"),
    ({"affinity": daemonset_affinity("n1")}, "n1"),
    ({"affinity": daemonset_affinity("n1", "n2")}, None),
    ({"affinity": daemonset_affinity()}, None),
    ({}, None),
    ({"nodeName": ""}, None),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]}}}}, "n1"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
    ]}}}}, None),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]},
                         {"key": "metadata.name", "operator": "In", "values": ["n2", "n3"]}]},
    ]}}}}, "n2"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]},
    ]}}}}, None),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}}},
     None),
    ({"affinity": "x"}, None),
])
def test_pod_node(spec, node):
    assert pod_node(spec) == node


def test_cluster_cache_visible_only_in_workload_namespaces():
    cluster = WatchedCluster()
    view = cluster.claims
    cluster.replace_caches(CLUSTER_CACHE_KIND, [cache_object("shared", workload_namespaces=["apps", "ml"])])
    view.replace_pvcs([pvc(Slot("shared", "", "apps", "worker-1", DIGEST_A))])

    patched = admit(review(pod(claims=("shared",), node="worker-1")), view)
    assert patch_of(patched)[0]["value"] == Slot("shared", "", "apps", "worker-1", DIGEST_A).pvc_name()

    not_there_yet = admit(review(pod(claims=("shared",), node="worker-1"), namespace="ml"), view)
    assert not_there_yet.outcome == DENIED
    assert 'ClusterGKMCache "shared" has not been distributed' in not_there_yet.body["response"]["status"]["message"]

    assert admit(review(pod(claims=("shared",), node="worker-1"), namespace="web"), view).outcome == ALLOWED


def test_cluster_cache_found_from_pvcs_alone():
    cluster = WatchedCluster()
    view = cluster.claims
    view.replace_pvcs([pvc(Slot("shared", "", "apps", "worker-1", DIGEST_A))])
    decision = admit(review(pod(claims=("shared",), node="worker-1")), view)
    assert decision.outcome == PATCHED


def test_namespaced_cache_shadows_cluster_cache_of_same_name():
    cluster = WatchedCluster()
    view = cluster.claims
    view.replace_pvcs([
        pvc(Slot("kc", "", "apps", "worker-1", DIGEST_A)),
        pvc(Slot("kc", "apps", "apps", "worker-1", DIGEST_B)),
    ])
    decision = admit(review(pod(claims=("kc",), node="worker-1")), view)
    assert patch_of(decision)[0]["value"] == Slot("kc", "apps", "apps", "worker-1", DIGEST_B).pvc_name()


def test_declared_cache_without_pvcs_is_denied():
    cluster = WatchedCluster()
    view = cluster.claims
    cluster.replace_caches(CACHE_KIND, [cache_object("vector-add", "apps")])
    decision = admit(review(pod(node="worker-1")), view)
    assert decision.outcome == DENIED
    assert 'GKMCache "apps/vector-add" has not been distributed to any node yet' in (
        decision.body["response"]["status"]["message"])


def test_read_only_many_cache_needs_no_rewrite():
    cluster = WatchedCluster()
    view = cluster.claims
    cluster.replace_caches(CACHE_KIND, [cache_object("rox", "apps", access_modes=["ReadOnlyMany"])])
    assert admit(review(pod(claims=("rox",))), view).outcome == ALLOWED
    cluster = WatchedCluster()
    view = cluster.claims
    view.replace_pvcs([pvc(Slot("rox2", "apps", "apps", "", DIGEST_A))])
    assert admit(review(pod(claims=("rox2",))), view).outcome == ALLOWED


def test_newest_digest_is_current_unless_the_cache_pins_one():
    cluster = WatchedCluster()
    view = cluster.claims
    view.replace_pvcs([
        pvc(Slot("kc", "apps", "apps", "worker-1", DIGEST_A), created="2026-01-01T00:00:00Z"),
        pvc(Slot("kc", "apps", "apps", "worker-2", DIGEST_A), created="2026-01-01T00:00:00Z"),
        pvc(Slot("kc", "apps", "apps", "worker-1", DIGEST_B), created="2026-02-01T00:00:00Z"),
    ])
    new = admit(review(pod(claims=("kc",), node="worker-1")), view)
    assert patch_of(new)[0]["value"] == Slot("kc", "apps", "apps", "worker-1", DIGEST_B).pvc_name()
    # worker-2 has only the old digest: it keeps serving it until the new one is extracted there.
    kept = admit(review(pod(claims=("kc",), node="worker-2")), view)
    assert patch_of(kept)[0]["value"] == Slot("kc", "apps", "apps", "worker-2", DIGEST_A).pvc_name()

    cluster.apply_cache_event(CACHE_KIND, "ADDED", cache_object("kc", "apps", image="reg/kc@" + DIGEST_A))
    pinned = admit(review(pod(claims=("kc",), node="worker-2")), view)
    assert patch_of(pinned)[0]["value"] == Slot("kc", "apps", "apps", "worker-2", DIGEST_A).pvc_name()


def test_watch_events_update_the_view(view):
    slot3 = Slot("vector-add", "apps", "apps", "worker-3", DIGEST_A)
    assert admit(review(pod(node="worker-3")), view).outcome == DENIED
    view.apply_pvc_event("ADDED", pvc(slot3))
    assert patch_of(admit(review(pod(node="worker-3")), view))[0]["value"] == slot3.pvc_name()
    view.apply_pvc_event("DELETED", pvc(slot3))
    assert admit(review(pod(node="worker-3")), view).outcome == DENIED
    # A PVC whose labels stop marking it as managed leaves the view.
    slot1 = Slot("vector-add", "apps", "apps", "worker-1", DIGEST_A)
    relabelled = pvc(slot1)
    relabelled["metadata"]["labels"] = {"app": "x"}
    view.apply_pvc_event("MODIFIED", relabelled)
    assert admit(review(pod(node="worker-1")), view).outcome == DENIED
    assert view.counts()["pvcs"] == 1
    view.replace_pvcs([])
    assert admit(review(pod(node="worker-1")), view).outcome == ALLOWED
    assert view.counts() == {"pvcs": 0, "namespaced_caches": 0, "cluster_caches": 0}


def test_cache_deletion_event(cluster, view):
    cluster.apply_cache_event(CLUSTER_CACHE_KIND, "ADDED", cache_object("shared", workload_namespaces=["apps"]))
    assert admit(review(pod(claims=("shared",), node="worker-1")), view).outcome == DENIED
    cluster.apply_cache_event(CLUSTER_CACHE_KIND, "DELETED", cache_object("shared"))
    assert admit(review(pod(claims=("shared",), node="worker-1")), view).outcome == ALLOWED


def test_long_node_names_match_the_hashed_node_label():
    node = "gpu-node-" + "x" * 70 + ".example.com"
    slot = Slot("kc", "apps", "apps", node, DIGEST_A)
    assert slot.labels()["gkm.io/node"] == label_value(node) != node
    cluster = WatchedCluster()
    view = cluster.claims
    view.replace_pvcs([pvc(slot)])
    assert patch_of(admit(review(pod(claims=("kc",), node=node)), view))[0]["value"] == slot.pvc_name()


def test_deny_message_names_the_pod(view):
    body = pod(affinity=daemonset_affinity("worker-3"))
    decision = admit(review(body), view)
    assert '"apps/ds-<generated>"' in decision.body["response"]["status"]["message"]


def _node_objects(cache_kind, namespace, cache, reasons):
    """Per-node objects as a reconcile writes them, each node excluded with its planner reasons."""
    from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_objects import plan_node_objects
    from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_status import exclusion_code

    states = {node: {DIGEST_A: {"state": "Excluded", "reason": exclusion_code(why),
                                "message": resource_terms("; ".join(why))}} for node, why in reasons.items()}
    objects = {}
    for write in plan_node_objects(cache_kind, namespace, cache, states, [], [], "now"):
        obj = objects.setdefault(write.name, {"metadata": {"name": write.name, "namespace": namespace}})
        obj.update(write.body if write.verb == "patch_status" else {})
    return list(objects.values())


def test_denials_say_why_a_node_never_gets_the_cache_and_not_yet_only_when_it_is_so():
    """Why the reconcile left a GPU node out, from its per-node object (here the planner's own reasons), reaches
    the denial; a node without a GPU has no per-node entry and is denied without a reason."""
    cache = cache_object("vector-add", "apps")
    cluster = WatchedCluster()
    view = cluster.claims
    cluster.replace_caches(CACHE_KIND, [cache])
    view.replace_node_objects(CACHE_KIND, _node_objects("GKMCache", "apps", "vector-add", {
        "nv-1": ["GPU cuda/90/32 does not match the image's targets (hip/gfx90a/64)"],
        "tainted-1": ["untolerated taint team=ml:NoSchedule (add a toleration to pod_template.spec.tolerations)"],
    }))
    view.replace_pvcs([pvc(Slot("vector-add", "apps", "apps", "worker-1", DIGEST_A))])

    def denial(node):
        decision = admit(review(pod(node=node)), view)
        assert decision.outcome == DENIED
        return decision.body["response"]["status"]["message"]

    assert 'GKMCache "apps/vector-add" is not for node "nv-1": GPU cuda/90/32 does not match' in denial("nv-1")
    tainted = denial("tainted-1")
    assert "untolerated taint team=ml:NoSchedule (add a toleration to spec.podTemplate.spec.tolerations)" in tainted
    for message in (denial("nv-1"), tainted):
        assert "yet" not in message and "cache_distribute" not in message
    not_yet = denial("worker-2")
    assert 'is not extracted for node "worker-2" (digest %s) yet' % short_digest(DIGEST_A) in not_yet
    assert "gkm.cluster.cache_distribute" in not_yet
    view.apply_node_object_event(CACHE_KIND, "DELETED", {"metadata": {"name": "nv-1", "namespace": "apps"}})
    assert "yet" in denial("nv-1")


def test_a_serving_pvc_named_as_the_cache_leaves_daemonset_pods_on_their_node_pvc(view):
    """The serving PVC (distribute/serving.py) is no node's PVC: it must not turn the cache into a shared one."""
    served = serving.render(make_spec(digest=DIGEST_A, namespace="apps"), "apps", True)[1]
    view.apply_pvc_event("ADDED", served)
    assert view.counts()["pvcs"] == 2
    decision = admit(review(pod(affinity=daemonset_affinity("worker-2"))), view)
    assert patch_of(decision)[0]["value"] == Slot("vector-add", "apps", "apps", "worker-2", DIGEST_A).pvc_name()


def test_the_pvc_an_extraction_job_writes_through_is_no_node_s_pvc(view):
    spec = make_spec(digest=DIGEST_A, namespace="apps")
    access = render.render_access(spec, Slot("vector-add", "apps", "apps", "worker-2", DIGEST_A), None, "")[0]
    before = view.counts()["pvcs"]
    view.apply_pvc_event("ADDED", access)
    assert view.counts()["pvcs"] == before


def test_only_extracted_pvcs_are_handed_out_the_previous_one_until_the_new_one_is():
    old = {node: Slot("kc", "apps", "apps", node, DIGEST_A) for node in ("worker-1", "worker-2", "worker-3")}
    new = {node: Slot("kc", "apps", "apps", node, DIGEST_B) for node in old}
    cluster = WatchedCluster()
    view = cluster.claims
    view.replace_pvcs([
        pvc(old["worker-1"], extracted=False),  # its Job never finished
        pvc(old["worker-2"]), pvc(new["worker-2"], created="2026-02-01T00:00:00Z", extracted=False),
        pvc(old["worker-3"]), pvc(new["worker-3"], created="2026-02-01T00:00:00Z"),
    ])

    def claim_for(node):
        decision = admit(review(pod(claims=("kc",), node=node)), view)
        return patch_of(decision)[0]["value"] if decision.outcome == PATCHED else decision.message

    assert 'is not extracted for node "worker-1" (digest %s) yet' % short_digest(DIGEST_B) in claim_for("worker-1")
    assert claim_for("worker-2") == old["worker-2"].pvc_name()
    assert claim_for("worker-3") == new["worker-3"].pvc_name()
    # The new PVC of worker-2 is marked once its Job completed: the next pod gets it.
    view.apply_pvc_event("MODIFIED", pvc(new["worker-2"], created="2026-02-01T00:00:00Z"))
    assert claim_for("worker-2") == new["worker-2"].pvc_name()
