"""mountMode imageVolume on the reconcile's side (distribute/image_volume.py, spec, planner, resource status):
nothing planned, a status saying so and who uses the image (pulled nodes, mounting pods), without a cluster; the
mount_mode option as the default of resources without spec.mountMode."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    pinned_reference,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    RESOLVED,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import (
    node_facts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import spec as cache_spec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import DISTRIBUTION_ARG_SPEC
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import image_volume, module_result
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    image_volume_report,
    summary_status,
)
from tests.helpers.distribute import (
    DIGEST_A,
    DIGEST_B,
    WORKERS,
    as_live,
    default_nodes,
    distribution,
    facts,
    make_spec,
    pod,
    verbs,
)

REFERENCE = "registry.local/caches/vector-add@" + DIGEST_A


def image_volume_spec(**params):
    return make_spec(mount_mode="imageVolume", **params)


@pytest.mark.parametrize("image, expected", [
    ("registry.local:5000/caches/vector-add:v1", "registry.local:5000/caches/vector-add@" + DIGEST_A),
    ("registry.local:5000/caches/vector-add", "registry.local:5000/caches/vector-add@" + DIGEST_A),
    ("quay.io/x/y@sha256:" + "0" * 64, "quay.io/x/y@" + DIGEST_A),
    ("localhost:5000/y:v1@sha256:" + "0" * 64, "localhost:5000/y@" + DIGEST_A),
])
def test_the_reference_is_pinned_to_the_resolved_digest(image, expected):
    assert pinned_reference(image, DIGEST_A) == expected


def test_the_mode_is_parsed_checked_and_needs_no_extraction_image():
    assert make_spec().mount_mode == "PVC" and not make_spec().image_volume
    spec = cache_spec.cache_spec_from_params({"name": "c", "namespace": "n", "mount_mode": "imageVolume"})
    assert spec.image_volume
    with pytest.raises(cache_spec.SpecError, match="mount_mode must be one of PVC, imageVolume, got 'image'"):
        make_spec(mount_mode="image")
    with pytest.raises(cache_spec.SpecError, match="extract_image is required"):
        cache_spec.cache_spec_from_params({"name": "c", "namespace": "n"})


def test_the_planner_plans_no_object_but_still_judges_the_nodes():
    result = planner.plan(image_volume_spec(serving_pvc=True), facts(namespaces=()))
    assert (result.actions, result.desired, result.slots) == ([], [], [])
    assert [n["metadata"]["name"] for n in result.eligibility.eligible] == WORKERS


def test_switching_from_pvc_mode_removes_the_old_objects_unless_pods_mount_them():
    live = as_live(planner.plan(make_spec(), facts()).desired, complete_jobs=True, marked=True)
    unused = planner.plan(image_volume_spec(), facts(objects=live))
    assert {verb for verb, _kind, _name in verbs(unused)} == {"delete"}
    assert len(verbs(unused)) == sum(len(objects) for objects in live.values())
    pvc_name = live["PersistentVolumeClaim"][0]["metadata"]["name"]
    mounted = planner.plan(image_volume_spec(), facts(objects=live, pods=[pod("app", "team-a", pvc_name)]))
    assert [(s.outcome, s.pvc) for s in mounted.slots] == [("outdated", pvc_name)]


def test_the_status_is_resolved_counts_fitting_nodes_and_lists_incompatible_ones():
    nodes = default_nodes([{"name": "nv", "count": 1, "vendor": "nvidia", "arch": "90"}])
    spec = image_volume_spec(pod_template={"spec": {"tolerations": [{"operator": "Exists"}]}})
    status = image_volume.cache_status(spec, planner.plan(spec, facts(nodes)).eligibility, [], nodes)
    assert status["phase"] == RESOLVED and status["counts"]["nodes"] == len(WORKERS)
    assert [(e["node"], e["phase"]) for e in status["entries"]] == [("nv-1", "Incompatible")]
    assert status["image_volume"] == {"reference": REFERENCE, "compatible_nodes": len(WORKERS), "pulled_nodes": [],
                                      "pulled_node_count": 0, "pods": [], "pod_count": 0}


def test_the_resource_maps_mount_mode_and_its_status_is_ready_with_the_reference_and_the_targets():
    params = cache_cr.distribute_params({"kind": "GKMCache", "metadata": {"name": "c", "namespace": "n"},
                                         "spec": {"image": "i", "mountMode": "imageVolume"}}, {})
    assert params["mount_mode"] == "imageVolume"
    unset = {"kind": "GKMCache", "metadata": {"name": "c", "namespace": "n"}, "spec": {"image": "i"}}
    assert cache_cr.distribute_params(unset, {})["mount_mode"] == "PVC"
    assert cache_cr.distribute_params(unset, {"mount_mode": "imageVolume"})["mount_mode"] == "imageVolume"
    spec = image_volume_spec()
    status = image_volume.cache_status(spec, planner.plan(spec, facts()).eligibility, [], default_nodes())
    body = summary_status(distribution(status, DIGEST_A, spec.targets), "t")
    ready = body["conditions"][0]
    assert (body["phase"], ready["status"], ready["reason"]) == ("Resolved", "True", "Resolved")
    assert REFERENCE in ready["message"] and "3 node(s)" in ready["message"]
    assert body["targets"] == [{"backend": "hip", "arch": "gfx90a", "warpSize": 64}]
    assert body["imageVolume"] == {"reference": REFERENCE, "pulledNodeCnt": 0, "pulledNodes": [], "podCnt": 0,
                                   "pods": []}


def test_the_mount_mode_option_defaults_to_pvc_and_is_the_default_of_a_resource_without_its_own():
    assert DISTRIBUTION_ARG_SPEC["mount_mode"] == {"type": "str", "choices": ["PVC", "imageVolume"], "default": "PVC"}
    declared = {"kind": "ClusterGKMCache", "metadata": {"name": "c"},
                "spec": {"image": "i", "workloadNamespaces": ["a"], "mountMode": "PVC"}}
    assert cache_cr.distribute_params(declared, {"mount_mode": "imageVolume"})["mount_mode"] == "PVC"


# ---------------------------------------------------------------- who uses the image


def pulled(node, *names):
    """The node as the kubelet reports it after pulling images of these names."""
    images = [{"names": [name, "other:v1"]} for name in names] + [{"names": ["busybox:1"]}]
    return dict(node, status=dict(node.get("status") or {}, images=images))


def image_pod(name, node, reference, phase="Running", namespace="team-a", **fields):
    body = pod(name, namespace, "unused", node=node, phase=phase, **fields)
    body["spec"]["volumes"] = [{"name": "gkm-cache-vector-add", "image": {"reference": reference}},
                               {"name": "scratch", "emptyDir": {}}]
    return body


def use_status(pods, nodes=None):
    nodes = default_nodes() if nodes is None else nodes
    spec = image_volume_spec()
    return image_volume.cache_status(spec, planner.plan(spec, facts(nodes, pods=pods)).eligibility, pods, nodes)


def test_pods_on_the_pinned_and_an_older_digest_and_nodes_with_the_image_are_counted_as_gkm_counts():
    old = "registry.local/caches/vector-add@" + DIGEST_B
    w1, w2, w3 = WORKERS
    nodes = [pulled(node, REFERENCE) if node["metadata"]["name"] in (w1, w3)
             else pulled(node, old) if node["metadata"]["name"] == w2 else node for node in default_nodes()]
    pods = [
        image_pod("app-1", w1, REFERENCE), image_pod("app-2", w1, REFERENCE),
        image_pod("old-1", w2, old),  # an older digest of the repository: outdated
        image_pod("starting", "", REFERENCE, phase="Pending"),  # listed, not running
        image_pod("done", w3, REFERENCE, phase="Succeeded"),  # finished: not a user
        image_pod("ours", w3, REFERENCE, labels={"app.kubernetes.io/managed-by": "gkm.cluster"}),
        image_pod("other-image", w3, "registry.local/caches/vector-add-2@" + DIGEST_A),
        pod("claims", "team-a", "vector-add", node=w3),
    ]
    status = use_status(pods, nodes)
    # w1 runs pods on the pinned digest; w3 pulled it and runs none (not in use); w2 has only the older one.
    assert status["counts"] == {"nodes": 3, "node_in_use": 1, "node_not_in_use": 1, "node_error": 0,
                                "pod_running": 2, "pod_outdated": 1}
    use = status["image_volume"]
    assert (use["pulled_nodes"], use["pulled_node_count"], use["pod_count"]) == ([w1, w3], 2, 4)
    assert [(p["name"], p["node"], p["phase"], p["digest"]) for p in use["pods"]] == [
        ("app-1", w1, "Running", DIGEST_A), ("app-2", w1, "Running", DIGEST_A), ("starting", "", "Pending", DIGEST_A),
        ("old-1", w2, "Running", DIGEST_B)]
    assert status["phase"] == RESOLVED
    message = summary_status(distribution(status, DIGEST_A), "t")["conditions"][0][
        "message"]
    assert message.endswith("2 node(s) pulled it, 2 running pod(s) mount it, 1 an older digest")


def test_nodes_in_use_are_where_the_pods_run_whatever_the_caches_pod_template_admits():
    # Without the GPU toleration the cache's podTemplate admits no node, yet the pods' own placement runs them there.
    spec = image_volume_spec(pod_template={})
    nodes = [pulled(node, REFERENCE) for node in default_nodes()]
    pods = [image_pod("app", WORKERS[0], REFERENCE)]
    status = image_volume.cache_status(spec, planner.plan(spec, facts(nodes, pods=pods)).eligibility, pods, nodes)
    assert {key: status["counts"][key] for key in ("nodes", "node_in_use", "node_not_in_use", "pod_running")} == {
        "nodes": 0, "node_in_use": 1, "node_not_in_use": len(nodes) - 1, "pod_running": 1}


def test_a_reconcile_keeps_of_a_node_only_the_image_entry_of_the_pinned_reference():
    node = pulled(default_nodes()[0], REFERENCE)
    assert node_facts(node, REFERENCE)["status"]["images"] == [{"names": [REFERENCE]}]
    assert "images" not in node_facts(node)["status"]
    assert "images" not in node_facts(node, "registry.local/caches/vector-add@" + DIGEST_B)["status"]


def test_the_lists_are_bounded_without_node_details_and_in_the_resource_status_but_counted_whole():
    names = ["n-%03d" % index for index in range(25)]
    nodes = [pulled({"metadata": {"name": name, "labels": {}}}, REFERENCE) for name in names]
    pods = [image_pod("app-%03d" % index, names[index % 5], REFERENCE) for index in range(30)]
    status = use_status(pods, nodes)
    assert (status["image_volume"]["pulled_node_count"], len(status["image_volume"]["pulled_nodes"])) == (25, 25)
    assert (status["image_volume"]["pod_count"], len(status["image_volume"]["pods"])) == (30, 30)
    result = {"cache": {"digest": DIGEST_A}, "status": status, "eligible_nodes": [], "excluded_nodes": {}}
    short = module_result.without_node_details(result)["status"]["image_volume"]
    assert short["pulled_nodes"] == names[:image_volume.MAX_LISTED]
    assert [p["name"] for p in short["pods"]] == ["app-%03d" % index for index in range(image_volume.MAX_LISTED)]
    assert (short["pulled_node_count"], short["pod_count"]) == (25, 30)
    assert len(status["image_volume"]["pods"]) == 30  # the full result is left as it was
    resource = summary_status(distribution(status, DIGEST_A), "t")["imageVolume"]
    assert (resource["pulledNodeCnt"], resource["podCnt"]) == (25, 30)
    assert (len(resource["pulledNodes"]), len(resource["pods"])) == (image_volume.MAX_LISTED, image_volume.MAX_LISTED)


def test_cache_info_reads_an_image_volume_cache_from_its_resource_status():
    status = {"phase": "Resolved", "nodeCnt": 3, "nodeInUseCnt": 1, "podRunningCnt": 1, "podOutdatedCnt": 2,
              "imageVolume": {"reference": "r/c@sha256:" + "a" * 64, "pulledNodeCnt": 12, "pulledNodes": ["n1"],
                              "podCnt": 3, "pods": [{"name": "p"}]}}
    report = image_volume_report(status)
    assert report["phase"] == "Resolved" and report["entries"] == []
    assert report["counts"] == {"nodes": 3, "node_in_use": 1, "node_not_in_use": 0, "node_error": 0,
                                "pod_running": 1, "pod_outdated": 2}
    assert report["image_volume"] == {"reference": "r/c@sha256:" + "a" * 64, "pulled_nodes": ["n1"],
                                      "pulled_node_count": 12, "pods": [{"name": "p"}], "pod_count": 3}
