"""The distribution planner: eligibility, rendered objects and day-2 actions, without a cluster."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.contract import naming
from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import resource_terms
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
    SPEC_HASH_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.trimmed import (
    node_facts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import registry_secret
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import spec as cache_spec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, render, scheduling, scrub
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_status
from tests.helpers.distribute import (
    CSI_CLASS,
    DIGEST_A,
    DIGEST_B,
    GPU_TOLERATION,
    WORKERS,
    as_live,
    by_kind,
    default_nodes,
    facts,
    is_access,
    make_spec,
    merged,
    pod,
    verbs,
)

# ---------------------------------------------------------------- eligibility


def test_gpu_taint_without_toleration_leaves_no_eligible_node_and_names_the_taint():
    spec = make_spec(pod_template={})
    result = planner.plan(spec, facts())
    assert result.eligibility.eligible == []
    assert result.actions == []
    assert result.eligibility.untolerated_taints == {"gpu=true:NoSchedule": 3,
                                                     "node-role.kubernetes.io/control-plane:NoSchedule": 1}
    for worker in WORKERS:
        reasons = result.eligibility.excluded[worker]
        assert reasons == ["untolerated taint gpu=true:NoSchedule (add a toleration to pod_template.spec.tolerations)"]


def test_control_plane_is_excluded_for_its_taint_and_missing_gpu_labels():
    result = planner.plan(make_spec(), facts())
    assert [n["metadata"]["name"] for n in result.eligibility.eligible] == WORKERS
    reasons = result.eligibility.excluded["gkm-control-plane"]
    assert any("node-role.kubernetes.io/control-plane:NoSchedule" in r for r in reasons)
    assert any("not a GPU node" in r for r in reasons)
    assert result.eligibility.incompatible == []


def test_incompatible_gpus_are_skipped_or_fail_or_ignored():
    nodes = default_nodes([{"name": "nv", "count": 1, "vendor": "nvidia", "arch": "90"}])
    result = planner.plan(make_spec(), facts(nodes))
    assert result.eligibility.incompatible == ["nv-1"]
    assert "cuda/90/32 does not match the image's targets (hip/gfx90a/64)" in result.eligibility.excluded["nv-1"][0]
    with pytest.raises(planner.PlanError, match=r"compatibility is 'fail'.*nv-1"):
        planner.plan(make_spec(compatibility="fail"), facts(nodes))
    ignored = planner.plan(make_spec(compatibility="ignore"), facts(nodes))
    assert "nv-1" in [n["metadata"]["name"] for n in ignored.eligibility.eligible]


def test_node_selector_pod_node_selector_and_required_affinity():
    nodes = default_nodes()
    nodes[2]["metadata"]["labels"]["pool"] = "a"
    nodes[3]["metadata"]["labels"]["pool"] = "b"
    selected = planner.plan(make_spec(node_selector={"pool": "a"}), facts(nodes))
    assert [n["metadata"]["name"] for n in selected.eligibility.eligible] == ["gkm-gpu-worker-2"]
    assert selected.eligibility.excluded["gkm-gpu-worker-1"] == ["not selected by node_selector (pool=a)"]

    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["b"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gkm-gpu-worker-1"]}]},
    ]}}}
    template = {"spec": {"tolerations": [GPU_TOLERATION], "affinity": affinity,
                         "nodeSelector": {"hardware-type": "gpu"}}}
    result = planner.plan(make_spec(pod_template=template), facts(nodes))
    assert [n["metadata"]["name"] for n in result.eligibility.eligible] == ["gkm-gpu-worker-1", "gkm-gpu-worker-3"]
    assert "required node affinity" in result.eligibility.excluded["gkm-gpu-worker-2"][0]
    assert any("pod_template.spec.nodeSelector (hardware-type=gpu)" in r
               for r in result.eligibility.excluded["gkm-control-plane"])


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"operator": "Exists"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "true"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "false"}, False),
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_matching(toleration, tolerated):
    node = default_nodes()[1]
    assert (scheduling.untolerated_taints(node, [toleration]) == []) is tolerated


def test_cordoned_node_is_excluded():
    nodes = default_nodes()
    nodes[1]["spec"]["unschedulable"] = True
    result = planner.plan(make_spec(), facts(nodes))
    assert "node.kubernetes.io/unschedulable:NoSchedule" in result.eligibility.excluded["gkm-gpu-worker-1"][0]


def test_a_node_that_misses_a_heartbeat_keeps_its_slots_and_a_new_one_waits_for_it():
    spec = make_spec()
    live = as_live(planner.plan(spec, facts()).desired, complete_jobs=True, marked=True)
    nodes = default_nodes()
    unhealthy = next(node for node in nodes if node["metadata"]["name"] == WORKERS[0])
    # What the node lifecycle controller adds for the moment a node's heartbeat is late.
    unhealthy["spec"]["taints"] += [{"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
                                    {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    kept = planner.plan(spec, facts(nodes, objects=live))
    assert WORKERS[0] in [node["metadata"]["name"] for node in kept.eligibility.eligible]
    assert kept.actions == []
    # A cache new to the cluster plans the node's Job too; the scheduler holds its pod until the node is back.
    assert len(by_kind(planner.plan(spec, facts(nodes)).desired, "Job")) == 3


# ---------------------------------------------------------------- rendering: the four scenarios


def test_namespaced_rwo_renders_pinned_restricted_jobs_and_hostpath_pvs():
    template = {"spec": {"tolerations": [GPU_TOLERATION], "nodeSelector": {"hardware-type": "gpu"}}}
    result = planner.plan(make_spec(pod_template=template), facts())
    pvs, pvcs, jobs = (by_kind(result.desired, k) for k in ("PersistentVolume", "PersistentVolumeClaim", "Job"))
    access_pvcs, access_pvs = (by_kind(result.desired, k, access=True)
                               for k in ("PersistentVolumeClaim", "PersistentVolume"))
    assert len(pvs) == len(pvcs) == len(jobs) == len(access_pvcs) == len(access_pvs) == 3
    assert sorted(a.verb for a in result.actions) == ["create"] * 15
    for worker, pv, pvc, job, access_pvc, access_pv in zip(WORKERS, pvs, pvcs, jobs, access_pvcs, access_pvs,
                                                           strict=True):
        slot = naming.Slot("vector-add", "team-a", "team-a", worker, DIGEST_A, shared=True)
        # The Job runs in the system namespace and writes the node's store through a PVC and PV of its own.
        assert job["metadata"]["namespace"] == access_pvc["metadata"]["namespace"] == "gkm-system"
        assert job["metadata"]["labels"]["gkm.io/store"] == "true"
        assert "gkm.io/slot-namespace" not in job["metadata"]["labels"]
        assert access_pvc["metadata"]["name"] == access_pv["metadata"]["name"] == slot.access_name()
        assert access_pv["spec"]["claimRef"] == {"namespace": "gkm-system", "name": slot.access_name()}
        assert access_pv["spec"]["hostPath"] == pv["spec"]["hostPath"]
        assert access_pv["spec"]["nodeAffinity"] == pv["spec"]["nodeAffinity"]
        assert pvc["metadata"]["name"] == slot.pvc_name() and pvc["metadata"]["namespace"] == "team-a"
        assert pvc["metadata"]["labels"] == slot.labels()
        assert pvc["spec"] == {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "33Mi"}},
                               "storageClassName": "local-manual"}
        assert pv["spec"]["claimRef"] == {"namespace": "team-a", "name": slot.pvc_name()}
        assert pv["spec"]["hostPath"]["path"] == slot.host_path("/var/lib/gkm-cluster/caches") == (
            "/var/lib/gkm-cluster/caches/team-a/vector-add/_store/" + DIGEST_A.split(":")[1])
        assert pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
            worker]
        pod_spec = job["spec"]["template"]["spec"]
        assert pod_spec["nodeSelector"] == {"hardware-type": "gpu", "kubernetes.io/hostname": worker}
        assert pod_spec["tolerations"] == [GPU_TOLERATION]
        assert "priorityClassName" not in pod_spec
        assert job["spec"]["template"]["metadata"]["labels"] == job["metadata"]["labels"]
        assert job["spec"]["template"]["metadata"]["labels"]["gkm.io/node"] == worker
        assert "annotations" not in job["spec"]["template"]["metadata"]
        assert pod_spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000,
                                               "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}}
        container = pod_spec["containers"][0]
        assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["command"][:3] == ["python3", "-m", render.EXTRACT_CLI_MODULE]
        assert container["command"][3:] == ["--image", "registry.local/caches/vector-add@" + DIGEST_A,
                                            "--dest", "/gkm/cache", "--termination-log", "/dev/termination-log",
                                            "--gpu", "hip/gfx90a/64", "--compatibility", "fail"]
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert pod_spec["automountServiceAccountToken"] is False
        assert pod_spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == slot.access_name()
        assert job["spec"]["backoffLimit"] == 2
        assert job["spec"]["activeDeadlineSeconds"] == 900
        assert job["spec"]["ttlSecondsAfterFinished"] == 86400
    assert len({pv["spec"]["hostPath"]["path"] for pv in pvs}) == 1  # same path, but on three different nodes
    # Namespace before PV before PVC before Job.
    kinds = [a.kind for a in result.ordered_actions()]
    assert kinds == sorted(kinds, key=planner.KIND_ORDER.index)


@pytest.mark.parametrize("in_system", [True, False])
def test_cluster_rwo_gets_one_pvc_per_node_and_namespace_and_one_job_per_node_with_the_store(in_system):
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"], system_namespace_jobs=in_system)
    result = planner.plan(spec, facts())
    pvcs = by_kind(result.desired, "PersistentVolumeClaim")
    assert len(pvcs) == 6
    assert {p["metadata"]["labels"]["gkm.io/cache-namespace"] for p in pvcs} == {""}
    pvs = by_kind(result.desired, "PersistentVolume")
    paths = {pv["spec"]["hostPath"]["path"] for pv in pvs}
    assert len({pv["metadata"]["name"] for pv in pvs}) == 6
    jobs = by_kind(result.desired, "Job")
    if in_system:
        # The store: the two namespaces' PVs of a node point at one directory, which one Job per node fills.
        assert paths == {"/var/lib/gkm-cluster/caches/_cluster/vector-add/_store/" + DIGEST_A.split(":")[1]}
        assert len(jobs) == len(by_kind(result.desired, "PersistentVolumeClaim", access=True)) == 3
        assert sorted(job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]
                      for job in jobs) == WORKERS
    else:
        assert len(paths) == 2  # one per namespace; nodes differ within a namespace
        assert len(jobs) == 6


@pytest.mark.parametrize("scope", ["namespaced", "cluster"])
def test_rox_gets_one_pvc_named_as_the_cache_per_namespace_and_unpinned_jobs(scope):
    params = {"access_modes": ["ReadWriteOnce", "ReadOnlyMany"]}
    if scope == "cluster":
        params.update(scope="cluster", workload_namespaces=["team-a", "team-b"])
    # A class whose volumes are shared: on hostPath PVs ReadOnlyMany is refused (below).
    result = planner.plan(make_spec(**params), facts(storage_class=CSI_CLASS))
    pvcs = by_kind(result.desired, "PersistentVolumeClaim")
    assert [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pvcs] == (
        [("team-a", "vector-add"), ("team-b", "vector-add")] if scope == "cluster" else [("team-a", "vector-add")])
    for job in by_kind(result.desired, "Job"):
        assert "nodeSelector" not in job["spec"]["template"]["spec"]
        assert "gkm.io/node" not in job["metadata"]["labels"]
    assert by_kind(result.desired, "PersistentVolume") == []
    assert [s.node for s in result.slots] == [""] * len(pvcs)


@pytest.mark.parametrize("params, why", [
    ({}, "the cluster has no default storage class with a provisioner"),
    ({"storage_class_name": "standard"}, "the cluster has no provisioner for storage_class_name 'standard'"),
    ({"create_pvs": "always"}, "create_pvs is always"),
])
def test_rox_on_host_path_pvs_is_refused_with_the_field_and_both_fixes(params, why):
    # One Job would fill one node's directory; pods on every other node would mount an empty one.
    storage_class = CSI_CLASS if params.get("create_pvs") == "always" else None
    with pytest.raises(scheduling.PlanError) as refused:
        planner.plan(make_spec(access_modes=["ReadOnlyMany"], **params), facts(storage_class=storage_class))
    assert refused.value.reason == "InvalidSpec"
    message = str(refused.value)
    assert message.startswith("access_modes ReadOnlyMany needs a volume every node shares, and %s" % why)
    assert "access_modes [ReadWriteOnce]" in message and "storage_class_name whose provisioner" in message


def test_provisioner_class_gets_no_pvs_and_create_pvs_overrides():
    result = planner.plan(make_spec(storage_class_name="fast"), facts(storage_class=CSI_CLASS))
    assert by_kind(result.desired, "PersistentVolume") == []
    pvc = by_kind(result.desired, "PersistentVolumeClaim")[0]
    assert pvc["spec"]["storageClassName"] == "fast"
    forced = planner.plan(make_spec(create_pvs="always"), facts(storage_class=CSI_CLASS))
    assert len(by_kind(forced.desired, "PersistentVolume")) == 3
    never = planner.plan(make_spec(create_pvs="never"), facts())
    assert by_kind(never.desired, "PersistentVolume") == []


def test_node_without_hostname_label_is_pinned_by_name_in_every_affinity_term():
    nodes = default_nodes()
    del nodes[1]["metadata"]["labels"]["kubernetes.io/hostname"]
    result = planner.plan(make_spec(), facts(nodes))
    job = by_kind(result.desired, "Job")[0]
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gkm-gpu-worker-1"]}]}]


# ---------------------------------------------------------------- re-runs and day 2


def test_rerun_against_applied_objects_plans_nothing():
    spec = make_spec()
    first = planner.plan(spec, facts())
    second = planner.plan(spec, facts(objects=as_live(first.desired)))
    assert second.actions == []


def test_completed_job_marks_the_pvc_once_and_a_ttl_deleted_job_is_not_recreated():
    spec = make_spec()
    first = planner.plan(spec, facts())
    applied = as_live(first.desired, complete_jobs=True)
    done = planner.plan(spec, facts(objects=applied))
    assert verbs(done) == sorted(("update", "PersistentVolumeClaim", s.pvc) for s in done.slots)
    # The PVC updates applied; the Jobs stay as they are (a rerun renders no Job of an extracted slot).
    marked = dict(applied, PersistentVolumeClaim=as_live(by_kind(done.desired, "PersistentVolumeClaim"))[
        "PersistentVolumeClaim"])
    # The system namespace's Jobs go once the marks are there: their finished pods held the PVCs they wrote through.
    assert len(marked["Job"]) == 3 and {(a.verb, a.kind) for a in planner.plan(spec, facts(objects=marked)).actions
                                        } == {("delete", "Job")}
    del marked["Job"]
    assert planner.plan(spec, facts(objects=marked)).actions == []


def test_new_node_gets_objects_and_gone_node_is_pruned():
    spec = make_spec()
    live = as_live(planner.plan(spec, facts()).desired)
    nodes = [n for n in default_nodes([{"name": "late", "count": 1, "vendor": "amd"}])
             if n["metadata"]["name"] != "gkm-gpu-worker-3"]
    result = planner.plan(spec, facts(nodes, live))
    created = {a.kind for a in result.actions if a.verb == "create"}
    assert created == {"PersistentVolume", "PersistentVolumeClaim", "Job"}
    assert {a.name for a in result.actions if a.verb == "create"} >= {
        naming.Slot("vector-add", "team-a", "team-a", "late-1", DIGEST_A).pvc_name()}
    deleted = [a for a in result.actions if a.verb == "delete"]
    assert len(deleted) == 5 and all("gkm-gpu-worker-3" in a.reason for a in deleted)


def test_image_change_prunes_old_digest_but_keeps_a_mounted_pvc_and_one_a_finished_pod_names_as_outdated():
    """A finished pod reads nothing, but the API server keeps a deleted claim it names until the pod goes
    (pvc-protection): deleting it would leave the slot Terminating, and a replace waiting for it; our own Job's
    finished pod holds nothing."""
    old = planner.plan(make_spec(), facts())
    live = as_live(old.desired, complete_jobs=True)
    mounted, named_by_finished = old.slots[0].pvc, old.slots[1].pvc
    pods = [pod("app", "team-a", mounted), pod("done", "team-a", named_by_finished, phase="Succeeded"),
            pod("extractor", "team-a", old.slots[2].pvc, phase="Succeeded", labels={MANAGED_BY_LABEL: MANAGER})]
    new_spec = make_spec(digest=DIGEST_B)
    # Make before break: while the new slots are not extracted every old slot stays.
    first = planner.plan(new_spec, facts(objects=live, pods=pods))
    assert sum(1 for a in first.actions if a.verb == "create") == 15
    assert not [a for a in first.actions if a.verb == "delete"]
    assert sorted(s.outcome for s in first.slots if s.digest == "a" * 12) == [planner.PREVIOUS] * 3
    done = planner.plan(new_spec, facts(objects=merged(live, as_live(first.desired, complete_jobs=True)), pods=pods))
    # The new Jobs completed: this run marks the new PVCs, the next one releases the old slots.
    assert {a.verb for a in done.actions if not is_access(a.body)} == {"update"}
    marked = as_live(first.desired, complete_jobs=True, marked=True)
    result = planner.plan(new_spec, facts(objects=merged(live, marked), pods=pods))
    deleted = {a.name for a in result.actions if a.verb == "delete"}
    assert mounted not in deleted and named_by_finished not in deleted
    assert len(deleted) == 3 and all("old digest" in a.reason for a in result.actions if a.verb == "delete")
    outdated = sorted((s for s in result.slots if s.outcome == "outdated"), key=lambda s: s.pvc != mounted)
    assert [(s.pvc, [u["name"] for u in s.users]) for s in outdated] == [(mounted, ["app"]),
                                                                         (named_by_finished, ["done"])]
    assert {s.digest for s in outdated} == {"a" * 12}
    assert outdated[1].users[0]["phase"] == "Succeeded"


def test_removed_workload_namespace_is_pruned():
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"])
    live = as_live(planner.plan(spec, facts()).desired)
    narrowed = make_spec(scope="cluster", workload_namespaces=["team-a"])
    result = planner.plan(narrowed, facts(objects=live))
    assert {a.verb for a in result.actions} == {"delete"}
    # team-b's PV and PVC on each node; the nodes' stores and their Jobs stay for team-a, and so do their directories.
    assert sorted((a.kind, a.namespace) for a in result.actions) == [("PersistentVolume", "")] * 3 + [
        ("PersistentVolumeClaim", "team-b")] * 3
    assert all("team-b is no longer a workload namespace" in a.reason for a in result.actions)
    store = {scrub.directory(pv) for pv in live["PersistentVolume"]}
    assert len(store) == 3 and store <= result.kept_directories  # one directory per node


def test_prune_false_keeps_stale_objects_as_outdated():
    live = as_live(planner.plan(make_spec(), facts()).desired)
    result = planner.plan(make_spec(digest=DIGEST_B, prune=False), facts(objects=live))
    assert not [a for a in result.actions if a.verb == "delete"]
    assert sum(1 for s in result.slots if s.outcome == "outdated") == 3


def test_rox_image_change_replaces_the_unused_pvc_and_waits_for_a_mounted_one():
    params = {"access_modes": ["ReadOnlyMany"]}
    live = as_live(planner.plan(make_spec(**params), facts(storage_class=CSI_CLASS)).desired, complete_jobs=True)
    unused = planner.plan(make_spec(digest=DIGEST_B, **params), facts(objects=live, storage_class=CSI_CLASS))
    assert ("replace", "PersistentVolumeClaim", "vector-add") in verbs(unused)
    assert ("create", "Job", naming.Slot("vector-add", "team-a", "team-a", "", DIGEST_B).job_name()) in verbs(unused)
    assert {a.kind for a in unused.actions if a.verb == "delete"} == {"Job"}

    busy = planner.plan(make_spec(digest=DIGEST_B, **params),
                        facts(objects=live, pods=[pod("app", "team-a", "vector-add")], storage_class=CSI_CLASS))
    assert busy.actions == []
    outcomes = sorted(s.outcome for s in busy.slots)
    assert outcomes == ["blocked", "outdated"]
    assert "mounted by app" in next(s.reason for s in busy.slots if s.outcome == "blocked")


def test_pending_job_with_changed_template_is_replaced_but_a_finished_one_is_kept():
    live = as_live(planner.plan(make_spec(pod_template={"spec": {"tolerations": [{"operator": "Exists"}]}}),
                                facts()).desired)
    result = planner.plan(make_spec(), facts(objects=live))
    assert {(a.verb, a.kind) for a in result.actions} == {("replace", "Job")}
    finished = as_live(planner.plan(make_spec(pod_template={"spec": {"tolerations": [{"operator": "Exists"}]}}),
                                    facts()).desired, complete_jobs=True)
    assert {(a.verb, a.kind) for a in planner.plan(make_spec(), facts(objects=finished)).actions} == {
        ("update", "PersistentVolumeClaim")}


def test_size_change_replaces_unused_pvcs_with_their_pvs_and_jobs():
    live = as_live(planner.plan(make_spec(), facts()).desired, complete_jobs=True)
    result = planner.plan(make_spec(size="1Gi"), facts(objects=live))
    assert {(a.verb, a.kind, is_access(a.body)) for a in result.actions} == {
        ("replace", "PersistentVolume", False), ("replace", "PersistentVolumeClaim", False), ("replace", "Job", False),
        ("create", "PersistentVolume", True), ("create", "PersistentVolumeClaim", True)}


def test_state_absent_deletes_everything_but_mounted_pvcs_unless_forced():
    live = as_live(planner.plan(make_spec(), facts()).desired)
    first_pvc = by_kind(live["PersistentVolumeClaim"], "PersistentVolumeClaim")[0]["metadata"]["name"]
    pods = [pod("app", "team-a", first_pvc)]
    absent = planner.plan(make_spec(state="absent"), facts(objects=live, pods=pods))
    assert len([a for a in absent.actions if a.verb == "delete"]) == 10
    assert [s.outcome for s in absent.slots] == ["outdated"]
    forced = planner.plan(make_spec(state="absent", force=True), facts(objects=live, pods=pods))
    assert len(forced.actions) == 15


def test_missing_namespace_fails_unless_it_may_be_created():
    with pytest.raises(planner.PlanError, match=r"namespace\(s\) team-c do not exist.*create_namespaces: true"):
        planner.plan(make_spec(namespace="team-c"), facts())
    result = planner.plan(make_spec(namespace="team-c", create_namespaces=True), facts())
    assert result.ordered_actions()[0].kind == "Namespace"
    assert result.ordered_actions()[0].name == "team-c"


def test_plan_summary_counts_by_verb_and_kind():
    result = planner.plan(make_spec(), facts())
    assert result.summary() == {"create": {"PersistentVolume": 6, "PersistentVolumeClaim": 6, "Job": 3}}


def test_job_command_is_accepted_by_the_extraction_cli():
    from ansible_collections.gkm.cluster.plugins.module_utils.extract import job_main as cache_extract_cli

    spec = make_spec()
    spec.extract_args = ["--plain-http"]
    job = by_kind(planner.plan(spec, facts()).desired, "Job")[0]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python3", "-m", cache_extract_cli.__name__]
    args = cache_extract_cli.build_parser().parse_args(command[3:])
    assert (args.image, args.dest, args.plain_http, args.compatibility) == (spec.image, "/gkm/cache", True, "fail")
    assert args.gpus == [{"backend": "hip", "arch": "gfx90a", "warp_size": "64"}]


# ---------------------------------------------------------------- the extractor's user and registry Secret


RESTRICTED_ADDABLE_CAPS = {"NET_BIND_SERVICE"}


def restricted_violations(pod_spec, container):
    """Pod Security `restricted` rules one container breaks (the API server's own check runs in the
    integration tests; this one says which field)."""
    context = dict(pod_spec.get("securityContext") or {}, **(container.get("securityContext") or {}))
    problems = []
    if context.get("runAsNonRoot") is not True or context.get("runAsUser") == 0:
        problems.append("runs as root")
    if set(context.get("capabilities", {}).get("add") or []) - RESTRICTED_ADDABLE_CAPS:
        problems.append("adds capabilities")
    if context.get("capabilities", {}).get("drop") != ["ALL"]:
        problems.append("keeps capabilities")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append("may escalate")
    if (context.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        problems.append("no seccomp")
    return problems


def test_hostpath_jobs_run_the_extractor_as_root_without_any_capability():
    """Issue 31, class 1: the tree it publishes is root's (files 0444, directories 0555), so no other uid changes it;
    root without capabilities writes only what root owns, and Pod Security baseline admits it."""
    job = by_kind(planner.plan(make_spec(), facts()).desired, "Job")[0]
    pod_spec = job["spec"]["template"]["spec"]
    extractor, = pod_spec["containers"]
    assert "initContainers" not in pod_spec
    assert restricted_violations(pod_spec, extractor) == ["runs as root"]
    assert extractor["securityContext"] == {
        "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
    assert pod_spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert job["spec"]["podFailurePolicy"]["rules"][0] == {
        "action": "FailJob", "onExitCodes": {"operator": "In", "values": [1, 2, 4, 5]}}


@pytest.mark.parametrize(("storage_class", "create_pvs", "set_volume_owner", "expected"), [
    (None, "auto", "auto", True),            # no provisioner: our hostPath PVs
    (CSI_CLASS, "auto", "auto", False),      # provisioned volumes honour fsGroup
    (CSI_CLASS, "always", "auto", True),     # our hostPath PVs again
    (CSI_CLASS, "auto", "always", True),
    (None, "auto", "never", False),
])
def test_the_extractor_runs_as_root_on_the_volumes_that_need_it(
        storage_class, create_pvs, set_volume_owner, expected):
    spec = make_spec(create_pvs=create_pvs, set_volume_owner=set_volume_owner)
    job = by_kind(planner.plan(spec, facts(storage_class=storage_class)).desired, "Job")[0]
    extractor, = job["spec"]["template"]["spec"]["containers"]
    assert (extractor["securityContext"].get("runAsUser") == 0) is expected
    assert (restricted_violations(job["spec"]["template"]["spec"], extractor) == []) is not expected


def test_bad_set_volume_owner_is_refused():
    with pytest.raises(cache_spec.SpecError, match="set_volume_owner must be one of auto, always, never"):
        make_spec(set_volume_owner="sometimes")


def secret_spec(files, **params):
    spec = make_spec(**params)
    spec.registry_files = files
    return spec


def test_registry_secret_in_the_system_namespace_mounted_read_only_and_passed_as_files():
    files = {registry_secret.DOCKER_CONFIG_KEY: '{"auths": {}}', registry_secret.CA_KEY: "PEM"}
    spec = secret_spec(files, scope="cluster", workload_namespaces=["team-a", "team-b"])
    result = planner.plan(spec, facts())
    secrets = by_kind(result.desired, "Secret")
    # One for every Job of the cache, where they all run: no tenant's namespace holds the admin's credentials.
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in secrets] == [
        ("gkm-system", registry_secret.secret_name("vector-add", "", "gkm-system"))]
    assert secrets[0]["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gkm.cluster",
                                                "gkm.io/cache": "vector-add", "gkm.io/cache-namespace": ""}
    assert secrets[0]["data"] == {"ca.crt": "UEVN", "config.json": "eyJhdXRocyI6IHt9fQ=="}
    assert [a.kind for a in result.ordered_actions()][:1] == ["Secret"]  # before the Jobs mount it
    # A provisioned volume is mounted through the slot's own PVC: those Jobs, and so their Secret, stay in each
    # workload namespace.
    provisioned = planner.plan(spec, facts(storage_class=CSI_CLASS))
    assert [s["metadata"]["namespace"] for s in by_kind(provisioned.desired, "Secret")] == ["team-a", "team-b"]
    for job in by_kind(result.desired, "Job") + by_kind(provisioned.desired, "Job"):
        pod_spec = job["spec"]["template"]["spec"]
        volume = next(v for v in pod_spec["volumes"] if v["name"] == "registry")
        namespace = job["metadata"]["namespace"]
        assert volume["secret"] == {"secretName": registry_secret.secret_name("vector-add", "", namespace),
                                    "defaultMode": 0o440}
        extractor = pod_spec["containers"][0]
        assert {"name": "registry", "mountPath": "/gkm-registry", "readOnly": True} in extractor["volumeMounts"]
        assert extractor["command"][9:13] == ["--docker-config", "/gkm-registry/config.json",
                                              "--ca-file", "/gkm-registry/ca.crt"]
        assert "PEM" not in str(job) and "env" not in extractor


def test_registry_secret_rerun_writes_nothing_rotation_updates_only_the_secret_and_removal_deletes_it():
    spec = secret_spec({registry_secret.CA_KEY: "PEM"})
    desired = planner.plan(spec, facts()).desired
    live = as_live(desired, complete_jobs=True, marked=True)
    live["Secret"][0]["type"] = "Opaque"
    assert verbs(planner.plan(spec, facts(objects=live))) == []

    rotated = planner.plan(secret_spec({registry_secret.CA_KEY: "NEW PEM"}), facts(objects=live))
    assert [(a.verb, a.kind) for a in rotated.actions] == [("update", "Secret")]

    without = planner.plan(secret_spec({}), facts(objects=live))
    assert [(a.verb, a.kind) for a in without.actions] == [("delete", "Secret")]
    assert by_kind(without.desired, "Secret") == []

    absent = planner.plan(make_spec(state="absent"), facts(objects=live))
    assert ("delete", "Secret") in [(a.verb, a.kind) for a in absent.actions]
    assert all(s.outcome != "outdated" for s in absent.slots)


def test_nodes_kept_at_what_the_planner_reads_plan_as_the_full_nodes():
    nodes = default_nodes()
    nodes[1]["spec"]["unschedulable"] = True
    nodes[2]["spec"]["taints"] = [{"key": "team", "value": "ml", "effect": "NoSchedule"}]
    for node in nodes:
        node["metadata"]["annotations"] = {"node.alpha.kubernetes.io/ttl": "0"}
        node["status"].update(images=[{"names": ["registry.local/big:1"], "sizeBytes": 1 << 30}],
                              conditions=[{"type": "Ready", "status": "True"}])
    kept = [node_facts(node) for node in nodes]
    assert all("images" not in node["status"] and "annotations" not in node["metadata"] for node in kept)
    spec = make_spec()
    full, slim = planner.plan(spec, facts(nodes)), planner.plan(spec, facts(kept))
    assert full.desired == slim.desired and full.eligibility.excluded == slim.eligibility.excluded
    assert [n["metadata"]["name"] for n in slim.eligibility.eligible] == [
        n["metadata"]["name"] for n in full.eligibility.eligible]
    assert [node_status.node_gpus(node) for node in kept] == [node_status.node_gpus(node) for node in nodes]


@pytest.mark.parametrize("key", [None, "-----BEGIN PUBLIC KEY-----\nabc\n-----END PUBLIC KEY-----\n"])
def test_every_pvc_of_a_cache_carries_the_hash_of_its_spec_and_signature_check(key):
    spec = make_spec(scope="cluster", workload_namespaces=["team-a", "team-b"])
    spec.verification = ("cosign-v2", key) if key else None
    pvcs = by_kind(planner.plan(spec, facts()).desired, "PersistentVolumeClaim")
    body = pvcs[0]["spec"]
    checked = render.verification.identity(spec.verification)
    expected = render.spec_hash(dict(body, signatureCheck=checked) if checked else body)
    assert len(pvcs) > 1 and {p["metadata"]["annotations"][SPEC_HASH_ANNOTATION] for p in pvcs} == {expected}


def test_a_rerun_renders_no_job_of_an_extracted_slot_unless_its_metadata_changed(monkeypatch):
    """The Job is a rerun's largest rendering: an extracted slot's is only compared when a write could follow (a Job
    in the slot's namespace: one in the system namespace goes once its slot is marked)."""
    spec = make_spec(system_namespace_jobs=False)
    first = planner.plan(spec, facts())
    live = as_live(first.desired, complete_jobs=True, marked=True)
    rendered = []
    render_job = planner.render_job
    monkeypatch.setattr(planner, "render_job", lambda *args: rendered.append(args[1]) or render_job(*args))
    assert planner.plan(spec, facts(objects=live)).actions == [] and rendered == []
    # A live Job that lost one of our labels is updated with the whole Job, as rendered on the first run.
    job = by_kind(first.desired, "Job")[0]
    del live["Job"][0]["metadata"]["labels"][NODE_LABEL]
    relabelled = planner.plan(spec, facts(objects=live))
    assert [(a.verb, a.kind, a.body) for a in relabelled.actions] == [("update", "Job", job)]
    assert len(rendered) == 1


@pytest.mark.parametrize("affinity, field", [
    ("x", "pod_template.spec.affinity must be a mapping"),
    ({"nodeAffinity": "x"}, "pod_template.spec.affinity.nodeAffinity must be a mapping"),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": "x"}}},
     "pod_template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms "
     "must be a list"),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": "b"}]}]}}},
     "nodeSelectorTerms[0].matchExpressions[0].values must be a list"),
])
def test_a_malformed_required_affinity_is_an_invalid_spec_naming_the_field(affinity, field):
    template = {"spec": {"tolerations": [GPU_TOLERATION], "affinity": affinity}}
    with pytest.raises(scheduling.PlanError) as refused:
        planner.plan(make_spec(pod_template=template), facts())
    assert refused.value.reason == "InvalidSpec"
    assert field in str(refused.value)


