"""Builders for the unit tests of the distribution code (module_utils/distribute), shared by many of them: a cache
spec and the cluster facts the planner reads, the applied objects as the API server returns them, rollouts and
upgrade waves, per-node states and objects, and cache results for the resource's status."""

import copy
from types import SimpleNamespace

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot, short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    EXTRACTED_DIGEST_ANNOTATION,
    IMAGE_ANNOTATION,
    SLOT_ACCESS_LABEL,
    SLOT_NAMESPACE_LABEL,
    STORE_LABEL,
    SYSTEM_NAMESPACE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    ClusterFacts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import spec as cache_spec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.upgrade_policy import parse_upgrade_policy
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.pipeline import Distribution
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner, rollout, upgrade_waves
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.job_pods import JOB_NAME_LABEL
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import SlotState
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import cache_status as status
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_objects
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

# ---------------------------------------------------------------- the planner's inputs and the applied objects

DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
TARGETS = [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]
GPU_TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
NO_PROVISIONER_CLASS = {"metadata": {"name": "local-manual"}, "provisioner": "kubernetes.io/no-provisioner"}
CSI_CLASS = {"metadata": {"name": "fast"}, "provisioner": "csi.example.com"}
WORKERS = ["gkm-gpu-worker-1", "gkm-gpu-worker-2", "gkm-gpu-worker-3"]


def make_spec(digest=DIGEST_A, **params):
    params.setdefault("name", "vector-add")
    if params.get("scope") != "cluster":
        params.setdefault("namespace", "team-a")
    params.setdefault("extract_image", "registry.local/gkm/tools:1")
    params.setdefault("pod_template", {"spec": {"tolerations": [GPU_TOLERATION]}})
    # These tests count the slots' objects; the serving PVC has its own tests (test_serving_plan.py).
    params.setdefault("serving_pvc", False)
    # The layout issue 31 moves to (system_namespace_jobs); test_plan.py checks the one before it too.
    params.setdefault("system_namespace_jobs", True)
    spec = cache_spec.cache_spec_from_params(params)
    return cache_spec.pin_image(spec, "registry.local/caches/vector-add@" + digest, digest,
                                {"targets": TARGETS, "size_bytes": 80_000})


def default_nodes(extra_groups=()):
    return gpu_nodes.render_nodes([*gpu_nodes.DEFAULT_NODE_GROUPS, *extra_groups])


def facts(nodes=None, objects=None, pods=(), namespaces=("team-a", "team-b", SYSTEM_NAMESPACE),
          storage_class=None):
    return ClusterFacts(nodes if nodes is not None else default_nodes(), namespaces, objects or {},
                        list(pods), NO_PROVISIONER_CLASS if storage_class is None else storage_class)


def as_live(desired, complete_jobs=False, marked=False):
    """What the API server would return for the applied objects: same fields plus server-side ones. Extracted
    (complete_jobs, marked): without the slots' access PVCs and PVs, which the run that saw the Jobs complete
    deleted; marked: without the Jobs of the system namespace either."""
    objects = {}
    for obj in desired:
        if (complete_jobs or marked) and is_access(obj):
            continue
        if marked and obj["kind"] == "Job" and {SLOT_NAMESPACE_LABEL, STORE_LABEL} & set(obj["metadata"]["labels"]):
            continue  # the run that saw the mark deleted the system namespace's Job
        live = copy.deepcopy(obj)
        live["metadata"]["uid"] = "uid-" + obj["metadata"]["name"]
        live["status"] = {}
        if obj["kind"] == "Job":
            live["spec"]["template"]["spec"]["dnsPolicy"] = "ClusterFirst"
            if complete_jobs:
                live["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
        if obj["kind"] == "PersistentVolumeClaim" and marked:
            image = obj["metadata"]["annotations"][IMAGE_ANNOTATION]
            live["metadata"]["annotations"][EXTRACTED_DIGEST_ANNOTATION] = image.rsplit("@", 1)[1]
        objects.setdefault(obj["kind"], []).append(live)
    return objects


def merged(*lives):
    """The live objects of several as_live calls together."""
    objects = {}
    for live in lives:
        for kind, items in live.items():
            objects.setdefault(kind, []).extend(items)
    return objects


def pod(name, namespace, claim, node="gkm-gpu-worker-1", phase="Running", labels=None):
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"nodeName": node, "volumes": [{"name": "k", "persistentVolumeClaim": {"claimName": claim}}]},
        "status": {"phase": phase},
    }


