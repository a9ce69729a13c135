# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One reconcile of a distributed cache, stage by stage: inputs, facts, plan, apply, status.

`distribute` resolves the image to a digest (inputs/image.py), reads the cluster (facts/cluster.py, through a facts
source: LISTs unless the caller passes another), plans
(plan/rollout.py: the planner, and again with a rolling upgrade's holds), has the API server validate every object
it would write (apply/dry_run.py), writes the plan (apply/writes.py; a server-side dry run in check mode), waits for
the extraction Jobs when asked (apply/wait.py), and publishes the status on the per-node objects and node labels
(status/). `run` returns what the stages made (a cache resource's status is built from it); `distribute` returns the
module result. Only this module knows the order.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import KubeError
from ansible_collections.gkm.cluster.plugins.module_utils.common.timings import Timings
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SYSTEM_NAMESPACE
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply import dry_run
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply.evictions import Evictions
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply.scrub_runner import NodeDiskScrub
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply.wait import (
    CLEANUP_MIN_SECONDS,
    serving_bound,
    wait_for_extraction,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply.writes import execute
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import assemble_facts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.source import ListSource
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import verification
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.image import build_spec
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import rollout
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.diff import plan_diff
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_labels
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.cache_status import status_of
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_writer import sync_for_spec


class Settled(Exception):
    """The run stopped after resolving the image: its source says nothing it would read changed since an earlier run
    at this digest found nothing to do (FactsSource.settled)."""

    def __init__(self, digest):
        super(Settled, self).__init__(digest)
        self.digest = digest


class Distribution:
    """One reconcile as its stages left it: the spec (inputs), the plan with its rollout, the status (status_of),
    the module's result made of them, and the facts' source it read (for the reads that follow it)."""

    __slots__ = ("plan", "result", "source", "spec", "status")

    def __init__(self, spec, plan, status, result, source):
        self.spec, self.plan, self.status, self.result, self.source = spec, plan, status, result, source


def distribute(kube, params, check_mode=False, want_diff=False, timings=None, source=None):
    """Reconcile one cache; returns the module result. Raises DistributeError with a partial result."""
    return run(kube, params, check_mode, want_diff, timings, source).result


def run(kube, params, check_mode=False, want_diff=False, timings=None, source=None):
    """Reconcile one cache; returns its Distribution. Raises DistributeError with a partial result.

    timings (common/timings.py), when given, also gets the caller's own phases; the result's `timings` has them all.
    source (facts/source.py) is where every read of the facts comes from and how the wait pauses between polls:
    by default LISTs through this run's kube (what the modules send); a controller passes its index's source.
    """
    started = time.monotonic()
    timings = timings or Timings()
    source = source or ListSource(kube)
    with timings.phase("resolve"):
        spec = build_spec(params)
    if source.settled(spec.digest):
        raise Settled(spec.digest)
    try:
        with timings.phase("read"):
            facts = assemble_facts(source, spec)
        with timings.phase("plan"):
            plan = rollout.plan_cache(spec, facts)
        result = {"plan": plan.to_result()}
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
        scrub = NodeDiskScrub(kube, params.get("system_namespace") or SYSTEM_NAMESPACE, spec.extract_image,
                              cleanup_timeout)
        with timings.phase("write"):
            errors = execute(kube, plan, cleanup_timeout, scrub)
        if errors:
            raise DistributeError("%d of %d writes failed; first: %s" % (len(errors), len(plan.actions),
                                                                         errors[0]["error"]),
                                  errors=errors, writes=kube.writes, reason="WriteFailed", **result)
        if kube.writes and not check_mode:
            with timings.phase("read"):
                facts = assemble_facts(source, spec)

        def label_wave(waves, nodes):
            upgrade_labels.extend(node_labels.label_upgrade_states(kube, spec, waves, nodes))

        if params.get("wait") and spec.state == "present" and not check_mode:
            with timings.phase("wait"):
                facts, plan = wait_for_extraction(kube, source, spec, facts, plan, started + wait_timeout, scrub,
                                                  evictions, status_of, label_wave)
                facts = serving_bound(kube, source, spec, facts, plan, started + wait_timeout)
        with timings.phase("status"):
            status = status_of(spec, plan, facts)
        with timings.phase("node_objects"):
            node_objects = sync_for_spec(kube, spec, plan.eligibility, status, facts, check_mode, want_diff,
                                         rollout.upgrade_states(plan.rollout), source)
        with timings.phase("node_labels"):
            readiness_labels = node_labels.label_nodes(kube, spec, status["entries"], facts.nodes)
            label_wave(plan.rollout, facts.nodes)
    except KubeError as error:
        raise DistributeError(str(error), writes=kube.writes) from error
    if node_objects is not None:
        if "diff" in node_objects:
            result["diff"].append(node_objects.pop("diff"))
        result["node_objects"] = node_objects
    planned_node_writes = sum((node_objects or {}).get(key, 0) for key in ("created", "patched", "deleted"))
    result.update(
        changed=bool(plan.actions or planned_node_writes or readiness_labels or upgrade_labels) if check_mode
        else kube.writes > 0,
        cache={"name": spec.name, "namespace": spec.cache_namespace, "scope": spec.scope, "image": spec.image,
               "digest": spec.digest, "size": spec.size, "access_modes": spec.access_modes, "state": spec.state,
               "signature_check": verification.identity(spec.verification), "mount_mode": spec.mount_mode,
               "targets": spec.targets or [],
               "kernel_overlay": {"variable": spec.overlay_variable, "reason": spec.overlay_reason}},
        status=status,
        eligible_nodes=[n["metadata"]["name"] for n in plan.eligibility.eligible],
        excluded_nodes=plan.eligibility.excluded,
        scrub=scrub.report(),
        node_labels=readiness_labels,
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
    return Distribution(spec, plan, status, result, source)