def test_rox_on_host_path_pvs_is_planned_when_the_admin_allows_it():
    result = planner.plan(make_spec(access_modes=["ReadOnlyMany"], host_path_read_only_many=True), facts())
    [pv] = by_kind(result.desired, "PersistentVolume")
    assert "nodeAffinity" not in pv["spec"] and pv["spec"]["hostPath"]["type"] == "DirectoryOrCreate"


def from_before(desired, complete):
    """The live objects of a cache whose Jobs and Secret were in the workload namespace (before issue 31's step 8)."""
    live = as_live([obj for obj in desired if not is_access(obj)], complete_jobs=complete)
    for obj in live.get("Job", []) + live.get("Secret", []):
        labels = obj["metadata"]["labels"]
        obj["metadata"]["namespace"] = labels.pop("gkm.io/slot-namespace", "team-a")
    return live


def test_jobs_and_secret_from_before_leave_the_workload_namespace_and_a_completed_job_still_counts():
    spec = secret_spec({registry_secret.CA_KEY: "PEM"})
    live = from_before(planner.plan(spec, facts()).desired, complete=True)
    result = planner.plan(spec, facts(objects=live))
    assert sorted((a.verb, a.kind, a.namespace) for a in result.actions) == [
        ("create", "Secret", "gkm-system")] + [("delete", "Job", "team-a")] * 3 + [("delete", "Secret", "team-a")] + [
        ("update", "PersistentVolumeClaim", "team-a")] * 3  # marked extracted: no Job again
    assert all("run in namespace gkm-system now" in a.reason for a in result.actions if a.kind == "Job")
    running = from_before(planner.plan(spec, facts()).desired, complete=False)
    moved = planner.plan(spec, facts(objects=running))
    assert {(a.verb, a.kind, a.namespace) for a in moved.actions if a.kind == "Job"} == {
        ("delete", "Job", "team-a"), ("create", "Job", "gkm-system")}
    assert len(by_kind(moved.desired, "PersistentVolumeClaim", access=True)) == 3


