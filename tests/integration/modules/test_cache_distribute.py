"""cache_distribute and cache_info against the real local control plane (kwok nodes) and registry."""

import time
import uuid

import pytest
from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_kubeconfig
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import gather_facts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import cache_spec_from_params
from tests.helpers import job_pod_stages as stages
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, AuditWrites, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
WORKERS = ["gkm-gpu-worker-1", "gkm-gpu-worker-2", "gkm-gpu-worker-3"]
EXTRACT_IMAGE = "gkm-cluster-tools:test"


@pytest.fixture(scope="module")
def images(registry):
    v1 = kcache_images.build_image(registry.host, "dist/vector-add", "v1",
                                   kcache_images.CacheSpec(backend="hip", compiled=True))
    v2 = kcache_images.build_image(registry.host, "dist/vector-add", "v2",
                                   kcache_images.CacheSpec(backend="hip", seed=7, compiled=True))
    return v1, v2


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def distribute(sim, check=False, diff=False, **args):
    args.setdefault("registry_plain_http", True)
    args.setdefault("extract_image", EXTRACT_IMAGE)
    args.setdefault("host_path_root", NODE_DISK)
    # These tests count the slots' objects; test_serving_pvc.py covers the serving PVC.
    args.setdefault("serving_pvc", False)
    # They read the per-node entries; the rerun below checks the default, bounded result.
    args.setdefault("node_details", True)
    return run_module("cache_distribute", sim.kubeconfig, check=check, diff=diff, **args)


def only_nodes(names):
    """Required node affinity to the named nodes: other sessions may add hundreds of nodes to the cluster."""
    # A metadata.name field selector takes exactly one value, so one term (ORed) per node.
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]} for name in names]}}}


def tolerated(nodes=None, labels=None, **args):
    template = {"spec": {"tolerations": [GPU_TOLERATION], "affinity": only_nodes(WORKERS if nodes is None else nodes)}}
    if labels:
        template["metadata"] = {"labels": labels}
    return dict(args, pod_template=template)


def untolerated(**args):
    return dict(args, pod_template={"spec": {"affinity": only_nodes(WORKERS)}})


@pytest.fixture
def gpu_node(kube):
    """Adds one kwok GPU worker (raw JSON: the typed client rejects a Node without full nodeInfo)."""
    from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
    from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

    raw = Kube(kube)
    added = []

    def add(name):
        node = gpu_nodes.render_node(name, {"vendor": "amd"})
        raw.request("POST", "/api/v1/nodes", body=node)
        added.append(name)

        def ready_and_untainted():
            live = raw.get("Node", name)
            ready = any(c["type"] == "Ready" and c["status"] == "True"
                        for c in (live.get("status") or {}).get("conditions") or [])
            taints = {t["key"] for t in (live.get("spec") or {}).get("taints") or []}
            return ready and not any(key.startswith("node.kubernetes.io/") for key in taints)

        wait_until("node %s ready" % name, ready_and_untainted)
        return name

    def remove(name):
        raw.delete("Node", name)
        added.remove(name)

    add.remove = remove
    yield add
    for name in added:
        raw.delete("Node", name)


def selected(kube, kind, selector):
    core, batch = client.CoreV1Api(kube), client.BatchV1Api(kube)
    listing = {
        "pvc": lambda: core.list_persistent_volume_claim_for_all_namespaces(label_selector=selector),
        "pv": lambda: core.list_persistent_volume(label_selector=selector),
        "job": lambda: batch.list_job_for_all_namespaces(label_selector=selector),
    }[kind]()
    return listing.items


def cache_objects(kube, name):
    selector = "gkm.io/cache=%s" % name
    return {kind: selected(kube, kind, selector) for kind in ("pvc", "pv", "job")}


