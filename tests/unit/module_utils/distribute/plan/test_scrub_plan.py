"""Scrub planning and rendering, pure: which paths each node's scrub Job removes, and how the Job is confined."""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SCRUB_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import CacheSpec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import scrub
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.render import render_pv

DIGEST = "sha256:" + "ab" * 32
ROOT = "/var/lib/gkm-cluster/caches"
IMAGE = "registry.example/gkm-cluster/tools:1"


def node(name, hostname=None):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": hostname or name}}}


def slot_pv(cache="vector-add", namespace="team-a", node_obj=None, root=ROOT, cache_namespace="team-a"):
    spec = CacheSpec(name=cache, cache_namespace=cache_namespace, namespaces=[namespace], image="r/i@" + DIGEST,
                     digest=DIGEST, size="64Mi", host_path_root=root,
                     access_modes=["ReadWriteOnce"] if node_obj else ["ReadOnlyMany"])
    slot = Slot(cache, cache_namespace, namespace, node_obj["metadata"]["name"] if node_obj else "", DIGEST)
    return render_pv(spec, slot, node_obj, "")


def test_slot_location_splits_a_rendered_path_into_root_and_slot():
    pv = slot_pv(node_obj=node("n1"))
    assert scrub.slot_location(pv) == (ROOT, "team-a/vector-add/team-a/" + "ab" * 32)
    assert scrub.is_slot_pv(pv)


def test_paths_not_laid_out_as_the_labelled_slot_are_left_alone():
    pv = slot_pv(node_obj=node("n1"))
    for path in ("/a/b/c/d", "relative/a/b/c/d/e", "/r/team-a/../team-a/" + "ab" * 32, "",
                 "/var/lib/gkm/team-a/vector-add", "/r/team-a/other/team-a/" + "ab" * 32,
                 "/r/team-a/vector-add/team-a/" + "cd" * 32):
        pv["spec"]["hostPath"]["path"] = path
        assert scrub.slot_location(pv) is None, path
    pv["spec"]["hostPath"]["path"] = "/r/team-a/vector-add/team-a/" + "ab" * 32
    assert scrub.slot_location(pv) == ("/r", "team-a/vector-add/team-a/" + "ab" * 32)
    assert scrub.slot_location(slot_pv(cache_namespace="")) == (ROOT, "_cluster/vector-add/team-a/" + "ab" * 32)
    scrub_pv = scrub.render_scrub(scrub.ScrubTarget("n1", ROOT), "gkm-system", "gkm-scrub-0a1b", IMAGE, 60)[1]
    assert not scrub.is_slot_pv(scrub_pv)


def test_pinned_pvs_go_to_their_node_by_hostname_label_or_name_and_gone_nodes_are_reported():
    nodes = [node("n1", hostname="host-1"), node("n2")]
    by_hostname = slot_pv(node_obj=node("n1", hostname="host-1"))
    by_name = slot_pv(node_obj={"metadata": {"name": "n2"}})
    gone = slot_pv(node_obj=node("n9"))
    assert scrub.pv_nodes(by_hostname, nodes) == (["n1"], [])
    assert scrub.pv_nodes(by_name, nodes) == (["n2"], [])
    assert scrub.pv_nodes(gone, nodes) == ([], ["n9"])


def test_a_pv_without_node_affinity_is_scrubbed_on_every_node_as_one_that_only_may_hold_it():
    assert scrub.pv_nodes(slot_pv(), [node("n2"), node("n1")]) == (["n1", "n2"], [])
    targets, _left = scrub.plan_scrub([slot_pv()], [node("n1"), node("n2")])
    assert [(t.node, t.pinned) for t in targets] == [("n1", False), ("n2", False)]
    pinned, _left = scrub.plan_scrub([slot_pv(), slot_pv("b", node_obj=node("n1"))], [node("n1"), node("n2")])
    assert [(t.node, t.pinned) for t in pinned] == [("n1", True), ("n2", False)]