def test_an_extracted_slot_s_access_pvc_and_pv_go_and_a_rerun_writes_nothing():
    spec = make_spec()
    desired = planner.plan(spec, facts()).desired
    done = as_live([obj for obj in desired if is_access(obj)])
    live = merged(as_live(desired, complete_jobs=True), done)
    result = planner.plan(spec, facts(objects=live))
    assert sorted((a.verb, a.kind, is_access(a.body)) for a in result.actions) == sorted(
        [("delete", "PersistentVolume", True)] * 3 + [("delete", "PersistentVolumeClaim", True)] * 3
        + [("update", "PersistentVolumeClaim", False)] * 3)
    assert all(a.reason == "the slot's extraction finished" for a in result.actions if a.verb == "delete")
    assert planner.plan(spec, facts(objects=as_live(desired, complete_jobs=True, marked=True))).actions == []


LABELLED = {"metadata": {"labels": {"app.kubernetes.io/name": "gkm-webhook", "team": "ml"}},
            "spec": {"tolerations": [GPU_TOLERATION]}}


def test_pod_template_labels_are_refused_with_the_field_named_when_the_jobs_run_in_the_system_namespace():
    # The webhook's Service there selects app.kubernetes.io/name: gkm-webhook; any label may match the admin's own.
    with pytest.raises(scheduling.PlanError) as refused:
        planner.plan(make_spec(pod_template=LABELLED), facts())
    assert refused.value.reason == "InvalidSpec"
    assert str(refused.value).startswith("pod_template.metadata.labels is refused: the extraction Jobs run in the "
                                         "system namespace gkm-system")
    # The resource's status names its own field.
    assert resource_terms(str(refused.value)).startswith("spec.podTemplate.metadata.labels is refused")