def verbs(result):
    return sorted((a.verb, a.kind, a.name) for a in result.actions)


def is_access(obj):
    """A slot's access PVC or PV in the system namespace (render.render_access)."""
    return SLOT_ACCESS_LABEL in (obj["metadata"].get("labels") or {})


def by_kind(objects, kind, access=False):
    """The objects of a kind: the slots' own, or (access) their access PVCs and PVs."""
    return [obj for obj in objects if obj["kind"] == kind and is_access(obj) == access]


# ---------------------------------------------------------------- a rolling upgrade inside one reconcile

def two_passes(spec, cluster):
    """runner._plan without the API: (the plan made with the holds, its WavePlan)."""
    first = planner.plan(spec, cluster)
    entries = status.cache_status(first.slots, WORKERS, [], {}, cluster.objects, cluster.pods)["entries"]
    waves = rollout.wave_plan(spec, first, entries, cluster.objects.get("PersistentVolumeClaim", []), cluster.pods)
    return planner.plan(spec, cluster, hold=rollout.held(waves)), waves


def moved_to_b(policy):
    live = as_live(planner.plan(make_spec(), facts()).desired, complete_jobs=True, marked=True)
    return make_spec(DIGEST_B, upgrade_policy=parse_upgrade_policy(policy)), facts(objects=live)


# ---------------------------------------------------------------- upgrade waves over a fleet

OLD = short_digest(DIGEST_A)


def node(name, **labels):
    return {"metadata": {"name": name, "labels": labels}}


def fleet(count):
    return [node("gpu-%02d" % index) for index in range(count)]


def upgrade(nodes, policy=None, **progress):
    """plan_waves with every node serving OLD unless progress gives its NodeProgress."""
    facts_by_node = {n["metadata"]["name"]: upgrade_waves.NodeProgress(previous=OLD) for n in nodes}
    facts_by_node.update(progress)
    return upgrade_waves.plan_waves(parse_upgrade_policy(policy), DIGEST_B, nodes, facts_by_node)


# ---------------------------------------------------------------- per-node states on a mixed cluster

MAINTENANCE = {"key": "maintenance", "value": "yes", "effect": "NoSchedule"}
MIXED_GROUPS = [
    {"name": "tainted", "count": 1, "vendor": "amd", "gpus": 4, "taints": [MAINTENANCE]},
    {"name": "nv", "count": 1, "vendor": "nvidia", "gpus": 8},
    {"name": "cpu", "count": 2, "vendor": "none"},
    {"name": "broken", "count": 1, "vendor": "amd", "labels": {"gkm.io/gpu-arch": ""}},
]


def mixed_nodes():
    return gpu_nodes.render_nodes([*gpu_nodes.DEFAULT_NODE_GROUPS, *MIXED_GROUPS])


def reconcile_facts(spec, cluster_facts):
    """(plan, status entries) as a reconcile has them after its writes."""
    plan = planner.plan(spec, cluster_facts)
    live = as_live(plan.desired, complete_jobs=True)
    result = status.cache_status(plan.slots, [n["metadata"]["name"] for n in plan.eligibility.eligible],
                                 plan.eligibility.incompatible, plan.eligibility.excluded, live, cluster_facts.pods)
    return plan, result["entries"]


# ---------------------------------------------------------------- per-node status objects

T0, T1, T2 = "2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z", "2026-11-24T12:00:00Z"


def apply_merge_patch(document, patch):
    """RFC 7386, as the API server applies a merge patch."""
    result = dict(document)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = apply_merge_patch(result.get(key) if isinstance(result.get(key), dict) else {}, value)
        else:
            result[key] = value
    return result


class NodeObjectServer:
    """The per-node objects as the API server keeps them, after a list of NodeWrites."""

    def __init__(self):
        self.objects = {}
        self.version = 0

    def write(self, writes):
        for write in writes:
            self.version += 1
            if write.verb == node_objects.CREATE:
                assert write.name not in self.objects and "status" not in write.body
                self.objects[write.name] = copy.deepcopy(write.body)
            elif write.verb == node_objects.DELETE:
                assert write.resource_version == self.objects.pop(write.name)["metadata"]["resourceVersion"]
            else:
                obj = self.objects[write.name]
                assert write.resource_version in (None, obj["metadata"]["resourceVersion"])
                obj["status"] = apply_merge_patch(obj.get("status") or {}, write.body["status"])
            if write.name in self.objects:
                self.objects[write.name]["metadata"]["resourceVersion"] = str(self.version)

    def list(self):
        return copy.deepcopy(list(self.objects.values()))