def wait_until(what, check, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError("timed out waiting for %s" % what)


def remove(sim, **args):
    result = distribute(sim, state="absent", force=True, **{k: v for k, v in args.items() if k in (
        "name", "namespace", "scope")})
    assert not result.get("failed"), result


def workload_pod(kube, namespace, claim, node):
    pod = {"metadata": {"name": unique("app"), "namespace": namespace},
           "spec": {"nodeName": node, "tolerations": [GPU_TOLERATION],
                    "containers": [{"name": "app", "image": "app:1", "volumeMounts": [
                        {"name": "k", "mountPath": "/root/.triton"}]}],
                    "volumes": [{"name": "k", "persistentVolumeClaim": {"claimName": claim}}]}}
    created = client.CoreV1Api(kube).create_namespaced_pod(namespace, pod)
    wait_until("pod running", lambda: client.CoreV1Api(kube).read_namespaced_pod(
        created.metadata.name, namespace).status.phase == "Running")
    return created.metadata.name


@pytest.fixture
def second_namespace(kube):
    name = unique("t-dist-b")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


# ---------------------------------------------------------------- the four scenarios


@pytest.mark.parametrize(("scope", "mode"), [pytest.param("namespaced", "rwo", marks=pytest.mark.matrix),
                                             ("namespaced", "rox"), ("cluster", "rwo"), ("cluster", "rox")])
def test_four_scenarios_converge_and_rerun_writes_nothing(sim, kube, images, namespace, second_namespace, scope,
                                                          mode):
    name = unique("va")
    args = tolerated(name=name, image=images[0].ref, wait=True, wait_timeout=120)
    if scope == "cluster":
        args.update(scope="cluster", workload_namespaces=[namespace, second_namespace])
    else:
        args.update(namespace=namespace)
    if mode == "rox":
        # hostPath PVs here (no provisioner): allowed explicitly, the objects on kwok nodes are what is checked.
        args.update(access_modes=["ReadWriteOnce", "ReadOnlyMany"], host_path_read_only_many=True)
    namespaces = args.get("workload_namespaces") or [namespace]
    per_namespace = 3 if mode == "rwo" else 1
    try:
        result = distribute(sim, **args)
        assert result["changed"] is True and not result.get("failed"), result
        assert result["cache"]["digest"] == images[0].digest
        assert result["eligible_nodes"] == WORKERS
        assert any("untolerated taint node-role.kubernetes.io/control-plane" in reason
                   for reason in result["excluded_nodes"]["gkm-control-plane"])
        # The Jobs filled the nodes' stores from the system namespace (system_namespace_jobs) and went, with the PVC
        # and PV each wrote through (labelled gkm.io/store), once this waited run marked the slots extracted.
        found = cache_objects(kube, name)
        store = [obj for items in found.values() for obj in items if "gkm.io/store" in obj.metadata.labels]
        objects = {kind: [obj for obj in items if "gkm.io/store" not in obj.metadata.labels]
                   for kind, items in found.items()}
        assert all(obj.metadata.deletion_timestamp for obj in store), [obj.metadata.name for obj in store]
        assert objects["job"] == []
        assert len(objects["pvc"]) == len(objects["pv"]) == per_namespace * len(namespaces)
        for pvc in objects["pvc"]:
            labels = pvc.metadata.labels
            assert labels["app.kubernetes.io/managed-by"] == "gkm.cluster"
            assert labels["gkm.io/cache-namespace"] == ("" if scope == "cluster" else namespace)
            assert labels["gkm.io/digest"] == images[0].digest.split(":")[1][:12]
            assert pvc.metadata.namespace in namespaces
            assert pvc.status.phase == "Bound"
            if mode == "rox":
                assert pvc.metadata.name == name
            else:
                assert pvc.metadata.name.startswith("%s-%s-" % (name, labels["gkm.io/node"]))
        for pv in objects["pv"]:
            assert pv.spec.host_path.path.endswith("/_store/" + images[0].digest.split(":")[1])
            assert (pv.spec.node_affinity is not None) == (mode == "rwo")
        status = result["status"]
        assert status["phase"] == "Extracted"
        assert {e["phase"] for e in status["entries"]} == {"Extracted"}
        assert status["counts"] == {"nodes": 3, "node_in_use": 0, "node_not_in_use": 3, "node_error": 0,
                                    "pod_running": 0, "pod_outdated": 0}

        audit = AuditWrites()
        again = distribute(sim, **{**args, "node_details": False})
        assert again["changed"] is False and again["api_writes"] == 0, again["plan"]
        assert audit.since(name) == []
        assert again["status"]["counts"] == status["counts"]
        # Without node_details: no per-node list, the problems (none) and one line per exclusion reason.
        assert "entries" not in again["status"] and "eligible_nodes" not in again and "excluded_nodes" not in again
        assert (again["status"]["problems"], again["status"]["problem_count"]) == ([], 0)
        assert sum(line["nodeCnt"] for line in again["excluded_reasons"]) == len(result["excluded_nodes"])
        assert again["duration_seconds"] < 3

        info = run_module("cache_info", sim.kubeconfig, name=name,
                          **({} if scope == "cluster" else {"namespace": namespace}))
        assert info["changed"] is False
        assert info["caches"][0]["status"]["phase"] == "Extracted"
    finally:
        remove(sim, **args)
    assert cache_objects(kube, name)["pvc"] == [] or all(
        p.metadata.deletion_timestamp for p in cache_objects(kube, name)["pvc"])


# ---------------------------------------------------------------- day 2


def test_nodes_joining_and_leaving(sim, kube, images, namespace, gpu_node):
    name = unique("va")
    late = "late-%s" % uuid.uuid4().hex[:6]
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=120,
                     nodes=[*WORKERS, late])
    try:
        assert distribute(sim, **args)["changed"] is True
        added = [gpu_node(late)]
        joined = distribute(sim, **args)
        # The slot's PV and PVC, and the Job filling the node's store with the PV and PVC it writes through.
        assert joined["plan"]["summary"] == {"create": {"PersistentVolume": 2, "PersistentVolumeClaim": 2, "Job": 1}}
        assert joined["status"]["counts"]["nodes"] == 4
        assert {p.metadata.labels["gkm.io/node"] for p in cache_objects(kube, name)["pvc"]} == {*WORKERS, *added}

        gpu_node.remove(added[0])
        left = distribute(sim, **args)
        assert left["plan"]["summary"] == {"delete": {"PersistentVolume": 1, "PersistentVolumeClaim": 1}}
        assert all(added[0] in a["reason"] for a in left["plan"]["actions"])
        assert left["status"]["counts"]["nodes"] == 3
    finally:
        remove(sim, **args)


