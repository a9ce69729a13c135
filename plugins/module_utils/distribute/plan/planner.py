# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The distribution planner: from a cache's desired state and the cluster's facts to objects and actions.

Which nodes qualify is scheduling.py's job, the objects themselves render.py's.

Pure: no API calls. `plan(spec, facts)` returns which nodes are eligible (and why the others are not),
the PVCs, hostPath PVs and extraction Jobs the cache needs, and the create/update/replace/delete
actions that take the cluster there. Objects that belong to an old digest, a node that left or a
namespace no longer listed are pruned, except a PVC that a live pod still mounts: it is kept and
reported as outdated until a later run finds it unused.

Make before break: when the digest changes, a node's slot of a previous digest that was extracted (its PVC
marked, or its Job complete) is kept, with its PV and Job, until the node's new PVC is marked extracted; a serving
PVC keeps its previous digest until every eligible node's new PVC in its namespace is marked, and the node slots
it reads stay with it (previous_slots.py). Both are reported as outdated with the reason KEPT_UNTIL_REPLACED,
then released (deleted unless a pod still mounts them) by the first run after the new digest is in place.

Change detection does not diff whole objects: every object carries a hash of the spec we rendered
(`gkm.io/spec-hash`), so a re-run compares one annotation and our labels and writes nothing when
they match. An extracted slot's Job is not even rendered (the largest object, the most of a re-run's
planning) unless its labels, image or owner differ: nothing else of it can lead to a write.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