def test_plan_groups_paths_by_node_and_root():
    n1, n2 = node("n1"), node("n2")
    pvs = [slot_pv("a", node_obj=n1), slot_pv("b", node_obj=n1), slot_pv("a", node_obj=n2),
           slot_pv("c", node_obj=n1, root="/other"), slot_pv("a", node_obj=node("gone"))]
    targets, unreachable = scrub.plan_scrub(pvs, [n1, n2])
    assert [(t.node, t.root, len(t.paths)) for t in targets] == [("n1", "/other", 1), ("n1", ROOT, 2), ("n2", ROOT, 1)]
    assert targets[1].pvs == {pvs[0]["metadata"]["name"], pvs[1]["metadata"]["name"]}
    assert unreachable == ["node gone is gone: %s/team-a/a/team-a/%s (PV %s) stays on its disk" % (
        ROOT, "ab" * 32, pvs[4]["metadata"]["name"])]


def test_a_scrub_is_named_by_its_random_part_alone():
    assert scrub.scrub_name("0a1b2c3d4e") == "gkm-scrub-0a1b2c3d4e"


def test_the_system_namespace_a_scrub_creates_admits_its_pod_and_is_ours():
    labels = scrub.system_namespace("gkm-system")["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/managed-by": "gkm.cluster", "pod-security.kubernetes.io/enforce": "baseline"}


def test_rendered_scrub_reaches_the_root_through_its_own_pv_pinned_to_the_node():
    target = scrub.ScrubTarget("gpu-1", ROOT)
    target.add("team-a/vector-add/team-a/" + "ab" * 32, "pv-1", True)
    pvc, pv, job = scrub.render_scrub(target, "gkm-system", "gkm-scrub-0a1b", IMAGE, 120)
    assert {obj["metadata"]["name"] for obj in (pvc, pv, job)} == {"gkm-scrub-0a1b"}
    assert pvc["metadata"]["namespace"] == job["metadata"]["namespace"] == "gkm-system"
    assert pv["spec"]["hostPath"] == {"path": ROOT, "type": "DirectoryOrCreate"}
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]
    # No uid until the claim exists; then that claim's alone.
    assert pv["spec"]["claimRef"] == {"namespace": "gkm-system", "name": pvc["metadata"]["name"]}
    created = dict(pvc, metadata=dict(pvc["metadata"], uid="4d1c-uid"))
    assert scrub.bind_to_claim(pv, created)["spec"]["claimRef"] == {
        "namespace": "gkm-system", "name": "gkm-scrub-0a1b", "uid": "4d1c-uid"}
    assert "uid" not in pv["spec"]["claimRef"]
    assert pvc["spec"]["volumeName"] == pv["metadata"]["name"] and pvc["spec"]["storageClassName"] == ""
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-1"
    assert all("hostPath" not in volume for volume in pod["volumes"])
    assert pod["volumes"] == [{"name": "root", "persistentVolumeClaim": {"claimName": pvc["metadata"]["name"]}}]
    container = pod["containers"][0]
    assert container["image"] == IMAGE
    assert container["command"][-3:] == ["--root", scrub.SCRUB_MOUNT_PATH, "team-a/vector-add/team-a/" + "ab" * 32]
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert job["spec"]["activeDeadlineSeconds"] == 120
    assert job["metadata"]["labels"][SCRUB_LABEL] == "true"


def test_failure_message_prefers_the_container_termination_message():
    job = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                                      "message": "Job has reached the specified backoff limit"}]}}
    pod = {"status": {"containerStatuses": [{"state": {"terminated": {
        "exitCode": 1, "message": '{"refused": {"a/b/c/d": "a/b: not a directory or a symbolic link"}}\n'}}}]}}
    assert scrub.failure_message(job, [pod]) == 'exit 1: {"refused": {"a/b/c/d": "a/b: not a directory or a ' \
                                                'symbolic link"}}'
    assert scrub.failure_message(job, []) == "BackoffLimitExceeded: Job has reached the specified backoff limit"
    refused = {"reason": "FailedCreate", "message": 'pods "x" is forbidden: violates PodSecurity "restricted:latest"'}
    assert scrub.failure_message(job, [], [{"reason": "SuccessfulCreate"}, refused]) == (
        'pod refused: pods "x" is forbidden: violates PodSecurity "restricted:latest"')
    assert scrub.waiting_reason([], [refused]).startswith("pod refused: ")


def test_waiting_reason_names_what_the_pod_waits_for():
    pod = {"status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {
        "reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}}
    assert scrub.waiting_reason([pod]) == "ImagePullBackOff Back-off pulling image"
    assert scrub.waiting_reason([]) == "no pod yet"