def test_workload_namespace_removed_is_pruned(sim, kube, images, namespace, second_namespace):
    name = unique("va")
    args = tolerated(name=name, scope="cluster", workload_namespaces=[namespace, second_namespace],
                     image=images[0].ref, wait=True, wait_timeout=120)
    try:
        assert distribute(sim, **args)["changed"] is True
        narrowed = distribute(sim, **{**args, "workload_namespaces": [namespace]})
        # The namespace's slots; the nodes' stores stay for the other namespace's.
        assert narrowed["plan"]["summary"] == {"delete": {"PersistentVolume": 3, "PersistentVolumeClaim": 3}}
        assert {p.metadata.namespace for p in cache_objects(kube, name)["pvc"]
                if not p.metadata.deletion_timestamp} == {namespace}
    finally:
        remove(sim, **args)


def test_image_change_keeps_a_mounted_old_pvc_as_outdated_until_unused(sim, kube, images, namespace):
    name = unique("va")
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=120)
    try:
        first = distribute(sim, **args)
        mounted = next(e for e in first["status"]["entries"] if e["node"] == WORKERS[0])["pvc"]
        pod = workload_pod(kube, namespace, mounted, WORKERS[0])
        running = distribute(sim, **args)
        assert running["status"]["counts"]["pod_running"] == 1
        assert running["status"]["counts"]["node_in_use"] == 1
        assert running["status"]["phase"] == "Running"
        # The planner holds the cache's objects and the pods without managedFields (a large part of each object).
        facts = gather_facts(Kube(api_client_from_kubeconfig(sim.kubeconfig)), cache_spec_from_params(
            dict(args, extract_image=EXTRACT_IMAGE, serving_pvc=False)))
        held = [obj for kind in ("PersistentVolume", "PersistentVolumeClaim", "Job") for obj in facts.objects[kind]]
        assert len(held) == 6 and pod in [p["metadata"]["name"] for p in facts.pods], (len(held), facts.pods)
        assert [obj["metadata"]["name"] for obj in held + facts.pods if "managedFields" in obj["metadata"]] == []
        core = client.CoreV1Api(kube)
        assert core.read_namespaced_persistent_volume_claim(mounted, namespace).metadata.managed_fields

        changed = distribute(sim, **{**args, "image": images[1].ref})
        assert changed["cache"]["digest"] == images[1].digest
        # Make before break: the plan keeps the old slots; the wait releases the unmounted ones once the new PVCs
        # are marked extracted, in the same run.
        assert changed["plan"]["summary"] == {"create": {"PersistentVolume": 6, "PersistentVolumeClaim": 6, "Job": 3}}
        live = sorted(p.metadata.name for p in cache_objects(kube, name)["pvc"]
                      if not p.metadata.deletion_timestamp and "gkm.io/store" not in p.metadata.labels)
        assert live == sorted([mounted] + [e["pvc"] for e in changed["status"]["entries"] if e["phase"] == "Extracted"])
        outdated = [e for e in changed["status"]["entries"] if e["phase"] == "Outdated"]
        assert [e["pvc"] for e in outdated] == [mounted]
        assert outdated[0]["mounted_by"] == ["%s/%s" % (namespace, pod)]
        assert changed["status"]["counts"]["pod_outdated"] == 1
        assert changed["status"]["phase"] == "Outdated"
        assert client.CoreV1Api(kube).read_namespaced_persistent_volume_claim(mounted, namespace)

        client.CoreV1Api(kube).delete_namespaced_pod(pod, namespace, grace_period_seconds=0)
        wait_until("pod gone", lambda: not client.CoreV1Api(kube).list_namespaced_pod(
            namespace, field_selector="metadata.name=%s" % pod).items)
        released = distribute(sim, **{**args, "image": images[1].ref})
        assert released["plan"]["summary"] == {"delete": {"PersistentVolume": 1, "PersistentVolumeClaim": 1}}
        assert released["status"]["counts"]["pod_outdated"] == 0
        assert released["status"]["phase"] == "Extracted"
    finally:
        remove(sim, **args)