# ---------------------------------------------------------------- cache results for the resource's status

EXTRACTED_STATUS = {
    "phase": "Extracted",
    "counts": {"nodes": 3, "node_in_use": 1, "node_not_in_use": 2, "node_error": 0, "pod_running": 1,
               "pod_outdated": 0},
    "entries": [{"namespace": "a", "node": "n1", "pvc": "p", "job": "j", "digest": "sha256:abc",
                 "phase": "Extracted", "mounted_by": ["pod-1"]}],
    "unschedulable": [],
}


def distribution(status, digest="sha256:abc", targets=None, excluded=None, rollout=None, overlay_variable=None):
    """A pipeline Distribution around a status (status_of's shape): the spec's digest, targets and kernel overlay
    variable, the plan's excluded nodes and rollout (its to_dict), as the resource's status reads them."""
    spec = SimpleNamespace(digest=digest, targets=targets, overlay_variable=overlay_variable)
    plan = SimpleNamespace(eligibility=SimpleNamespace(excluded=excluded or {}),
                           rollout=None if rollout is None else SimpleNamespace(to_dict=lambda: rollout))
    return Distribution(spec, plan, status, result=None, source=None)


_LARGE_CLUSTER_DIGEST = "sha256:" + "d" * 64
_LARGE_CLUSTER_NAMESPACES = ("inference-prod", "inference-staging", "training-batch")
TAINT = "untolerated taint nvidia.com/gpu=present:NoSchedule (add a toleration to pod_template.spec.tolerations)"
_INCOMPATIBLE = "GPU cuda/80/32 does not match the image's targets (cuda/90/32)"
_NO_GPU = "no gkm.io/gpu-* labels: not a GPU node (use compatibility: ignore to include it)"


def _job(name, namespace, condition):
    conditions = [{"type": condition, "status": "True", "reason": "BackoffLimitExceeded", "message": "backoff"}]
    return {"metadata": {"name": name, "namespace": namespace}, "status": {"conditions": conditions}}


def _unschedulable_pod(job_name, namespace):
    return {"metadata": {"name": job_name + "-x", "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "gkm.cluster", JOB_NAME_LABEL: job_name}},
            "spec": {"volumes": []},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/5000 nodes are available: 1 node(s) had untolerated taint {maintenance: yes}."}]}}


def large_cluster_result(nodes=5000, failed_every=100, stuck_every=250):
    """A distribution result of one ClusterGKMCache over 3 namespaces on `nodes` GPU nodes, with failures,
    stuck Jobs and 1,500 more nodes that do not get the cache (taint, GPU, no GPU)."""
    names = ["gpu-a100-pool-%05d.cluster.internal" % number for number in range(nodes)]
    slots, jobs, pods = [], [], []
    for index, node in enumerate(names):
        for namespace in _LARGE_CLUSTER_NAMESPACES:
            slot = Slot("llama-70b-kernels", "", namespace, node, _LARGE_CLUSTER_DIGEST)
            slots.append(SlotState("current", namespace, node, short_digest(_LARGE_CLUSTER_DIGEST), slot.pvc_name(),
                                   slot.job_name(), slot.pv_name()))
            if index % failed_every == 0:
                jobs.append(_job(slot.job_name(), namespace, "Failed"))
            elif index % stuck_every == 1:
                jobs.append(_job(slot.job_name(), namespace, "Suspended"))
                pods.append(_unschedulable_pod(slot.job_name(), namespace))
            else:
                jobs.append(_job(slot.job_name(), namespace, "Complete"))
    excluded = {}
    for number in range(1500):
        reason = (TAINT, _INCOMPATIBLE, _NO_GPU)[number % 3]
        excluded["other-pool-%05d.cluster.internal" % number] = [reason]
    incompatible = sorted(node for node, reasons in excluded.items() if reasons == [_INCOMPATIBLE])
    result = status.cache_status(slots, names, incompatible, excluded, {"Job": jobs}, pods,
                                 {"nvidia.com/gpu=present:NoSchedule": 500})
    return {"status": result, "cache": {"digest": _LARGE_CLUSTER_DIGEST}, "excluded_nodes": excluded}
