# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One reconcile of a distributed cache, and the read-only report of any cache.

`distribute` resolves the image to a digest, reads the cluster with one label-selected LIST per
kind, plans, has the API server validate every object it would write (dry_run.py), writes the plan
(server-side dry run in check mode), optionally waits for the extraction Jobs, and returns the plan,
the status and the request counts. `describe` returns
the same status for caches known only from the cluster.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.common.naming import cache_selector, managed_selector
from ansible_collections.gkm.cluster.plugins.module_utils.common.timings import Timings
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import (
    conflicts,
    dry_run,
    image_signature,
    image_volume,
    node_readiness_runner,
    registry_secret,
    rollout,
    verification,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import plan as planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.node_writer import (
    sync_for_spec,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.scheduling import node_facts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.scrub_runner import NodeDiskScrub
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.serving import SERVING
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.spec import (
    SpecError,
    cache_spec_from_params,
    pin_image,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import (
    ERROR,
    EXTRACTED,
    UNSCHEDULABLE,
    cache_status,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.upgrade_waves import state_label_key
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.workload_restarts_runner import Evictions
from ansible_collections.gkm.cluster.plugins.module_utils.oci.args import registry_options
from ansible_collections.gkm.cluster.plugins.module_utils.oci.metadata import (
    CacheMetadataError,
    parse_cache_metadata,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import (
    OCIError,
    fetch_image_config,
    parse_reference,
)

OBJECT_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "Job", "Secret")
DEFAULT_STORAGE_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
WAIT_POLL_SECONDS = 1.0
UNSCHEDULABLE_GRACE_SECONDS = 5.0
# A PVC binds at once only if the PV controller already has its PV when it first syncs the claim; otherwise it binds
# at the controller's next resync, up to 15 s later. A PV the controller has synced leaves phase Pending (Available,
# or Bound), so new PVs are waited for that long at most before their PVCs are written: never longer than the resync.
PV_SYNC_TIMEOUT_SECONDS = 15.0
# The PV controller answers in tens of milliseconds.
BIND_POLL_SECONDS = 0.1
# Scrub Jobs and replaced objects' deletion get at least this long, whatever wait_timeout says: a short wait (an
# operator's runs, walking a rollout across requeues) must not fail a node's scrub or a deletion mid-way.
CLEANUP_MIN_SECONDS = 60


class DistributeError(GkmError):
    """The run cannot go on; `result` carries what is known so far (plan, status, writes)."""

    def __init__(self, message, **result):
        super(DistributeError, self).__init__(message, result)


# ---------------------------------------------------------------- inputs


def resolve_image(params):
    """(digest-pinned reference, digest, cache metadata) of the image option; tags are resolved now."""
    image = params["image"]
    try:
        container = parse_reference(image)
        digest, config = fetch_image_config(image, **registry_options(params))
        metadata = parse_cache_metadata(config)
    except (OCIError, CacheMetadataError) as error:
        raise DistributeError("image %s: cannot resolve its digest and cache labels: %s" % (image, error),
                              reason="ImageUnresolvable") from error
    return "%s/%s@%s" % (container.registry, container.api_prefix, digest), digest, metadata


def extractor_registry_args(params):
    args = []
    if params.get("registry_plain_http"):
        args.append("--plain-http")
    if params.get("registry_validate_certs") is False:
        args.append("--insecure-skip-tls-verify")
    return args


def _read_option_file(params, option):
    path = params.get(option)
    if not path:
        return None
    try:
        with open(path) as handle:
            return handle.read()
    except OSError as error:
        raise DistributeError("%s %s cannot be read: %s" % (option, path, error.strerror)) from error


def registry_files(params, image_ref, verify=None):
    """What the Jobs get of the registry options, for the image's registry, and the public key they verify
    with ({} when they need nothing)."""
    try:
        files = registry_secret.secret_data(
            parse_reference(image_ref).registry, params.get("registry_username"), params.get("registry_password"),
            _read_option_file(params, "registry_docker_config"), _read_option_file(params, "registry_ca_file"))
    except registry_secret.RegistrySecretError as error:
        raise DistributeError(str(error)) from error
    if verify is not None:
        files[verification.PUBLIC_KEY_FILE] = verify[1]
    return files


def build_spec(params):
    """The validated CacheSpec, pinned to the image digest when the cache is to be present."""
    verify = verification.job_verification(params) if params.get("state", "present") == "present" else None
    fields = dict(params, verification=verify, extract_args=extractor_registry_args(params) + (
        verification.extractor_args(verify, registry_secret.MOUNT_PATH)))
    try:
        spec = cache_spec_from_params(fields)
        if spec.state == "present":
            if not params.get("image"):
                raise SpecError("image is required with state: present")
            image_ref, digest, metadata = resolve_image(params)
            if spec.image_volume and verify is not None:
                # No Job verifies in this mode: the digest is checked before the status records it.
                image_signature.verify(params, image_ref, digest, verify)
            pin_image(spec, image_ref, digest, metadata, registry_files(params, image_ref, verify))
    except SpecError as error:
        raise DistributeError(str(error), reason="InvalidSpec") from error
    return spec


# ---------------------------------------------------------------- facts


def _storage_class(spec, classes):
    if spec.storage_class_name:
        for storage_class in classes:
            if storage_class["metadata"]["name"] == spec.storage_class_name:
                return storage_class
        if spec.create_pvs != "always":
            raise DistributeError("storage_class_name %r does not exist; create it, pick one of %s, or set "
                                  "create_pvs: always" % (spec.storage_class_name,
                                                          [c["metadata"]["name"] for c in classes] or "none"),
                                  reason="StorageClassMissing")
        return None
    defaults = [c for c in classes
                if (c["metadata"].get("annotations") or {}).get(DEFAULT_STORAGE_CLASS_ANNOTATION) == "true"]
    return defaults[0] if defaults else None


def _node_facts(kube, spec):
    pulled_image = image_volume.pinned_reference(spec.image, spec.digest) if spec.image_volume else None
    return [node_facts(node, pulled_image) for node in kube.items("Node")]


def _namespace_names(kube):
    return {namespace["metadata"]["name"] for namespace in kube.items("Namespace", metadata_only=True)}


def _listed(kube, kind, **query):
    """Every object of a LIST the planner reads, without metadata.managedFields, page by page: the server's record
    of which manager set each field is a large part of a small object, and nothing here reads it."""
    listed = []
    for obj in kube.items(kind, **query):
        obj["metadata"].pop("managedFields", None)
        listed.append(obj)
    return listed


def gather_facts(kube, spec):
    """Cluster facts for the planner: one paged LIST per kind, the cache's objects by label selector, the Nodes
    kept at what the planner reads of them, the Namespaces' names only."""
    selector = cache_selector(spec.name, spec.cache_namespace)
    present = spec.state == "present"
    calls = [lambda kind=kind: _listed(kube, kind, label_selector=selector) for kind in OBJECT_KINDS]
    if present:
        calls += [lambda: _node_facts(kube, spec), lambda: _namespace_names(kube), lambda: kube.list("StorageClass")]
    results = kube.map(lambda call: call(), calls)
    failures = [r for r in results if isinstance(r, Exception)]
    if failures:
        raise DistributeError("reading the cluster failed: %s" % failures[0])
    objects = {kind: results[index] for index, kind in enumerate(OBJECT_KINDS)}
    nodes, namespace_names, classes = results[len(OBJECT_KINDS):] if present else ([], set(), [])
    rivals, named_claims = conflict_facts(kube, spec) if present else ([], [])
    facts = planner.ClusterFacts(nodes, namespace_names, objects,
                                 list_pods(kube, spec.namespaces, objects, namespace_names),
                                 _storage_class(spec, classes) if present else None, rivals, named_claims)
    return facts


def conflict_facts(kube, spec):
    """(cache resources of the cache's name, live PVCs of its name): what conflicts.py checks a cache that names
    a PVC after itself against (ReadOnlyMany, or a serving PVC). Resources are read for resource-backed
    caches only (a cache_distribute run is checked against the live PVCs)."""
    if not conflicts.spec_claims(spec):
        return [], []
    by_name = "metadata.name=%s" % spec.name
    # Every kind's collection across namespaces: /apis/<group>/<version>/<plural>.
    kinds = sorted(cache_cr.KINDS) if spec.owner else []
    paths = ["/apis/%s/%s/%s" % (cache_cr.GROUP, cache_cr.VERSION, cache_cr.KINDS[kind][0]) for kind in kinds]
    calls = [lambda: kube.list("PersistentVolumeClaim", field_selector=by_name)]
    calls += [lambda path=path: kube.request("GET", path, [("fieldSelector", by_name)], what="list %s" % path)
              for path in paths]
    results = kube.map(lambda call: call(), calls)
    failures = [r for r in results if isinstance(r, Exception)]
    if failures:
        raise DistributeError("reading the cluster failed: %s" % failures[0])
    rivals = []
    for kind, (status, data) in zip(kinds, results[1:]):
        rivals += [dict(item, kind=kind) for item in ((data or {}).get("items") or []) if status == 200]
    return rivals, results[0]


# Finished pods neither mount a PVC nor say why an extraction is stuck; after a converge they are most
# of a namespace's pods (one per extraction Job), so the server leaves them out.
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def _failing_job_namespaces(jobs):
    """Namespaces with a Job that had a pod fail and has not completed: their failed pods say why."""
    return {job["metadata"]["namespace"] for job in jobs
            if (job.get("status") or {}).get("failed") and not planner.job_condition(job, "Complete")}


def list_pods(kube, namespaces, objects, existing_namespaces=None):
    """Unfinished pods of the namespaces given (a cache's workload namespaces) and of every namespace its objects are
    in (who mounts what, stuck Jobs), and the failed pods of its failing Jobs (their termination messages)."""
    namespaces = set(namespaces)
    for kind in ("PersistentVolumeClaim", "Job"):
        namespaces.update(obj["metadata"]["namespace"] for obj in objects.get(kind, []))
    if existing_namespaces is not None:
        namespaces &= existing_namespaces
    calls = [lambda ns=ns: _listed(kube, "Pod", namespace=ns, field_selector=UNFINISHED_PODS)
             for ns in sorted(namespaces)]
    calls += [lambda ns=ns: _listed(kube, "Pod", namespace=ns, label_selector=managed_selector(),
                                    field_selector="status.phase=Failed")
              for ns in sorted(_failing_job_namespaces(objects.get("Job", [])))]
    results = kube.map(lambda call: call(), calls)
    failures = [r for r in results if isinstance(r, Exception)]
    if failures:
        raise DistributeError("listing pods failed: %s" % failures[0])
    return [pod for pods in results for pod in pods]


# ---------------------------------------------------------------- writes


def execute(kube, plan, replace_timeout, scrub):
    """Write the plan: namespaces, then deletions (slot PVs once scrub cleared their nodes' disks), then
    (after replaced names are free) every apply."""
    actions = plan.ordered_actions()
    errors = []

    def record(batch, results):
        for index, action in enumerate(batch):
            result = results[index]
            if isinstance(result, Exception):
                errors.append({"action": action.verb, "kind": action.kind, "namespace": action.namespace,
                               "name": action.name, "error": str(result)})

    def apply(action):
        # The reply (the whole object, managedFields too) is not kept: a batch of thousands held every reply
        # until it ended, the largest part of a run's memory when it records extractions.
        kube.apply(action.body)

    namespaces = [a for a in actions if a.kind == "Namespace"]
    record(namespaces, kube.map(apply, namespaces))
    removals = scrub.clear_removals([a for a in actions if a.verb in ("delete", "replace")], errors)
    record(removals, kube.map(lambda a: kube.delete(a.kind, a.name, a.namespace), removals))
    replaced = [a for a in actions if a.verb == "replace"]
    applies = [a for a in actions if a.verb in ("create", "update") and a.kind != "Namespace"]
    if kube.dry_run:
        # A dry-run delete leaves the object in place, and objects in a namespace that does not exist yet
        # cannot be dry-run: both are shown in the plan without a server round trip.
        new_namespaces = {a.name for a in namespaces}
        applies = [a for a in applies if a.namespace not in new_namespaces]
    elif replaced:
        stuck = kube.wait_gone([(a.kind, a.namespace, a.name) for a in replaced], replace_timeout)
        for kind, namespace, name in stuck:
            errors.append({"action": "replace", "kind": kind, "namespace": namespace, "name": name,
                           "error": "still terminating after %ss (finalizers); re-run later" % replace_timeout})
        stuck_refs = set(stuck)
        applies += [a for a in replaced if (a.kind, a.namespace, a.name) not in stuck_refs]
    # Kind by kind: a PVC binds at once only if the PV controller has seen its PV, and a Job's pod is
    # scheduled at once only if its PVC is bound; otherwise the controllers retry seconds later.
    for kind in planner.KIND_ORDER[1:]:
        batch = [a for a in applies if a.kind == kind]
        record(batch, kube.map(apply, batch))
        if kind == "PersistentVolume" and not kube.dry_run:
            _wait_pvs_synced(kube, [a.name for a in batch if a.verb != "update"])
    return errors


def _wait_pvs_synced(kube, names):
    """Wait until the PV controller has synced each new PV (its phase is no longer Pending), at most
    PV_SYNC_TIMEOUT_SECONDS: past that its PVCs bind at the controller's resync anyway."""
    deadline = time.monotonic() + PV_SYNC_TIMEOUT_SECONDS
    while names and time.monotonic() < deadline:
        found = kube.map(lambda name: kube.get("PersistentVolume", name), names)
        names = [name for name, pv in zip(names, found) if isinstance(pv, Exception) or (pv and not _synced(pv))]
        if names:
            time.sleep(BIND_POLL_SECONDS)


def _synced(pv):
    return ((pv.get("status") or {}).get("phase") or "Pending") != "Pending"


def _serving_bound(kube, spec, facts, plan, deadline):
    """Facts once every serving PVC of the plan is Bound, so a pod naming the cache right after the run starts at once;
    past the deadline the run fails naming the ones still unbound."""
    phases = {(pvc["metadata"]["namespace"], pvc["metadata"]["name"]): (pvc.get("status") or {}).get("phase")
              for pvc in facts.objects.get("PersistentVolumeClaim", [])}
    unbound = [(slot.namespace, slot.pvc) for slot in plan.slots
               if slot.outcome == SERVING and phases.get((slot.namespace, slot.pvc)) != "Bound"]
    if not unbound:
        return facts
    while unbound:
        if time.monotonic() > deadline:
            raise DistributeError("timed out waiting for the serving PVC(s) %s to bind" % ", ".join(
                "%s/%s" % ref for ref in unbound), plan=_plan_result(plan), writes=kube.writes)
        time.sleep(BIND_POLL_SECONDS)
        found = kube.map(lambda ref: kube.get("PersistentVolumeClaim", ref[1], ref[0]), unbound)
        unbound = [ref for ref, pvc in zip(unbound, found)
                   if isinstance(pvc, Exception) or ((pvc or {}).get("status") or {}).get("phase") != "Bound"]
    return gather_facts(kube, spec)


def _trim(obj):
    """What a diff shows of an object: identity, labels, annotations and spec (a Secret's data, redacted after)."""
    if not obj:
        return {}
    metadata = obj.get("metadata") or {}
    trimmed = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
               "metadata": {key: metadata[key] for key in ("name", "namespace", "labels", "annotations")
                            if key in metadata}}
    for field in ("spec", "data"):
        if field in obj:
            trimmed[field] = obj[field]
    return trimmed


def plan_diff(plan, facts):
    live = {}
    for kind, objects in facts.objects.items():
        for obj in objects:
            live[(kind, obj["metadata"].get("namespace") or "", obj["metadata"]["name"])] = dict(obj, kind=kind)
    diffs = []
    for action in plan.ordered_actions():
        ref = (action.kind, action.namespace, action.name)
        before = _trim(live.get(ref)) if action.verb != "create" else {}
        after = {} if action.verb == "delete" else _trim(action.body)
        if action.kind == "Secret":
            before = registry_secret.redacted(before, live.get(ref)) if before else before
            after = registry_secret.redacted(after, live.get(ref)) if after else after
        header = "%s %s (%s)" % (action.kind, "/".join(filter(None, ref[1:])), action.verb)
        diffs.append({"before": before, "after": after, "before_header": header, "after_header": header})
    return diffs


# ---------------------------------------------------------------- the run


def _status(spec, plan, facts):
    eligibility = plan.eligibility
    if spec.image_volume and spec.state == "present":
        status = image_volume.cache_status(spec, eligibility, facts.pods, facts.nodes)
    else:
        status = cache_status(plan.slots, [n["metadata"]["name"] for n in eligibility.eligible],
                              eligibility.incompatible, eligibility.excluded, facts.objects, facts.pods,
                              eligibility.untolerated_taints)
    if spec.state == "present" and not eligibility.eligible:
        status["unplaced"] = _unplaced_message(plan)
    return status


def _waiting(status):
    """The current slots still to wait for: neither Extracted nor Error, nor held for a later upgrade wave."""
    return [e for e in status["entries"] if e["phase"] not in (EXTRACTED, ERROR, "Outdated", "Incompatible")
            and e.get("reason") != planner.WAITING_FOR_WAVE]


def _unplaceable(status, waiting):
    """With no eligible node (status unplaced), Jobs the scheduler cannot place are not waited for: they stay
    Pending with the reason (GKM's behaviour) instead of failing the run at the timeout."""
    return bool(status.get("unplaced")) and all(e.get("reason") == UNSCHEDULABLE for e in waiting)


def _plan(spec, facts):
    """The plan for these facts; in a rolling upgrade, made again with the nodes its waves hold (rollout.py)."""
    try:
        plan = planner.plan(spec, facts)
        waves = None
        if spec.upgrade_policy is not None:
            waves = rollout.wave_plan(spec, plan, _status(spec, plan, facts)["entries"],
                                      facts.objects.get("PersistentVolumeClaim", []), facts.pods)
            if rollout.held(waves):
                plan = planner.plan(spec, facts, hold=rollout.held(waves))
    except planner.PlanError as error:
        raise DistributeError(str(error), reason=error.reason) from error
    plan.rollout = waves
    return plan


def _unplaced_message(plan):
    by_reason = {}
    for node, reasons in sorted(plan.eligibility.excluded.items()):
        by_reason.setdefault("; ".join(reasons), []).append(node)
    details = " | ".join("%s: %s" % (", ".join(nodes[:5]) + (" (+%d)" % (len(nodes) - 5) if len(nodes) > 5 else ""),
                                     reason) for reason, nodes in by_reason.items())
    return "no node is eligible for the cache yet: %s" % (details or "the cluster has no nodes")


def distribute(kube, params, check_mode=False, want_diff=False, timings=None):
    """Reconcile one cache; returns the module result. Raises DistributeError with a partial result.

    timings (common/timings.py), when given, also gets the caller's own phases; the result's `timings` has them all.
    """
    started = time.monotonic()
    timings = timings or Timings()
    with timings.phase("resolve"):
        spec = build_spec(params)
    try:
        with timings.phase("read"):
            facts = gather_facts(kube, spec)
        with timings.phase("plan"):
            plan = _plan(spec, facts)
        result = {"plan": _plan_result(plan)}
        if want_diff:
            result["diff"] = plan_diff(plan, facts)
            if plan.rollout is not None and plan.rollout.active:
                result["diff"].append(rollout.rollout_diff(spec, plan.rollout, facts.nodes))
        dry_runs = 0
        upgrade_labels = []
        evictions = Evictions(kube)
        if not check_mode:
            with timings.phase("validate"):
                dry_runs, refusals = dry_run.validate_plan(kube, plan)
            if refusals:
                raise DistributeError(dry_run.refusal_message(refusals, len(plan.actions)), reason=dry_run.INVALID,
                                      refusals=refusals, writes=kube.writes, **result)
        wait_timeout = params.get("wait_timeout") or 120
        cleanup_timeout = max(wait_timeout, CLEANUP_MIN_SECONDS)
        scrub = NodeDiskScrub(kube, spec.extract_image, cleanup_timeout)
        with timings.phase("write"):
            errors = execute(kube, plan, cleanup_timeout, scrub)
        if errors:
            raise DistributeError("%d of %d writes failed; first: %s" % (len(errors), len(plan.actions),
                                                                         errors[0]["error"]),
                                  errors=errors, writes=kube.writes, reason="WriteFailed", **result)
        if kube.writes and not check_mode:
            with timings.phase("read"):
                facts = gather_facts(kube, spec)
        if params.get("wait") and spec.state == "present" and not check_mode:
            with timings.phase("wait"):
                facts, plan = _wait(kube, spec, facts, plan, started + wait_timeout, scrub,
                                    upgrade_labels, evictions)
                facts = _serving_bound(kube, spec, facts, plan, started + wait_timeout)
        with timings.phase("status"):
            status = _status(spec, plan, facts)
        with timings.phase("node_objects"):
            node_objects = sync_for_spec(kube, spec, plan.eligibility, status, facts, check_mode, want_diff,
                                         rollout.upgrade_states(plan.rollout))
        with timings.phase("node_labels"):
            node_labels = node_readiness_runner.label_nodes(kube, spec, status["entries"], facts.nodes)
            upgrade_labels.extend(_label_upgrade_states(kube, spec, plan.rollout, facts.nodes))
    except KubeError as error:
        raise DistributeError(str(error), writes=kube.writes) from error
    if node_objects is not None:
        if "diff" in node_objects:
            result["diff"].append(node_objects.pop("diff"))
        result["node_objects"] = node_objects
    planned_node_writes = sum((node_objects or {}).get(key, 0) for key in ("created", "patched", "deleted"))
    result.update(
        changed=bool(plan.actions or planned_node_writes or node_labels or upgrade_labels) if check_mode
        else kube.writes > 0,
        cache={"name": spec.name, "namespace": spec.cache_namespace, "scope": spec.scope, "image": spec.image,
               "digest": spec.digest, "size": spec.size, "access_modes": spec.access_modes, "state": spec.state,
               "signature_check": verification.identity(spec.verification), "mount_mode": spec.mount_mode,
               "targets": spec.targets or []},
        status=status,
        eligible_nodes=[n["metadata"]["name"] for n in plan.eligibility.eligible],
        excluded_nodes=plan.eligibility.excluded,
        scrub=scrub.report(),
        node_labels=node_labels,
        warnings=scrub.warnings,
        api_requests=kube.requests + dry_runs,
        api_dry_runs=dry_runs,
        api_writes=kube.writes,
        duration_seconds=round(time.monotonic() - started, 3),
        timings=timings.result(),
    )
    if plan.rollout is not None:
        result["rollout"] = dict(plan.rollout.to_dict(), labels=upgrade_labels, **evictions.report())
        if params.get("wait") and not check_mode and plan.rollout.moving():
            result["warnings"] = [*result["warnings"], "%s: still moving when this run's wait ended (wait_timeout "
                                  "%ss); the next run goes on from here" % (plan.rollout.message, wait_timeout)]
    return result


def _wait(kube, spec, facts, plan, deadline, scrub, labels_written, evictions):
    """Poll until every current slot is Extracted or Error, then record finished extractions on the PVCs and
    release what they replace. That plan starts a rolling upgrade's next wave: wait for it too, until no wave
    moves (complete, paused, stopped, or only failed nodes left) or the deadline, which ends a moving rollout's wait
    without failing (see _poll); the upgrade state labels written meanwhile are added to labels_written. A node
    whose named workloads still run on its previous digest has their pods evicted (evictions,
    workload_restarts_runner.py) until none is left, and stays upgrading meanwhile."""
    while True:
        if plan.rollout is not None:
            # The state labels follow each wave while the run waits for it, not only at the run's end.
            labels_written.extend(_label_upgrade_states(kube, spec, plan.rollout, facts.nodes))
        facts, polled = _poll(kube, spec, facts, plan, deadline)
        if not polled and not kube.writes and not _restarting(plan):
            return facts, plan  # nothing changed since the plan was made from these facts
        writes = kube.writes
        facts, plan = _mark_then_release(kube, spec, facts, deadline, scrub)
        while _restarting(plan) and time.monotonic() < deadline:
            evictions.evict(plan.rollout.evictions)
            time.sleep(WAIT_POLL_SECONDS)  # the evicted pods' controllers replace them; a refused one is asked again
            facts, plan = _mark_then_release(kube, spec, gather_facts(kube, spec), deadline, scrub)
        waves = plan.rollout
        # A run that wrote nothing more cannot move the rollout: what is left waits for failures to be fixed.
        if waves is None or not waves.moving() or kube.writes == writes or time.monotonic() > deadline:
            return facts, plan


def _restarting(plan):
    """True while a rolling upgrade has nodes whose named workloads still run on their previous digest."""
    return plan.rollout is not None and bool(plan.rollout.restart)


def _label_upgrade_states(kube, spec, waves, nodes):
    """Write the nodes' upgrade state labels, and keep `nodes` (the facts' copies) as written."""
    key = state_label_key(spec.name, spec.cache_namespace)
    written = node_readiness_runner.sync_labels(kube, spec, key, rollout.upgrade_states(waves), nodes)
    by_name = {node["metadata"]["name"]: node for node in nodes}
    for change in written:
        if change["node"] not in by_name:
            continue  # an absent cache's nodes are listed by sync_labels itself
        labels = by_name[change["node"]]["metadata"].setdefault("labels", {})
        if change["value"] is None:
            labels.pop(key, None)
        else:
            labels[key] = change["value"]
    return written


def _poll(kube, spec, facts, plan, deadline):
    """(facts, whether it polled) once every current slot of the plan is Extracted or Error (or unplaceable), or at
    the deadline while a rolling upgrade moves: every node that had a verified digest still serves it, and the next
    run goes on from the live slots (the operator's comes soon, roles/operator_events), so a rollout longer than one
    run is no failure. Any other wait past the deadline fails."""
    status = _status(spec, plan, facts)
    polled = False
    unplaceable_since = None
    while True:
        waiting = _waiting(status)
        if not waiting:
            break
        if _unplaceable(status, waiting):
            # The scheduler also says Unschedulable for a moment while a new PVC binds: only a lasting verdict counts.
            unplaceable_since = unplaceable_since or time.monotonic()
            if time.monotonic() - unplaceable_since >= UNSCHEDULABLE_GRACE_SECONDS:
                break
        else:
            unplaceable_since = None
        polled = True
        if time.monotonic() > deadline:
            if plan.rollout is not None and plan.rollout.moving():
                break
            raise DistributeError("timed out waiting for extraction: %s" % _phase_counts(status),
                                  status=status, plan=_plan_result(plan), writes=kube.writes)
        time.sleep(WAIT_POLL_SECONDS)
        facts = gather_facts(kube, spec)
        status = _status(spec, plan, facts)
    return facts, polled


def _mark_then_release(kube, spec, facts, deadline, scrub):
    """Record finished extractions on their PVCs; when that plan keeps previous slots, plan once more: the marks,
    which the webhook already sees, release them in this run (make before break: never a moment with neither)."""
    for step in ("recording finished extractions", "releasing the previous digest's slots"):
        plan = _plan(spec, facts)
        errors = execute(kube, plan, max(deadline - time.monotonic(), CLEANUP_MIN_SECONDS), scrub)
        if errors:
            raise DistributeError("%s failed: %s" % (step, errors[0]["error"]), errors=errors)
        if not plan.actions:
            break
        facts = gather_facts(kube, spec)
        if not any(slot.outcome == planner.PREVIOUS for slot in plan.slots):
            break
    return facts, plan


def _phase_counts(status):
    counts = {}
    for entry in status["entries"]:
        counts[entry["phase"]] = counts.get(entry["phase"], 0) + 1
    return ", ".join("%s=%d" % item for item in sorted(counts.items()))


def _plan_result(plan):
    return {"summary": plan.summary(), "actions": [action.to_dict() for action in plan.ordered_actions()]}
