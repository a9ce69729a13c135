"""Which pods a rolling upgrade restarts (distribute/workload_restarts.py) and the wave plan that waits for them
(distribute/rollout.py), without a cluster."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.upgrade_policy import (
    UpgradePolicyError,
    parse_upgrade_policy,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import workload_restarts as restarts
from tests.helpers.distribute import DIGEST_A, DIGEST_B, WORKERS, as_live, moved_to_b, two_passes


def pvc(name, node, digest, namespace="team-a"):
    labels = {"gkm.io/cache": "vector-add", "gkm.io/digest": short_digest(digest)}
    if node:
        labels["gkm.io/node"] = node
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


def pod(name, node, claim, owner=("DaemonSet", "server"), namespace="team-a", terminating=False, phase="Running",
        **labels):
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    if owner:
        metadata["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if terminating:
        metadata["deletionTimestamp"] = "2026-11-25T10:00:00Z"
    return {"metadata": metadata, "status": {"phase": phase},
            "spec": {"nodeName": node, "volumes": [{"name": "k", "persistentVolumeClaim": {"claimName": claim}}]}}


def workloads(*items):
    return parse_upgrade_policy({"restart": list(items)}).restart


PVCS = [pvc("old-1", "gpu-1", DIGEST_A), pvc("new-1", "gpu-1", DIGEST_B), pvc("vector-add", None, DIGEST_A)]


def test_a_deployment_is_found_through_its_replica_set_and_a_bare_pod_has_no_workload():
    assert restarts.pod_workload(pod("p", "n", "c", owner=("ReplicaSet", "web-5d4f8"), **{
        "pod-template-hash": "5d4f8"})) == ("Deployment", "web")
    assert restarts.pod_workload(pod("p", "n", "c", owner=("ReplicaSet", "web-5d4f8"))) == ("ReplicaSet", "web-5d4f8")
    assert restarts.pod_workload(pod("p", "n", "c", owner=None)) is None


def test_only_named_workloads_on_a_previous_digest_pvc_are_outdated():
    pods = [
        pod("ds-old", "gpu-1", "old-1"),
        pod("ds-new", "gpu-1", "new-1"),
        pod("ds-going", "gpu-1", "old-1", terminating=True),
        pod("other-old", "gpu-1", "old-1", owner=("DaemonSet", "other")),
        pod("serving", "gpu-1", "vector-add"),
        pod("finished", "gpu-1", "old-1", phase="Succeeded"),
        pod("elsewhere", "gpu-1", "old-1", namespace="team-b"),
    ]
    found = restarts.outdated_pods(workloads({"kind": "DaemonSet", "name": "server", "namespace": "team-a"}),
                                   DIGEST_B, PVCS, pods)
    assert {node: [(repr(p), p.terminating) for p in found[node]] for node in found} == {
        "gpu-1": [("team-a/ds-going", True), ("team-a/ds-old", False)]}
    assert [repr(p) for p in restarts.evictions_due(found, ["gpu-1"])] == ["team-a/ds-old"]
    assert restarts.evictions_due(found, []) == []
    assert restarts.outdated_pods([], DIGEST_B, PVCS, pods) == {}


@pytest.mark.parametrize("value, message", [
    ({"kind": "Pod", "name": "x"}, r"spec.upgradePolicy.restart\[0\].kind must be one of DaemonSet, Deployment"),
    ({"kind": "DaemonSet"}, r"restart\[0\].name must be the workload's name"),
    ({"kind": "DaemonSet", "name": "x", "namespace": "Bad_NS"}, r"restart\[0\].namespace must be"),
    ({"kind": "DaemonSet", "name": "x", "owner": "y"}, r"restart\[0\] must be a mapping with kind, name"),
])
def test_bad_restart_entries_name_the_field(value, message):
    with pytest.raises(UpgradePolicyError, match=message):
        parse_upgrade_policy({"restart": [value]})
    with pytest.raises(UpgradePolicyError, match=r"restart must be a list of workloads"):
        parse_upgrade_policy({"restart": "server"})


def test_a_node_whose_named_pods_still_read_the_previous_digest_is_restarted_before_the_next_wave():
    spec, cluster = moved_to_b({"maxUnavailable": 1, "restart": [{"kind": "DaemonSet", "name": "server"}]})
    plan, waves = two_passes(spec, cluster)
    first = waves.starting[0]
    # The first node's new slot is Extracted and recorded; the server's pod there still mounts the previous PVC.
    new_objects = as_live([obj for obj in plan.desired if obj["metadata"]["labels"].get("gkm.io/digest")
                           == short_digest(DIGEST_B)], complete_jobs=True, marked=True)
    for kind, objects in new_objects.items():
        cluster.objects[kind] = cluster.objects.get(kind, []) + objects
    previous = next(s for s in plan.slots if s.outcome == planner.PREVIOUS and s.node == first)
    cluster.pods = [pod("server-abc", first, previous.pvc, namespace=previous.namespace)]
    _again, waves = two_passes(spec, cluster)
    assert waves.restart == [first] and [repr(p) for p in waves.evictions] == ["%s/server-abc" % previous.namespace]
    assert waves.states[first] == "upgrading" and waves.starting == [] and waves.to_dict()["evict"]
    # Once its pod is gone the node is upgraded and the next wave starts.
    cluster.pods = []
    _again, waves = two_passes(spec, cluster)
    assert waves.states[first] == "upgraded" and waves.starting == [WORKERS[1]] and waves.evictions == []
