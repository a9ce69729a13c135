# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The distribution planner: from a cache's desired state and the cluster's facts to objects and actions.

Pure: no API calls. `plan(spec, facts)` returns which nodes are eligible (and why the others are not),
the PVCs, hostPath PVs and extraction Jobs the cache needs, and the create/update/replace/delete
actions that take the cluster there. Objects that belong to an old digest, a node that left or a
namespace no longer listed are pruned, except a PVC that a live pod still mounts: it is kept and
reported as outdated until a later run finds it unused.

Change detection does not diff whole objects: every object carries a hash of the spec we rendered
(`gkm.io/spec-hash`), so a re-run compares one annotation and our labels and writes nothing when
they match.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import hashlib
import json

from ansible_collections.gkm.cluster.plugins.module_utils.common.naming import (
    DIGEST_LABEL,
    MANAGED_BY_LABEL,
    MANAGER,
    NODE_LABEL,
    Slot,
    short_digest,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import (
    GPUSpecError,
    gpus_compatible,
    gpus_from_node_labels,
)

SPEC_HASH_ANNOTATION = "gkm.io/spec-hash"
IMAGE_ANNOTATION = "gkm.io/image"
EXTRACTED_ANNOTATION = "gkm.io/extracted-digest"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# The PVC is mounted at /gkm and the cache goes one level down: the extractor swaps a finished tree
# into place with a rename, which a volume's mount point itself cannot take part in.
CACHE_MOUNT_PATH = "/gkm"
EXTRACT_DEST = "/gkm/cache"
EXTRACT_CONTAINER = "extract"
# The tools image's unprivileged user; fsGroup makes the PVC writable for it.
EXTRACT_UID = 1000
EXTRACT_CLI_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
# Apply order: a namespace before what lives in it, a PV before the PVC that names it.
KIND_ORDER = ("Namespace", "PersistentVolume", "PersistentVolumeClaim", "Job")
API_VERSIONS = {"Namespace": "v1", "PersistentVolume": "v1", "PersistentVolumeClaim": "v1", "Job": "batch/v1"}
TOLERATIONS_FIX = "pod_template.spec.tolerations"


class PlanError(ValueError):
    """The desired state cannot be planned against this cluster; the message says what to change."""


# ---------------------------------------------------------------- scheduling predicates


def _tolerates(toleration, taint):
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    key = toleration.get("key")
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    return operator == "Exists" or (toleration.get("value") or "") == (taint.get("value") or "")


def node_taints(node):
    """The node's taints, plus the one a cordon implies (the scheduler treats both alike)."""
    spec = node.get("spec") or {}
    taints = list(spec.get("taints") or [])
    if spec.get("unschedulable") and not any(t.get("key") == "node.kubernetes.io/unschedulable" for t in taints):
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
    return taints


def untolerated_taints(node, tolerations):
    """Taints that keep a pod with these tolerations off the node (PreferNoSchedule only discourages)."""
    return [
        taint for taint in node_taints(node)
        if taint.get("effect") in ("NoSchedule", "NoExecute")
        and not any(_tolerates(toleration, taint) for toleration in tolerations or [])
    ]


def format_taint(taint):
    if taint.get("value"):
        return "%s=%s:%s" % (taint["key"], taint["value"], taint["effect"])
    return "%s:%s" % (taint["key"], taint["effect"])


def selector_mismatches(labels, selector):
    """Keys of `selector` whose value the labels do not carry."""
    return sorted(key for key, value in (selector or {}).items() if labels.get(key) != str(value))


def _expression_matches(expression, values_by_key):
    key, operator = expression.get("key"), expression.get("operator")
    values = [str(value) for value in expression.get("values") or []]
    present = key in values_by_key
    value = values_by_key.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def _term_matches(term, node):
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term selects nothing, as in the scheduler
    labels = node["metadata"].get("labels") or {}
    node_fields = {"metadata.name": node["metadata"]["name"]}
    return all(_expression_matches(e, labels) for e in expressions) and all(
        _expression_matches(f, node_fields) for f in fields)


def required_affinity_matches(node, affinity):
    required = ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    return any(_term_matches(term, node) for term in required.get("nodeSelectorTerms") or [])


def gpu_incompatibility(labels, targets):
    """(is_gpu_node, reason): reason is None when the node's GPUs can run one of the image's targets."""
    try:
        gpus = gpus_from_node_labels(labels)
    except GPUSpecError as error:
        return True, "GPU labels unusable: %s" % error
    if not gpus:
        return False, "no gkm.io/gpu-* labels: not a GPU node (use compatibility: ignore to include it)"
    compatible, incompatible = gpus_compatible(targets or [], gpus)
    if compatible:
        return True, None
    gpu = incompatible[0]
    wanted = ", ".join("%s/%s/%s" % (t["backend"], t["arch"], t["warp_size"]) for t in targets or [])
    return True, "GPU %s/%s/%s does not match the image's targets (%s)" % (
        gpu["backend"], gpu["arch"], gpu["warp_size"], wanted or "none")


class Eligibility:
    """Nodes that get the cache, and for every other node the reasons it does not.

    `incompatible` lists GPU nodes whose GPUs cannot run the image (status phase Incompatible);
    `untolerated_taints` counts, per taint, the nodes that only taints keep the Job's pod off.
    """

    def __init__(self):
        self.eligible = []
        self.excluded = {}
        self.incompatible = []
        self.untolerated_taints = {}


def node_eligibility(spec, nodes):
    result = Eligibility()
    tolerations = spec.pod_spec("tolerations", [])
    pod_selector = spec.pod_spec("nodeSelector", {})
    affinity = spec.pod_spec("affinity")
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        labels = node["metadata"].get("labels") or {}
        unselected = selector_mismatches(labels, spec.node_selector)
        if unselected:
            result.excluded[name] = ["not selected by node_selector (%s)" % ", ".join(
                "%s=%s" % (key, spec.node_selector[key]) for key in unselected)]
            continue
        reasons = []
        mismatched = selector_mismatches(labels, pod_selector)
        if mismatched:
            reasons.append("labels do not match pod_template.spec.nodeSelector (%s)" % ", ".join(
                "%s=%s" % (key, pod_selector[key]) for key in mismatched))
        if not required_affinity_matches(node, affinity):
            reasons.append("does not match the required node affinity in pod_template.spec.affinity")
        placeable_but_for_taints = not reasons
        for taint in untolerated_taints(node, tolerations):
            taint_text = format_taint(taint)
            if placeable_but_for_taints:
                result.untolerated_taints[taint_text] = result.untolerated_taints.get(taint_text, 0) + 1
            reasons.append("untolerated taint %s (add a toleration to %s)" % (taint_text, TOLERATIONS_FIX))
        if spec.compatibility != "ignore":
            is_gpu_node, reason = gpu_incompatibility(labels, spec.targets)
            if reason:
                reasons.append(reason)
                if is_gpu_node:
                    result.incompatible.append(name)
        if reasons:
            result.excluded[name] = reasons
        else:
            result.eligible.append(node)
    if spec.compatibility == "fail" and result.incompatible:
        raise PlanError("compatibility is 'fail' and the image cannot run on GPU node(s) %s: %s" % (
            ", ".join(result.incompatible),
            "; ".join("%s: %s" % (n, result.excluded[n][-1]) for n in result.incompatible)))
    return result


# ---------------------------------------------------------------- rendering


def spec_hash(spec_body):
    encoded = json.dumps(spec_body, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()[:16]


def _object(kind, name, namespace, labels, annotations, spec_body):
    metadata = {"name": name, "labels": labels, "annotations": dict(annotations)}
    if namespace:
        metadata["namespace"] = namespace
    metadata["annotations"][SPEC_HASH_ANNOTATION] = spec_hash(spec_body)
    return {"apiVersion": API_VERSIONS[kind], "kind": kind, "metadata": metadata, "spec": spec_body}


def _hostname(node):
    return (node["metadata"].get("labels") or {}).get(HOSTNAME_LABEL)


def _node_name_term(node_name):
    return {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}


def render_pv(spec, slot, node, storage_class_name):
    """A hostPath PV pre-bound to the slot's PVC; per-node PVs carry node affinity for the scheduler."""
    body = {
        "capacity": {"storage": spec.size},
        "accessModes": list(spec.access_modes),
        "persistentVolumeReclaimPolicy": "Retain",
        "storageClassName": storage_class_name,
        "hostPath": {"path": slot.host_path(spec.host_path_root), "type": "DirectoryOrCreate"},
        "claimRef": {"namespace": slot.namespace, "name": slot.pvc_name()},
    }
    if node is not None:
        hostname = _hostname(node)
        term = ({"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [hostname]}]}
                if hostname else _node_name_term(node["metadata"]["name"]))
        body["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return _object("PersistentVolume", slot.pv_name(), None, slot.labels(), {IMAGE_ANNOTATION: spec.image}, body)


def render_pvc(spec, slot, storage_class_name, extracted):
    """The slot's PVC. Our PVs name it in claimRef, which binds them; the PVC itself leaves volumeName
    empty, so with a WaitForFirstConsumer class the scheduler binds it while placing the Job's pod
    (a PVC naming a volume not yet bound would count as an unbound immediate claim and stall the pod).
    """
    body = {
        "accessModes": list(spec.access_modes),
        "resources": {"requests": {"storage": spec.size}},
    }
    if storage_class_name is not None:
        body["storageClassName"] = storage_class_name
    annotations = {IMAGE_ANNOTATION: spec.image}
    if extracted:
        annotations[EXTRACTED_ANNOTATION] = spec.digest
    return _object("PersistentVolumeClaim", slot.pvc_name(), slot.namespace, slot.labels(), annotations, body)


def extraction_command(spec, node):
    """The container command: the tools image runs the collection's cache_extract CLI into the PVC.

    A pinned Job also names its node's GPU, so the extractor re-checks compatibility on its own
    without needing API access to read node labels.
    """
    command = ["python3", "-m", EXTRACT_CLI_MODULE, "--image", spec.image, "--dest", EXTRACT_DEST,
               *spec.extract_args]
    if node is not None and spec.compatibility != "ignore":
        for gpu in gpus_from_node_labels(node["metadata"].get("labels")):
            command += ["--gpu", "%s/%s/%s" % (gpu["backend"], gpu["arch"], gpu["warp_size"]),
                        "--compatibility", "fail"]
    return command


def _pinned_scheduling(spec, node):
    """nodeSelector and affinity of the Job's pod: the user's, with the node pin merged in, never replaced."""
    node_selector = dict(spec.pod_spec("nodeSelector") or {})
    affinity = spec.pod_spec("affinity")
    if node is None:
        return node_selector, affinity
    hostname = _hostname(node)
    if hostname:
        node_selector[HOSTNAME_LABEL] = hostname
        return node_selector, affinity
    # Without a hostname label, pin by node name the way the DaemonSet controller does.
    affinity = copy.deepcopy(affinity) or {}
    required = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    pin = _node_name_term(node["metadata"]["name"])["matchFields"]
    required["nodeSelectorTerms"] = [dict(term, matchFields=(term.get("matchFields") or []) + pin) for term in terms]
    return node_selector, affinity


def render_job(spec, slot, node):
    """The extraction Job, under the restricted Pod Security profile, with bounded retries and lifetime."""
    node_selector, affinity = _pinned_scheduling(spec, node)
    pod_labels = spec.pod_metadata("labels")
    pod_labels.update(slot.labels())
    pod_spec = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": EXTRACT_UID,
            "runAsGroup": EXTRACT_UID,
            "fsGroup": EXTRACT_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [{
            "name": EXTRACT_CONTAINER,
            "image": spec.extract_image,
            "imagePullPolicy": "IfNotPresent",
            "command": extraction_command(spec, node),
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "runAsNonRoot": True,
                "capabilities": {"drop": ["ALL"]},
            },
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            "volumeMounts": [
                {"name": "cache", "mountPath": CACHE_MOUNT_PATH},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }],
        "volumes": [
            {"name": "cache", "persistentVolumeClaim": {"claimName": slot.pvc_name()}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if affinity:
        pod_spec["affinity"] = affinity
    for field in ("tolerations", "priorityClassName"):
        value = spec.pod_spec(field)
        if value:
            pod_spec[field] = value
    template_metadata = {"labels": pod_labels}
    if spec.pod_metadata("annotations"):
        template_metadata["annotations"] = spec.pod_metadata("annotations")
    body = {
        "backoffLimit": spec.job_limits["backoff_limit"],
        "activeDeadlineSeconds": spec.job_limits["active_deadline_seconds"],
        "ttlSecondsAfterFinished": spec.job_limits["ttl_seconds_after_finished"],
        "template": {"metadata": template_metadata, "spec": pod_spec},
    }
    return _object("Job", slot.job_name(), slot.namespace, slot.labels(), {IMAGE_ANNOTATION: spec.image}, body)


def render_namespace(name):
    """Unlabelled: workloads move into it, so it is never ours to delete (undeploy leaves namespaces alone)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


# ---------------------------------------------------------------- live state helpers


def object_ref(obj):
    metadata = obj["metadata"]
    return (obj["kind"], metadata.get("namespace") or "", metadata["name"])


def job_condition(job, condition_type):
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type and condition.get("status") == "True":
            return condition
    return None


def _differs(live, desired):
    """True when the live object holds another digest or was rendered from another spec (immutable parts)."""
    live_metadata = live["metadata"]
    return (
        (live_metadata.get("labels") or {}).get(DIGEST_LABEL) != desired["metadata"]["labels"][DIGEST_LABEL]
        or (live_metadata.get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        != desired["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    )


def _metadata_outdated(live, desired):
    for field in ("labels", "annotations"):
        have = live["metadata"].get(field) or {}
        if any(have.get(key) != value for key, value in desired["metadata"].get(field, {}).items()):
            return True
    return False


def pod_mounts(pods):
    """(namespace, claim name) -> pods that mount it and are not finished; our own Job pods do not count."""
    mounts = {}
    for pod in pods:
        metadata = pod["metadata"]
        if (metadata.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGER:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                mounts.setdefault((metadata.get("namespace") or "", claim), []).append({
                    "namespace": metadata.get("namespace"),
                    "name": metadata["name"],
                    "node": (pod.get("spec") or {}).get("nodeName"),
                    "phase": (pod.get("status") or {}).get("phase"),
                })
    return mounts


def _group_key(kind, obj):
    """Objects of one slot share labels: (namespace, node label, short digest); PVs name theirs in claimRef."""
    labels = obj["metadata"].get("labels") or {}
    namespace = obj["metadata"].get("namespace") or ""
    if kind == "PersistentVolume":
        namespace = ((obj.get("spec") or {}).get("claimRef") or {}).get("namespace") or ""
    return (namespace, labels.get(NODE_LABEL, ""), labels.get(DIGEST_LABEL, ""))


# ---------------------------------------------------------------- the plan


class Action:
    """One write: verb is create, update, replace (delete, wait until gone, create) or delete."""

    __slots__ = ("body", "kind", "name", "namespace", "reason", "verb")

    def __init__(self, verb, body, reason):
        self.verb = verb
        self.body = body
        self.kind, self.namespace, self.name = object_ref(body)
        self.reason = reason

    def to_dict(self):
        return {"action": self.verb, "kind": self.kind, "namespace": self.namespace, "name": self.name,
                "reason": self.reason}


class SlotState:
    """A slot's place in the plan, for the status: current (desired), blocked or outdated (kept)."""

    __slots__ = ("digest", "job", "namespace", "node", "outcome", "pv", "pvc", "reason", "users")

    def __init__(self, outcome, namespace, node, digest, pvc, job, pv=None, users=None, reason=None):
        self.outcome = outcome
        self.namespace = namespace
        self.node = node
        self.digest = digest
        self.pvc = pvc
        self.job = job
        self.pv = pv
        self.users = users or []
        self.reason = reason


class Plan:
    def __init__(self, eligibility):
        self.eligibility = eligibility
        self.actions = []
        self.slots = []
        self.desired = []

    def add(self, verb, body, reason):
        self.actions.append(Action(verb, body, reason))

    def ordered_actions(self):
        rank = {kind: index for index, kind in enumerate(KIND_ORDER)}
        return sorted(self.actions, key=lambda a: (rank[a.kind], a.namespace, a.name))

    def summary(self):
        counts = {}
        for action in self.actions:
            counts.setdefault(action.verb, {}).setdefault(action.kind, 0)
            counts[action.verb][action.kind] += 1
        return counts


class ClusterFacts:
    """What the planner knows about the cluster, as plain API dicts.

    objects: {"PersistentVolumeClaim": [...], "PersistentVolume": [...], "Job": [...]} of this cache only.
    storage_class: the class PVCs use (named or default), or None when the cluster has none.
    pods: pods of the namespaces involved (to find PVCs in use).
    """

    def __init__(self, nodes, namespaces, objects, pods, storage_class=None):
        self.nodes = nodes
        self.namespaces = set(namespaces)
        self.objects = objects
        self.pods = pods
        self.storage_class = storage_class


def _storage(spec, facts):
    """(storage class name for PVCs and PVs, whether we create hostPath PVs)."""
    storage_class = facts.storage_class
    name = storage_class["metadata"]["name"] if storage_class else (spec.storage_class_name or "")
    has_provisioner = bool(storage_class) and storage_class.get("provisioner") != NO_PROVISIONER
    make_pvs = spec.create_pvs == "always" or (spec.create_pvs == "auto" and not has_provisioner)
    return name, make_pvs


class _Planner:
    def __init__(self, spec, facts):
        self.spec = spec
        self.facts = facts
        self.live = {}
        for kind in KIND_ORDER[1:]:
            for obj in facts.objects.get(kind) or []:
                obj = dict(obj, kind=kind)
                self.live[object_ref(obj)] = obj
        self.mounts = pod_mounts(facts.pods)
        self.claimed = set()
        self.plan = None

    def users(self, pvc):
        return self.mounts.get((pvc["metadata"].get("namespace") or "", pvc["metadata"]["name"]), [])

    def run(self):
        spec = self.spec
        present = spec.state == "present"
        nodes = self.facts.nodes if present else []
        self.plan = Plan(node_eligibility(spec, nodes) if present else Eligibility())
        if present:
            self._namespaces()
            storage_class_name, make_pvs = _storage(spec, self.facts)
            for namespace in spec.namespaces:
                if spec.per_node:
                    for node in self.plan.eligibility.eligible:
                        slot = Slot(spec.name, spec.cache_namespace, namespace, node["metadata"]["name"], spec.digest)
                        self._slot(slot, node, storage_class_name, make_pvs)
                else:
                    slot = Slot(spec.name, spec.cache_namespace, namespace, "", spec.digest)
                    self._slot(slot, None, storage_class_name, make_pvs)
        self._stale()
        return self.plan

    def _namespaces(self):
        missing = [ns for ns in self.spec.namespaces if ns not in self.facts.namespaces]
        if missing and not self.spec.create_namespaces:
            raise PlanError("namespace(s) %s do not exist: create them first or set create_namespaces: true"
                            % ", ".join(missing))
        for namespace in missing:
            self.plan.add("create", render_namespace(namespace), "namespace does not exist")

    def _slot(self, slot, node, storage_class_name, make_pvs):
        spec, plan = self.spec, self.plan
        pv = render_pv(spec, slot, node if spec.per_node else None, storage_class_name) if make_pvs else None
        pvc_ref = ("PersistentVolumeClaim", slot.namespace, slot.pvc_name())
        job_ref = ("Job", slot.namespace, slot.job_name())
        pv_ref = ("PersistentVolume", "", slot.pv_name())
        pvc_live, job_live = self.live.get(pvc_ref), self.live.get(job_ref)
        pv_live = self.live.get(pv_ref) if make_pvs else None
        job_done = job_live is not None and job_condition(job_live, "Complete") is not None
        marked = pvc_live is not None and (pvc_live["metadata"].get("annotations") or {}).get(
            EXTRACTED_ANNOTATION) == spec.digest
        pvc = render_pvc(spec, slot, storage_class_name, False)
        fresh = pvc_live is None or _differs(pvc_live, pvc) or (pv is not None and (
            pv_live is None or _differs(pv_live, pv)))
        state = SlotState("current", slot.namespace, slot.node, short_digest(spec.digest), slot.pvc_name(),
                          slot.job_name(),
                          pv["metadata"]["name"] if pv else None)
        plan.slots.append(state)
        if fresh and pvc_live is not None:
            users = self.users(pvc_live)
            if users and not spec.force:
                # Leave the old PVC (and its group) to the stale pass, which keeps it as outdated.
                state.outcome = "blocked"
                state.users = users
                state.reason = "PVC %s/%s holds other content and is mounted by %s; it is replaced once unused" % (
                    slot.namespace, slot.pvc_name(), ", ".join(u["name"] for u in users))
                return
        extracted = not fresh and (marked or job_done)
        if extracted:
            pvc = render_pvc(spec, slot, storage_class_name, True)
        job = render_job(spec, slot, node if spec.per_node else None)
        plan.desired.extend(obj for obj in (pv, pvc, job) if obj is not None)
        if fresh:
            for desired, live in ((pv, pv_live), (pvc, pvc_live), (job, job_live)):
                if desired is None:
                    continue
                if live is None:
                    plan.add("create", desired, "missing")
                else:
                    self.claimed.add(object_ref(live))
                    plan.add("replace", desired, "holds another digest or spec; recreated empty")
            return
        for desired, live in ((pv, pv_live), (pvc, pvc_live)):
            if desired is not None:
                self.claimed.add(object_ref(live))
                if _metadata_outdated(live, desired):
                    plan.add("update", desired, "labels or annotations differ")
        if job_live is None:
            if not extracted:
                plan.add("create", job, "missing")
            return
        self.claimed.add(object_ref(job_live))
        if _differs(job_live, job):
            if not extracted:
                plan.add("replace", job, "pod template changed before extraction finished")
        elif _metadata_outdated(job_live, job):
            plan.add("update", job, "labels or annotations differ")

    def _stale(self):
        """Group unclaimed live objects by slot; delete each group unless a pod still mounts its PVC."""
        spec, plan = self.spec, self.plan
        groups = {}
        for ref, obj in self.live.items():
            if ref not in self.claimed:
                groups.setdefault(_group_key(ref[0], obj), []).append(obj)
        for (namespace, node, digest), members in sorted(groups.items()):
            pvcs = [obj for obj in members if obj["kind"] == "PersistentVolumeClaim"]
            users = [user for pvc in pvcs for user in self.users(pvc)]
            names = {obj["kind"]: obj["metadata"]["name"] for obj in members}
            keep_reason = None
            if users and not spec.force:
                keep_reason = "mounted by %s" % ", ".join(u["name"] for u in users)
            elif not spec.prune and spec.state == "present":
                keep_reason = "prune is false"
            if keep_reason:
                plan.slots.append(SlotState(
                    "outdated", namespace, node, digest, names.get("PersistentVolumeClaim"), names.get("Job"),
                    names.get("PersistentVolume"), users, keep_reason))
                continue
            for obj in members:
                plan.add("delete", obj, "no longer desired (%s)" % _stale_reason(spec, namespace, node, digest))


def _stale_reason(spec, namespace, node, digest):
    if spec.state == "absent":
        return "state is absent"
    if namespace not in spec.namespaces:
        return "namespace %s is no longer a workload namespace" % namespace
    if spec.digest and digest != short_digest(spec.digest):
        return "old digest %s" % digest
    if node:
        return "node %s left or is no longer eligible" % node
    return "superseded"


def plan(spec, facts):
    """The Plan for one cache. Raises PlanError before anything is written when the input cannot work."""
    return _Planner(spec, facts).run()
