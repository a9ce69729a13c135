"""mountMode imageVolume on the reconcile's side (distribute/image_volume.py, spec, planner, resource status):
nothing planned, a status saying so, without a cluster."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute import image_volume
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import plan as planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import spec as cache_spec
from tests.unit.test_plan import DIGEST_A, WORKERS, as_live, default_nodes, facts, make_spec, pod, verbs


def image_volume_spec(**params):
    return make_spec(mount_mode="imageVolume", **params)


@pytest.mark.parametrize("image, expected", [
    ("registry.local:5000/caches/vector-add:v1", "registry.local:5000/caches/vector-add@" + DIGEST_A),
    ("registry.local:5000/caches/vector-add", "registry.local:5000/caches/vector-add@" + DIGEST_A),
    ("quay.io/x/y@sha256:" + "0" * 64, "quay.io/x/y@" + DIGEST_A),
    ("localhost:5000/y:v1@sha256:" + "0" * 64, "localhost:5000/y@" + DIGEST_A),
])
def test_the_reference_is_pinned_to_the_resolved_digest(image, expected):
    assert image_volume.pinned_reference(image, DIGEST_A) == expected


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
    status = image_volume.cache_status(spec, planner.plan(spec, facts(nodes)).eligibility)
    assert status["phase"] == image_volume.RESOLVED and status["counts"]["nodes"] == len(WORKERS)
    assert [(e["node"], e["phase"]) for e in status["entries"]] == [("nv-1", "Incompatible")]
    assert status["image_volume"] == {"reference": "registry.local/caches/vector-add@" + DIGEST_A,
                                      "compatible_nodes": len(WORKERS)}


def test_the_resource_maps_mount_mode_and_its_status_is_ready_with_the_reference_and_the_targets():
    params = cache_cr.distribute_params({"kind": "GKMCache", "metadata": {"name": "c", "namespace": "n"},
                                         "spec": {"image": "i", "mountMode": "imageVolume"}}, {})
    assert params["mount_mode"] == "imageVolume"
    unset = {"kind": "GKMCache", "metadata": {"name": "c", "namespace": "n"}, "spec": {"image": "i"}}
    assert cache_cr.distribute_params(unset, {})["mount_mode"] == "PVC"
    assert cache_cr.distribute_params(unset, {"mount_mode": "imageVolume"})["mount_mode"] == "imageVolume"
    spec = image_volume_spec()
    status = image_volume.cache_status(spec, planner.plan(spec, facts()).eligibility)
    result = {"cache": {"digest": DIGEST_A, "targets": spec.targets}, "status": status}
    body = cache_cr.summary_status(result, "t")
    ready = body["conditions"][0]
    assert (body["phase"], ready["status"], ready["reason"]) == ("Resolved", "True", "Resolved")
    assert "registry.local/caches/vector-add@" + DIGEST_A in ready["message"] and "3 node(s)" in ready["message"]
    assert body["targets"] == [{"backend": "hip", "arch": "gfx90a", "warpSize": 64}]