# ---------------------------------------------------------------- taints, failures, check mode, bad input


def test_gpu_taint_without_toleration_is_diagnosed_then_converges_with_it(sim, kube, images, namespace):
    name = unique("va")
    rwo = untolerated(name=name, namespace=namespace, image=images[0].ref, wait=True, wait_timeout=60)
    try:
        # Not placeable yet is GKM's Pending with the reason and the fix, not a failed run (and no wait).
        unplaced = distribute(sim, **rwo)
        assert not unplaced.get("failed"), unplaced.get("msg")
        assert unplaced["status"]["phase"] == "Pending" and unplaced["status"]["entries"] == []
        assert unplaced["status"]["unplaced"].startswith("no node is eligible for the cache yet: ")
        assert "untolerated taint gpu=true:NoSchedule" in unplaced["status"]["unplaced"]
        assert "pod_template.spec.tolerations" in unplaced["status"]["unplaced"]
        assert cache_objects(kube, name) == {"pvc": [], "pv": [], "job": []}

        rox = {**rwo, "access_modes": ["ReadOnlyMany"], "host_path_read_only_many": True, "wait": False}
        stuck = distribute(sim, **rox)
        assert stuck["changed"] is True

        def diagnosed():
            info = run_module("cache_info", sim.kubeconfig, name=name, namespace=namespace)
            unschedulable = info["caches"][0]["status"]["unschedulable"] if info.get("caches") else []
            return unschedulable and "untolerated taint" in unschedulable[0]["message"]

        wait_until("scheduler diagnostics", diagnosed, timeout=30)
        pending = distribute(sim, **rox)
        entry = pending["status"]["entries"][0]
        assert entry["phase"] == "Pending" and entry["fix"] == ["pod_template.spec.tolerations"]
        assert "untolerated taint" in entry["message"]  # the scheduler's own words
        assert pending["status"]["unschedulable"][0]["untolerated_taints"]["gpu=true:NoSchedule"] == 3

        fixed = distribute(sim, **tolerated(**{**rox, "wait": True, "wait_timeout": 120}))
        assert fixed["plan"]["summary"]["replace"] == {"Job": 1}
        assert fixed["status"]["phase"] == "Extracted"
    finally:
        remove(sim, name=name, namespace=namespace)


def job_failure_reasons(kube, name):
    return {c.reason for job in cache_objects(kube, name)["job"] for c in job.status.conditions or []
            if c.type == "Failed" and c.status == "True"}