from ansible_collections.gkm.cluster.plugins.module_utils.contract.marks import holds_extracted
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import Slot, short_digest, slot_namespace
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DIGEST_LABEL,
    IMAGE_ANNOTATION,
    NODE_LABEL,
    SLOT_NAMESPACE_LABEL,
    SPEC_HASH_ANNOTATION,
    STORE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import (
    job_condition,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import registry_secret
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.spec import MAX_DIGESTS
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import (
    conflicts,
    failure_record,
    ownership,
    previous_slots,
    scrub,
    serving,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.pod_use import (
    claim_holder,
    claims_named,
    holders_text,
    pod_user,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.render import (
    in_system_namespace,
    job_namespace,
    render_access,
    render_job,
    render_namespace,
    render_pv,
    render_pvc,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scheduling import (
    Eligibility,
    PlanError,
    node_eligibility,
)

NO_PROVISIONER = "kubernetes.io/no-provisioner"
# Apply order: a namespace before what lives in it, a PV before the PVC that names it, a Secret and a PVC
# before the Job whose pod mounts them.
KIND_ORDER = ("Namespace", "Secret", "PersistentVolume", "PersistentVolumeClaim", "Job")
# The SlotState outcome (and the status entry's reason) of a previous digest's slot kept for make before break.
PREVIOUS = "previous"
KEPT_UNTIL_REPLACED = "KeptUntilReplaced"
# The SlotState outcome (and the status entry's reason) of a node a rolling upgrade holds on its previous digest.
HELD = "held"
WAITING_FOR_WAVE = "WaitingForWave"
# The SlotState outcome (and the status entry's reason) of a node's new slot not planned while the node holds as many
# digests of the cache as extract_limits.max_digests allows (previous_slots.held_digests).
LIMITED = "limited"
DIGEST_LIMIT = "DigestLimit"
# The SlotState outcome of a namespace where a cluster cache is refused (conflicts.py): nothing is planned there.
REFUSED = "refused"


# ---------------------------------------------------------------- live state helpers


def object_ref(obj):
    metadata = obj["metadata"]
    return (obj["kind"], metadata.get("namespace") or "", metadata["name"])


def _differs(live, desired):
    """True when the live object holds another digest or was rendered from another spec (immutable parts)."""
    live_metadata = live["metadata"]
    return (
        (live_metadata.get("labels") or {}).get(DIGEST_LABEL) != desired["metadata"]["labels"][DIGEST_LABEL]
        or (live_metadata.get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        != desired["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    )


def _job_metadata(spec, slot, in_system):
    """A slot's Job as render_job names, labels, annotates and owns it, without its spec or spec hash: all an
    extracted slot's live Job is compared with (a Job whose spec differs is replaced only before extraction)."""
    return ownership.mark({"kind": "Job", "metadata": {
        "name": slot.job_name(), "namespace": job_namespace(spec, slot, in_system),
        "labels": slot.system_labels() if in_system else slot.labels(),
        "annotations": {IMAGE_ANNOTATION: spec.image}}}, spec.owner)


def _metadata_outdated(live, desired):
    if ownership.references_outdated(live, desired):
        return True
    for field in ("labels", "annotations"):
        have = live["metadata"].get(field) or {}
        if any(have.get(key) != value for key, value in desired["metadata"].get(field, {}).items()):
            return True
    return False


def pod_mounts(pods):
    """(namespace, claim name) -> the pods that hold it (pod_use.claim_holder): those not finished, and finished
    ones until they are deleted; our own Job pods do not count."""
    mounts = {}
    for pod in filter(claim_holder, pods):
        for claim in claims_named(pod):
            mounts.setdefault((pod["metadata"].get("namespace") or "", claim), []).append(pod_user(pod))
    return mounts


def _group_key(kind, obj):
    """Objects of one slot share labels: (namespace, node label, short digest); PVs name theirs in claimRef, those in
    the system namespace (and the PVs bound there) in a label."""
    labels = obj["metadata"].get("labels") or {}
    namespace = slot_namespace(obj)
    if kind == "PersistentVolume" and not labels.get(SLOT_NAMESPACE_LABEL) and not labels.get(STORE_LABEL):
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
    """A slot's place in the plan, for the status: current (desired), blocked, outdated (kept while mounted or
    unpruned) or previous (kept until the new digest replaces it)."""

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
        # The objects rendered: all of a new or changed slot's; an extracted slot's Job only when it was compared.
        self.desired = []
        # The upgrade_waves.WavePlan whose holds this plan was made with (set by the runner), or None.
        self.rollout = None
        # The directories (scrub.directory) of the live PVs the plan leaves in place: the scrub spares them.
        self.kept_directories = frozenset()

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

    def to_result(self):
        """What a module result shows of the plan: counts per verb and kind, and every action."""
        return {"summary": self.summary(), "actions": [action.to_dict() for action in self.ordered_actions()]}


def _storage(spec, facts):
    """(storage class name for PVCs and PVs, whether we create hostPath PVs, whether Jobs set the volume owner).

    fsGroup does not apply to hostPath volumes, so the Jobs filling ours run the extractor as root.
    """
    storage_class = facts.storage_class
    name = storage_class["metadata"]["name"] if storage_class else (spec.storage_class_name or "")
    has_provisioner = bool(storage_class) and storage_class.get("provisioner") != NO_PROVISIONER
    make_pvs = spec.create_pvs == "always" or (spec.create_pvs == "auto" and not has_provisioner)
    set_owner = spec.set_volume_owner == "always" or (spec.set_volume_owner == "auto" and make_pvs)
    return name, make_pvs, set_owner


def _refuse_shared_host_path(spec, make_pvs):
    """ReadOnlyMany means one volume every node mounts; a hostPath PV is a directory on whichever node mounts it, so
    the one Job would fill one node's and every other node's pods would mount an empty one. Refused before anything
    is written, with the two ways that work."""
    if spec.per_node or not make_pvs or spec.host_path_read_only_many:
        return
    why = ("create_pvs is always" if spec.create_pvs == "always"
           else "the cluster has no provisioner for storage_class_name %r" % (spec.storage_class_name or "")
           if spec.storage_class_name else "the cluster has no default storage class with a provisioner")
    raise PlanError(
        "access_modes ReadOnlyMany needs a volume every node shares, and %s, so the cache would get hostPath PVs: "
        "one node's directory, filled by one Job, and an empty directory on every other node. Use access_modes "
        "[ReadWriteOnce] (a copy on each node, which pods read through the serving PVC), or a storage_class_name "
        "whose provisioner makes volumes shared across nodes (NFS, CephFS) with create_pvs auto "
        "(host_path_read_only_many allows it on a cluster of one node)" % why,
        reason="InvalidSpec")


def _refuse_labels_in_system_namespace(spec, in_system):
    """A label on a pod in the system namespace can put it behind a Service or PodDisruptionBudget there, or under a
    NetworkPolicy, of the collection's (the webhook's: a Service routing admission reviews to an extraction pod) or of
    whatever else the admin runs there, whose selectors the collection cannot know; so none is copied there."""
    if in_system and spec.pod_metadata("labels"):
        raise PlanError(
            "pod_template.metadata.labels is refused: the extraction Jobs run in the system namespace %s "
            "(system_namespace_jobs), where a label could match a selector of a Service, PodDisruptionBudget or "
            "NetworkPolicy there; remove it" % spec.system_namespace,
            reason="InvalidSpec")


class _SlotWork:
    """One slot as _Planner._slot found it: its rendered PV, what is live of it, whether its PVC is marked extracted
    (at the current digest), whether its Job of before the system namespace completed, and whether its PV and PVC
    must be (re)created (fresh)."""

    __slots__ = ("fresh", "marked", "moved_done", "pv", "pv_live", "pvc_live", "slot")

    def __init__(self, slot, pv, pv_live, pvc_live, marked, moved_done):
        self.slot = slot
        self.pv = pv
        self.pv_live = pv_live
        self.pvc_live = pvc_live
        self.marked = marked
        self.moved_done = moved_done
        self.fresh = False


class _Extraction:
    """The slots one extraction Job fills, on `node` (None: a ReadOnlyMany slot's unpinned Job)."""

    __slots__ = ("node", "works")

    def __init__(self, node):
        self.node = node
        self.works = []


class _Planner:
    def __init__(self, spec, facts, hold=()):
        self.spec = spec
        self.facts = facts
        # Node names a rolling upgrade (upgrade_waves.py) keeps on their previous digest.
        self.hold = frozenset(hold)
        self.live = {}
        for kind in KIND_ORDER[1:]:
            for obj in facts.objects.get(kind) or []:
                obj = dict(obj, kind=kind)
                self.live[object_ref(obj)] = obj
        self.mounts = pod_mounts(facts.pods)
        self.serving_users = serving.users_by_slot(self.live.values(), self.mounts)
        self.claimed = set()
        # (namespace, node label) -> whether the node's current slot is Extracted; namespace -> the short digest
        # its serving PVC keeps: what make before break keeps previous slots for.
        self.current_extracted = {}
        self.serving_kept = {}
        # node label -> {previous short digest: pods using it} the node keeps (extract_limits.max_digests).
        self.held = {}
        # Where the Jobs, so their registry Secret, are: the system namespace, or the workload namespaces when the
        # slots are provisioned volumes (render.job_namespace). A Secret elsewhere is from before (issue 31).
        self.secret_namespaces = set()
        # _storage's (storage class name, whether we create hostPath PVs, whether Jobs set the volume owner).
        self.storage = None
        # Job reference -> the _Extraction of the slots that Job fills, in the order the slots were planned.
        self.extractions = {}
        self.plan = None

    def users(self, pvc):
        """Pods that mount the PVC, and for a node's slot the pods reading it through the serving PVC."""
        own = self.mounts.get((pvc["metadata"].get("namespace") or "", pvc["metadata"]["name"]), [])
        return own + self.serving_users.get(serving.slot_key(pvc), [])

    def run(self):
        spec = self.spec
        present = spec.state == "present"
        nodes = self.facts.nodes if present else []
        self.plan = Plan(node_eligibility(spec, nodes) if present else Eligibility())
        # imageVolume mode: pods pull the image themselves; the stale pass removes what an earlier PVC mode left.
        if present and not spec.image_volume:
            refused = conflicts.refuse_conflicts(spec, self.facts.rivals, self.facts.named_claims)
            self._namespaces()
            storage = self.storage = _storage(spec, self.facts)
            _refuse_shared_host_path(spec, storage[1])
            in_system = in_system_namespace(spec, storage[1])
            _refuse_labels_in_system_namespace(spec, in_system)
            if in_system:
                if spec.system_namespace not in self.facts.namespaces:
                    self.plan.add("create", scrub.system_namespace(spec.system_namespace),
                                  "the system namespace, where the extraction Jobs run, does not exist")
                self.secret_namespaces = {spec.system_namespace}
                self._registry_secret(spec.system_namespace)
            if spec.per_node and spec.extract_limits.get(MAX_DIGESTS):
                self.held = self._held_digests()
            for namespace in spec.namespaces:
                if namespace in refused:
                    self.plan.slots.append(SlotState(REFUSED, namespace, None, short_digest(spec.digest), spec.name,
                                                     None, reason=refused[namespace]))
                    continue
                if not in_system:
                    self.secret_namespaces.add(namespace)
                    self._registry_secret(namespace)
                if spec.per_node:
                    for node in self.plan.eligibility.eligible:
                        slot = Slot(spec.name, spec.cache_namespace, namespace, node["metadata"]["name"], spec.digest,
                                    in_system)
                        if node["metadata"]["name"] in self.hold:
                            self._held(slot)
                        elif not self._over_digest_limit(slot):
                            self._slot(slot, node, storage[0], storage[1])
                else:
                    self._slot(Slot(spec.name, spec.cache_namespace, namespace, "", spec.digest, in_system), None,
                               storage[0], storage[1])
                if serving.wanted(spec, storage[1]) and self.plan.eligibility.eligible:
                    self._serving(namespace, in_system)
            for extraction in self.extractions.values():
                self._extract(extraction, in_system)
        self._stale()
        self.plan.kept_directories = self._kept_directories()
        return self.plan

    def _kept_directories(self):
        """The directories of the live hostPath PVs no action of the plan deletes or replaces: a node's store, which
        every namespace's slot of the node (and the Job's access PV) points at, stays while one of them does, so the
        scrub of another's PV must leave it."""
        going = {(action.kind, action.namespace, action.name) for action in self.plan.actions
                 if action.verb in ("delete", "replace")}
        return frozenset(scrub.directory(obj) for ref, obj in self.live.items()
                         if ref[0] == "PersistentVolume" and ref not in going and scrub.host_path(obj))

    def _registry_secret(self, namespace):
        """Create or update the namespace's registry Secret; its content is compared, there is no spec hash."""
        desired = ownership.mark(registry_secret.render_secret(self.spec, namespace), self.spec.owner)
        if desired is None:
            return
        self.plan.desired.append(desired)
        live = self.live.get(object_ref(desired))
        if live is None:
            self.plan.add("create", desired, "missing")
            return
        self.claimed.add(object_ref(live))
        if (live.get("data") or {}) != desired["data"] or _metadata_outdated(live, desired):
            self.plan.add("update", desired, "registry credentials, CA or signature key changed")

    def _namespaces(self):
        missing = [ns for ns in self.spec.namespaces if ns not in self.facts.namespaces]
        if missing and not self.spec.create_namespaces:
            raise PlanError("namespace(s) %s do not exist: create them first or set create_namespaces: true"
                            % ", ".join(missing), reason="NoNamespace")
        for namespace in missing:
            self.plan.add("create", render_namespace(namespace), "namespace does not exist")

    def _held(self, slot):
        """A node waiting for its wave: no new slot, and its previous one stays (make before break)."""
        self.current_extracted[(slot.namespace, slot.labels()[NODE_LABEL])] = False
        self.plan.slots.append(SlotState(
            HELD, slot.namespace, slot.node, short_digest(self.spec.digest), slot.pvc_name(), slot.job_name(),
            reason="waits for its upgrade wave (spec.upgradePolicy); the node serves its previous digest meanwhile"))

    def _held_digests(self):
        groups = {}
        for ref, obj in self.live.items():
            if ref[0] in ("PersistentVolumeClaim", "Job"):
                groups.setdefault(_group_key(ref[0], obj), []).append(obj)
        return previous_slots.held_digests(_with_stores(groups)[0], short_digest(self.spec.digest), self.users)

    def _over_digest_limit(self, slot):
        """True, the slot recorded as LIMITED, for a node's new slot (no PVC yet) while the node holds max_digests
        previous digests (the new one would be one over): nothing of it is written, so nothing is deleted under a
        pod, and the node keeps serving its previous digest (make before break) until a pod ends and a later run
        frees one. A slot that exists stays."""
        limit = self.spec.extract_limits.get(MAX_DIGESTS)
        label = slot.labels()[NODE_LABEL]
        held = self.held.get(label, {})
        if not limit or len(held) < limit or ("PersistentVolumeClaim", slot.namespace, slot.pvc_name()) in self.live:
            return False
        self.current_extracted[(slot.namespace, label)] = False
        self.plan.slots.append(SlotState(
            LIMITED, slot.namespace, slot.node, short_digest(self.spec.digest), slot.pvc_name(), slot.job_name(),
            reason=previous_slots.over_limit_reason(self.spec, slot.node, held, limit)))
        return True

    def _slot(self, slot, node, storage_class_name, make_pvs):
        """The slot's state and what is live of it; its writes wait for _extract, which decides them with the other
        slots its Job fills."""
        spec, plan = self.spec, self.plan
        pv = ownership.mark(render_pv(spec, slot, node if spec.per_node else None, storage_class_name)
                            if make_pvs else None, spec.owner)
        pvc_ref = ("PersistentVolumeClaim", slot.namespace, slot.pvc_name())
        in_system = in_system_namespace(spec, make_pvs)
        job_ref = ("Job", job_namespace(spec, slot, in_system), slot.job_name())
        pvc_live = self.live.get(pvc_ref)
        pv_live = self.live.get(("PersistentVolume", "", slot.pv_name())) if make_pvs else None
        # The slot's Job from before the Jobs moved to the system namespace: its completion counts (make before
        # break), then it goes.
        moved = self.live.get(("Job", slot.namespace, slot.job_name())) if job_ref[1] != slot.namespace else None
        if moved is not None:
            self.claimed.add(object_ref(moved))
            plan.add("delete", moved, "extraction Jobs run in namespace %s now" % job_ref[1])
        work = _SlotWork(slot, pv, pv_live, pvc_live, holds_extracted(pvc_live, spec.digest),
                         moved is not None and job_condition(moved, "Complete") is not None)
        work.fresh = pvc_live is None or _differs(pvc_live, self._pvc(work, False)) or (pv is not None and (
            pv_live is None or _differs(pv_live, pv)))
        state = SlotState("current", slot.namespace, slot.node, short_digest(spec.digest), slot.pvc_name(),
                          slot.job_name(),
                          pv["metadata"]["name"] if pv else None)
        plan.slots.append(state)
        if work.fresh and pvc_live is not None:
            users = self.users(pvc_live)
            if users and not spec.force:
                # Leave the old PVC (and its group) to the stale pass, which keeps it as outdated.
                state.outcome = "blocked"
                state.users = users
                state.reason = "PVC %s/%s holds other content and is mounted by %s; it is replaced once unused" % (
                    slot.namespace, slot.pvc_name(), ", ".join(u["name"] for u in users))
                return
        if slot.node:
            # Released once the live PVC carries the mark: the webhook then hands out the new PVC (view.py).
            self.current_extracted[(slot.namespace, slot.labels()[NODE_LABEL])] = work.marked and not work.fresh
        self.extractions.setdefault(job_ref, _Extraction(node if spec.per_node else None)).works.append(work)

    def _pvc(self, work, extracted):
        return ownership.mark(render_pvc(self.spec, work.slot, self.storage[0], extracted), self.spec.owner)

    def _extract(self, extraction, in_system):
        """The writes of the slots one Job fills: its own slot, or with the store every namespace's slot of a node.

        The store's content is the digest's, extracted under the cache's current spec, once one of its slots is marked
        so (or its Job completed): a namespace's slot made afterwards gets the mark at once, and no Job.
        """
        spec, plan = self.spec, self.plan
        works, node = extraction.works, extraction.node
        slot = works[0].slot
        job_live = self.live.get(("Job", job_namespace(spec, slot, in_system), slot.job_name()))
        job_done = job_live is not None and job_condition(job_live, "Complete") is not None
        extracted = any(not w.fresh and (w.marked or w.moved_done or job_done) for w in works)
        fresh = any(w.fresh for w in works)
        job = None
        if fresh or not extracted or (job_live is not None and _metadata_outdated(
                job_live, _job_metadata(spec, slot, in_system))):
            job = ownership.mark(render_job(spec, slot, node, self.storage[2], in_system), spec.owner)
        failure = None
        if not (fresh or extracted):
            failure = next(filter(None, (self._failure(w.pvc_live, job_live, job) for w in works)), None)
        if in_system:
            self._access(slot, node, self.storage[0], not extracted and (fresh or failure is None))
        for work in works:
            self._slot_writes(work, extracted, failure)
        if job is not None and not extracted:
            plan.desired.append(job)
        if job_live is not None:
            self.claimed.add(object_ref(job_live))
        if extracted:
            if job_live is None:
                return
            if in_system and any(w.marked and not w.fresh for w in works):
                # Its finished pod keeps the PVC it wrote through from going (PVC protection counts every scheduled
                # pod); the mark on the slots' PVCs is the extraction's record now.
                plan.add("delete", job_live, "the slot is extracted and marked so")
            elif job is not None and not _differs(job_live, job) and _metadata_outdated(job_live, job):
                plan.desired.append(job)
                plan.add("update", job, "labels or annotations differ")
            return
        if fresh:
            plan.add("create" if job_live is None else "replace", job, "missing" if job_live is None else
                     "holds another digest or spec; recreated empty")
        elif job_live is None:
            if failure is None:
                plan.add("create", job, "missing")
        elif _differs(job_live, job):
            if failure is None:
                plan.add("replace", job, "pod template changed before extraction finished")
        elif _metadata_outdated(job_live, job):
            plan.add("update", job, "labels or annotations differ")

    def _slot_writes(self, work, extracted, failure):
        """A slot's PV and PVC: created or replaced when fresh, else updated as their metadata, the extraction's mark
        or the failure record differ."""
        plan = self.plan
        pvc = self._pvc(work, extracted)
        if failure is not None and not work.fresh:
            pvc = failure_record.record(pvc, short_digest(self.spec.digest), failure)
        plan.desired.extend(obj for obj in (work.pv, pvc) if obj is not None)
        for desired, live in ((work.pv, work.pv_live), (pvc, work.pvc_live)):
            if desired is None:
                continue
            if work.fresh:
                if live is None:
                    plan.add("create", desired, "missing")
                else:
                    self.claimed.add(object_ref(live))
                    plan.add("replace", desired, "holds another digest or spec; recreated %s" % (
                        "at the node's store, already extracted" if extracted else "empty"))
                continue
            self.claimed.add(object_ref(live))
            if _metadata_outdated(live, desired):
                plan.add("update", desired, "labels or annotations differ")
            elif live is work.pvc_live and failure is None and failure_record.has_record(live):
                plan.add("update", desired, "the failure record is for another Job template: retried")

    def _access(self, slot, node, storage_class_name, wanted):
        """The PVC and PV of the system namespace the slot's Job writes through: while the slot waits for its
        extraction, then deleted (the slot's own PV keeps the directory), so an extracted cache has no more objects
        than before the Jobs moved."""
        spec = self.spec
        for desired in render_access(spec, slot, node, storage_class_name):
            desired = ownership.mark(desired, spec.owner)
            live = self.live.get(object_ref(desired))
            if live is not None:
                self.claimed.add(object_ref(live))
            if wanted:
                self.plan.desired.append(desired)
                if live is None:
                    self.plan.add("create", desired, "missing")
            elif live is not None:
                self.plan.add("delete", live, "the slot's extraction finished")

    def _failure(self, pvc_live, job_live, job):
        """The slot's failed extraction with the Job as now rendered: recorded on its PVC, or said by its failed Job
        (then recorded now); such a slot gets no Job until its PVC is deleted or the Job's template changes
        (failure_record.py)."""
        job_hash = job["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        failure = failure_record.recorded(pvc_live, short_digest(self.spec.digest), job_hash)
        if failure is None and pvc_live is not None and job_live is not None and not _differs(job_live, job):
            failure = failure_record.job_failure(job_live, failure_record.pods_of(job_live, self.facts.pods))
            if failure is not None:
                failure.job = job_hash
        return failure

    def _serving(self, namespace, shared):
        """The namespace's serving PV and PVC (serving.py). One mounted at another digest is left to the stale
        pass, which keeps it as outdated until it is unused; once every node has the current digest, the alias
        serves that digest to new pods meanwhile."""
        pv, pvc = self._rendered_serving(namespace, shared, alias=False)
        alias = self._rendered_serving(namespace, shared, alias=True)
        pvc_live = self.live.get(object_ref(pvc))
        if pvc_live is not None and _differs(pvc_live, pvc) and not self.spec.force:
            if self.users(pvc_live):
                if self._every_node_extracted(namespace):
                    self._want_serving(namespace, *alias)
                return
            if not self._every_node_extracted(namespace):
                self.serving_kept[namespace] = (pvc_live["metadata"].get("labels") or {}).get(DIGEST_LABEL, "")
                return
        self._want_serving(namespace, pv, pvc)
        # An alias at the current digest stays while pods mount it; unused, the stale pass deletes it.
        alias_live = self.live.get(object_ref(alias[1]))
        if alias_live is not None and not _differs(alias_live, alias[1]) and self.users(alias_live):
            self._want_serving(namespace, *alias)

    def _rendered_serving(self, namespace, shared, alias):
        rendered = serving.render(self.spec, namespace, shared, alias)
        return tuple(ownership.mark(obj, self.spec.owner) for obj in rendered)

    def _want_serving(self, namespace, pv, pvc):
        """Desire a serving PV and PVC: created, replaced or updated as they differ from the live ones."""
        spec = self.spec
        self.plan.slots.append(SlotState(serving.SERVING, namespace, "", short_digest(spec.digest),
                                         pvc["metadata"]["name"], None, pv["metadata"]["name"]))
        self.plan.desired.extend((pv, pvc))
        for desired in (pv, pvc):
            live = self.live.get(object_ref(desired))
            if live is None:
                self.plan.add("create", desired, "missing")
                continue
            self.claimed.add(object_ref(live))
            if _differs(live, desired):
                self.plan.add("replace", desired, "holds another digest or spec")
            elif _metadata_outdated(live, desired):
                self.plan.add("update", serving.as_update(desired, live), "labels or annotations differ")

    def _every_node_extracted(self, namespace):
        return all(extracted for (slot_namespace, _node), extracted in self.current_extracted.items()
                   if slot_namespace == namespace)

    def _stale(self):
        """Group unclaimed live objects by slot; delete each group unless a pod still mounts its PVC or make before
        break keeps it."""
        spec, plan = self.spec, self.plan
        groups = {}
        for ref, obj in self.live.items():
            if ref in self.claimed:
                continue
            if ref[0] == "Secret":
                # A registry Secret serves the Jobs of a namespace, not a slot: removed once unused, never reported;
                # one where no Job of ours runs any more at once, whatever prune says (the admin's credentials).
                if spec.prune or spec.state == "absent" or ref[1] not in self.secret_namespaces:
                    plan.add("delete", obj, "no longer desired (%s)" % (
                        "state is absent" if spec.state == "absent" else "no registry credentials, CA or signature "
                        "key, or no Job of the cache runs in namespace %s" % ref[1]))
                continue
            groups.setdefault(_group_key(ref[0], obj), []).append(obj)
        with_stores, stores = _with_stores(groups)
        previous = set()
        if spec.state == "present" and not spec.force:
            previous = previous_slots.kept_groups(with_stores, self.current_extracted, self.serving_kept,
                                                  spec.namespaces)
        kept = set()
        for (namespace, node, digest), members in sorted(groups.items()):
            if not namespace:
                continue
            pvcs = [obj for obj in members if obj["kind"] == "PersistentVolumeClaim"]
            users = [user for pvc in pvcs for user in self.users(pvc)]
            names = {obj["kind"]: obj["metadata"]["name"]
                     for obj in stores.get((node, digest), []) + members if obj["kind"] != "PersistentVolumeClaim"}
            names.update((obj["kind"], obj["metadata"]["name"]) for obj in pvcs)
            if (namespace, node, digest) in previous:
                kept.add((node, digest))
                plan.slots.append(SlotState(
                    PREVIOUS, namespace, node, digest, names.get("PersistentVolumeClaim"), names.get("Job"),
                    names.get("PersistentVolume"), users,
                    previous_slots.kept_reason(spec, namespace, node, digest, users)))
                continue
            keep_reason = None
            if users and not spec.force:
                keep_reason = holders_text(users)
            elif not spec.prune and spec.state == "present":
                keep_reason = "prune is false"
            if keep_reason:
                kept.add((node, digest))
                plan.slots.append(SlotState(
                    "outdated", namespace, node, digest, names.get("PersistentVolumeClaim"), names.get("Job"),
                    names.get("PersistentVolume"), users, keep_reason))
                continue
            for obj in members:
                plan.add("delete", obj, "no longer desired (%s)" % _stale_reason(spec, namespace, node, digest))
        # A node's store stays with the slots kept of its digest there, as its Job stayed with its slot.
        for (node, digest), members in sorted(stores.items()):
            if (node, digest) not in kept:
                for obj in members:
                    plan.add("delete", obj, "no longer desired (%s)" % _stale_reason(spec, "", node, digest))


def _with_stores(groups):
    """({slot group key: its objects and those of its node's store of that digest}, {(node, digest): the store's
    objects}): a store Job's completion is each of its slots' extraction (previous_slots), but the store's objects
    are deleted once, after its slots."""
    stores = {(node, digest): members for (namespace, node, digest), members in groups.items() if not namespace}
    return {key: members + stores.get(key[1:], []) for key, members in groups.items() if key[0]}, stores


def _stale_reason(spec, namespace, node, digest):
    if spec.state == "absent":
        return "state is absent"
    if namespace and namespace not in spec.namespaces:
        return "namespace %s is no longer a workload namespace" % namespace
    if spec.digest and digest != short_digest(spec.digest):
        return "old digest %s" % digest
    if node:
        return "node %s left or is no longer eligible" % node
    return "superseded"


def plan(spec, facts, hold=()):
    """The Plan for one cache. Raises PlanError before anything is written when the input cannot work.

    hold: node names a rolling upgrade's WavePlan keeps on their previous digest (upgrade_waves.WavePlan.holds).
    """
    return _Planner(spec, facts, hold).run()