@pytest.mark.parametrize("params, storage_class", [({"system_namespace_jobs": False}, None), ({}, CSI_CLASS)])
def test_pod_template_labels_reach_jobs_in_the_workload_namespace(params, storage_class):
    """Without the option, or on provisioned volumes (whose Jobs stay with the slot's PVC), the labels are copied."""
    jobs = by_kind(planner.plan(make_spec(pod_template=LABELLED, **params), facts(storage_class=storage_class)).desired,
                   "Job")
    assert jobs and {job["metadata"]["namespace"] for job in jobs} == {"team-a"}
    for job in jobs:
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert labels["team"] == "ml" and labels["app.kubernetes.io/name"] == "gkm-webhook"
        assert labels[MANAGED_BY_LABEL] == MANAGER  # ours win over the template's


def test_without_system_namespace_jobs_the_jobs_and_their_secret_stay_in_the_workload_namespace():
    spec = secret_spec({registry_secret.CA_KEY: "PEM"}, system_namespace_jobs=False)
    result = planner.plan(spec, facts())
    assert {(obj["kind"], obj["metadata"].get("namespace")) for obj in result.desired} == {
        ("PersistentVolume", None), ("PersistentVolumeClaim", "team-a"), ("Job", "team-a"), ("Secret", "team-a")}
    for job in by_kind(result.desired, "Job"):
        claim = job["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
        assert claim in {pvc["metadata"]["name"] for pvc in by_kind(result.desired, "PersistentVolumeClaim")}