def test_extractor_refusal_fails_the_job_at_once_and_its_message_is_the_node_status(sim, kube, images, namespace):
    name = unique("va")
    # The kwok stage selects the Jobs' pods by a pod template label, which the system namespace refuses: the Jobs
    # in the cache's namespace (the layout system_namespace_jobs=false keeps).
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, labels={stages.REFUSAL_LABEL: "true"},
                     wait=True, wait_timeout=120, system_namespace_jobs=False)
    try:
        with stages.stage(kube, stages.REFUSAL):
            started = time.monotonic()
            result = distribute(sim, **args)
            elapsed = time.monotonic() - started
        assert not result.get("failed"), result.get("msg")
        entries = result["status"]["entries"]
        assert {(e["phase"], e["reason"]) for e in entries} == {("Error", "ExtractionRefused")}
        assert sorted(e["message"] for e in entries) == [
            "extraction failed on node %s: %s" % (node, stages.REFUSAL_MESSAGE) for node in WORKERS]
        assert result["status"]["counts"]["node_error"] == 3
        assert result["status"]["phase"] == "Error"
        # The podFailurePolicy failed each Job at its first refusal: no retries (backoff_limit is 2).
        assert job_failure_reasons(kube, name) == {"PodFailurePolicy"}
        assert elapsed < 60, elapsed
        info = run_module("cache_info", sim.kubeconfig, name=name, namespace=namespace)
        assert {e["message"] for e in info["caches"][0]["status"]["entries"]} == {e["message"] for e in entries}
    finally:
        remove(sim, name=name, namespace=namespace)


def test_tools_image_that_cannot_be_pulled_is_an_error_at_once_not_after_the_wait(sim, kube, images, namespace):
    name = unique("va")
    # The kwok stage selects by a pod template label: the Jobs in the cache's namespace, as in the test above.
    args = tolerated(name=name, namespace=namespace, image=images[0].ref, labels={stages.PULL_FAILURE_LABEL: "true"},
                     wait=True, wait_timeout=300, system_namespace_jobs=False)
    try:
        with stages.stage(kube, stages.PULL_FAILURE):
            started = time.monotonic()
            result = distribute(sim, **args)
            elapsed = time.monotonic() - started
        assert not result.get("failed"), result
        assert elapsed < 60, elapsed  # the wait stopped as soon as every node reported the failure
        entries = sorted(result["status"]["entries"], key=lambda e: e["node"])
        assert [(e["node"], e["phase"], e["reason"]) for e in entries] == [
            (node, "Error", "ToolsImageNotPullable") for node in WORKERS]
        assert entries[0]["message"] == (
            "cannot pull the tools image %s on node %s: %s; build and push it (make images REGISTRY=...) or set "
            "gkm_tools_image / gkm_registry_mirror" % (EXTRACT_IMAGE, WORKERS[0], stages.PULL_MESSAGE))
        assert entries[0]["fix"] == ["extract_image (gkm_tools_image)", "gkm_registry_mirror"]
    finally:
        remove(sim, name=name, namespace=namespace)


def test_check_mode_and_diff_show_the_plan_and_write_nothing(sim, kube, images, namespace):
    name = unique("va")
    audit = AuditWrites()
    result = distribute(sim, check=True, diff=True, **tolerated(name=name, namespace=namespace, image=images[0].ref))
    assert result["changed"] is True and result["api_writes"] == 0
    created = dict(result["plan"]["summary"]["create"])
    created.pop("Namespace", None)  # the system namespace, when no run made it yet
    # Per node: the slot's PV and PVC, and the Job filling the node's store with the PV and PVC it writes through.
    assert created == {"PersistentVolume": 6, "PersistentVolumeClaim": 6, "Job": 3}
    assert len(result["diff"]) == sum(result["plan"]["summary"]["create"].values())
    assert all(d["before"] == {} for d in result["diff"])
    assert cache_objects(kube, name) == {"pvc": [], "pv": [], "job": []}
    assert all("dryRun=All" in write for write in audit.since(name))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"name": "Bad_Name"}, "not a valid DNS-1123 label"),
        ({"access_modes": ["ReadOnce"]}, "ReadOnce"),
        ({"workload_namespaces": ["x"]}, "workload_namespaces is only for scope: cluster"),
        ({"namespace": "does-not-exist-42"}, "do not exist: create them first or set create_namespaces: true"),
        ({"image": "IMAGE"}, "cannot resolve its digest"),
    ],
)
def test_bad_input_fails_clearly_and_changes_nothing(sim, kube, images, namespace, overrides, message):
    name = unique("va")
    args = tolerated(name=name, namespace=namespace, image=images[0].ref)
    args.update(overrides)
    if args["image"] == "IMAGE":
        args["image"] = "%s/dist/vector-add:missing" % sim.registry
    result = distribute(sim, **args)
    assert result["failed"] is True and message in result["msg"], result
    assert cache_objects(kube, name) == {"pvc": [], "pv": [], "job": []}
