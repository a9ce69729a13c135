"""What one cache says about each node: slots, GPUs, and why a GPU node does not get the cache."""

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, scheduling
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_status
from tests.helpers.distribute import (
    CSI_CLASS,
    DIGEST_A,
    DIGEST_B,
    as_live,
    facts,
    make_spec,
    mixed_nodes,
    pod,
    reconcile_facts,
)

WORKER = "gkm-gpu-worker-1"


def test_every_reason_the_planner_gives_has_a_code():
    spec = make_spec(node_selector={})
    eligibility = scheduling.node_eligibility(spec, mixed_nodes())
    codes = {node: node_status.exclusion_code(reasons) for node, reasons in eligibility.excluded.items()}
    assert all(node_status.reason_code(r) for reasons in eligibility.excluded.values() for r in reasons)
    assert codes == {"gkm-control-plane": "NoGPU", "tainted-1": "UntoleratedTaint", "nv-1": "Incompatible",
                     "cpu-1": "NoGPU", "cpu-2": "NoGPU", "broken-1": "GPULabelsUnusable"}
    selected = scheduling.node_eligibility(make_spec(node_selector={"pool": "a"}), mixed_nodes())
    assert {node_status.exclusion_code(r) for r in selected.excluded.values()} == {"NotSelected"}


def test_gpus_come_from_labels_and_capacity():
    nodes = {n["metadata"]["name"]: n for n in mixed_nodes()}
    assert node_status.node_gpus(nodes["nv-1"]) == [{"gpuType": "cuda 90", "ids": list(range(8))}]
    assert node_status.node_gpus(nodes["cpu-1"]) == []
    labels = dict(nodes["nv-1"]["metadata"]["labels"], **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                                          "nvidia.com/cuda.driver-version.full": "570.124.06"})
    named = dict(nodes["nv-1"], metadata=dict(nodes["nv-1"]["metadata"], labels=labels))
    assert node_status.node_gpus(named) == [{"gpuType": "NVIDIA-H100-80GB-HBM3", "driverVersion": "570.124.06",
                                             "ids": list(range(8))}]


def test_rwo_cache_per_node_states_and_the_gpu_nodes_that_do_not_get_it():
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"], name="vector-add")
    cluster_facts = facts(nodes=mixed_nodes())
    plan, entries = reconcile_facts(spec, cluster_facts)
    slot = next(s for s in plan.slots if s.node == WORKER and s.namespace == "team-a")
    cluster_facts.pods = [pod("app", "team-a", slot.pvc, node=WORKER)]
    states = node_status.node_cache_states(spec, plan.eligibility, entries, cluster_facts.nodes, cluster_facts.pods)

    # Nodes without GPUs that do not get the cache have no entry; every GPU node has one.
    assert sorted(states) == ["broken-1", "gkm-gpu-worker-1", "gkm-gpu-worker-2", "gkm-gpu-worker-3", "nv-1",
                              "tainted-1"]
    worker = states[WORKER][DIGEST_A]
    assert worker["state"] == "Running" and worker["compatibleGPUs"] == [0, 1]
    assert sorted(worker["pvcStatus"]) == ["team-a", "team-b"]
    team_a = worker["pvcStatus"]["team-a"]
    assert (team_a["pvcName"], team_a["jobName"], team_a["pvName"], team_a["pvcOwner"]) == (
        slot.pvc, slot.job, slot.pv, "Agent")
    assert team_a["conditions"] == [{"type": "Running", "status": "True", "reason": "Running"}]
    assert worker["pvcStatus"]["team-b"]["conditions"][0]["type"] == "Extracted"
    assert worker["pods"] == [{"podNamespace": "team-a", "podName": "app"}]
    assert states["gkm-gpu-worker-2"][DIGEST_A]["state"] == "Extracted"

    tainted = states["tainted-1"][DIGEST_A]
    assert (tainted["state"], tainted["reason"], tainted["untoleratedTaints"]) == (
        "Excluded", "UntoleratedTaint", ["maintenance=yes:NoSchedule"])
    assert "spec.podTemplate.spec.tolerations" in tainted["message"] and "pvcStatus" not in tainted
    assert tainted["compatibleGPUs"] == [0, 1, 2, 3]
    nv = states["nv-1"][DIGEST_A]
    assert (nv["state"], nv["reason"], nv["incompatibleGPUs"]) == ("Incompatible", "Incompatible", list(range(8)))
    assert states["broken-1"][DIGEST_A]["reason"] == "GPULabelsUnusable"


def test_rox_shared_pvc_is_listed_on_every_node_that_gets_the_cache():
    spec = make_spec(access_modes=["ReadOnlyMany"])
    cluster_facts = facts(storage_class=CSI_CLASS)
    plan, entries = reconcile_facts(spec, cluster_facts)
    states = node_status.node_cache_states(spec, plan.eligibility, entries, cluster_facts.nodes, [])
    assert sorted(states) == ["gkm-gpu-worker-1", "gkm-gpu-worker-2", "gkm-gpu-worker-3"]
    for digests in states.values():
        assert digests[DIGEST_A]["pvcStatus"]["team-a"]["pvcName"] == "vector-add"
        assert digests[DIGEST_A]["pvcStatus"]["team-a"]["pvcOwner"] == "Operator"


def test_an_old_digest_kept_for_its_pods_is_its_own_entry():
    old_spec, cluster_facts = make_spec(DIGEST_A), facts()
    old_plan = planner.plan(old_spec, cluster_facts)
    slot = next(s for s in old_plan.slots if s.node == WORKER)
    cluster_facts = facts(objects=as_live(old_plan.desired, complete_jobs=True),
                          pods=[pod("app", "team-a", slot.pvc, node=WORKER)])
    spec = make_spec(DIGEST_B)
    plan, entries = reconcile_facts(spec, cluster_facts)
    states = node_status.node_cache_states(spec, plan.eligibility, entries, cluster_facts.nodes, cluster_facts.pods)
    old = states[WORKER][DIGEST_A[7:19]]
    assert old["state"] == "Outdated" and old["pods"] == [{"podNamespace": "team-a", "podName": "app"}]
    # The new digest was not extracted when the plan was made: the old slot is kept for its node as well.
    condition = old["pvcStatus"]["team-a"]["conditions"][0]
    assert condition["reason"] == planner.KEPT_UNTIL_REPLACED
    assert condition["message"] == ("kept until digest bbbbbbbbbbbb is extracted on node gkm-gpu-worker-1 "
                                    "(make before break); mounted by app")
    assert states[WORKER][DIGEST_B]["state"] == "Extracted"
