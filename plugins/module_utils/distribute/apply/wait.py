# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The wait after the writes (I/O): until every current slot is extracted or failed, recording finished
extractions on their PVCs and releasing what they replace, a rolling upgrade's waves one after another, and the
evictions upgradePolicy.restart asks for."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
    EXTRACTED,
    INCOMPATIBLE,
    OUTDATED,
    UNSCHEDULABLE,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.apply.writes import BIND_POLL_SECONDS, execute
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import assemble_facts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.rollout import plan_cache
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.serving import SERVING

WAIT_POLL_SECONDS = 1.0
UNSCHEDULABLE_GRACE_SECONDS = 5.0
# Scrub Jobs and replaced objects' deletion get at least this long, whatever wait_timeout says: a short wait (an
# operator's runs, walking a rollout across requeues) must not fail a node's scrub or a deletion mid-way.
CLEANUP_MIN_SECONDS = 60


def wait_for_extraction(kube, source, spec, facts, plan, deadline, scrub, evictions, status_of, on_wave):
    """(facts, plan) once every current slot is Extracted or Error, having recorded finished extractions on the PVCs
    and released what they replace. That plan starts a rolling upgrade's next wave: wait for it too, until no wave
    moves (complete, paused, stopped, or only failed nodes left) or the deadline, which ends a moving rollout's wait
    without failing (see _poll). A node whose named workloads still run on its previous digest has their pods
    evicted (evictions, evictions.py) until none is left, and stays upgrading meanwhile.

    Every read of the facts goes through source (facts/source.py), and every wait between two polls is its pause:
    LISTs and a full interval's sleep for the modules, an index woken by the change for a controller; the writes
    go through kube either way. The status stage comes after this one, so it is passed in: status_of(spec, plan,
    facts) is the cache's status, on_wave(waves, nodes) publishes a rolling upgrade's state labels at each wave, not
    only at the run's end."""
    while True:
        if plan.rollout is not None:
            on_wave(plan.rollout, facts.nodes)
        facts, polled = _poll(kube, source, spec, facts, plan, deadline, status_of)
        if not polled and not kube.writes and not _restarting(plan):
            return facts, plan  # nothing changed since the plan was made from these facts
        writes = kube.writes
        facts, plan = _mark_then_release(kube, source, spec, facts, deadline, scrub)
        while _restarting(plan) and time.monotonic() < deadline:
            evictions.evict(plan.rollout.evictions)
            source.pause(WAIT_POLL_SECONDS)  # the evicted pods' controllers replace them; a refused one is asked again
            facts, plan = _mark_then_release(kube, source, spec, assemble_facts(source, spec), deadline, scrub)
        waves = plan.rollout
        # A run that wrote nothing more cannot move the rollout: what is left waits for failures to be fixed.
        if waves is None or not waves.moving() or kube.writes == writes or time.monotonic() > deadline:
            return facts, plan


def serving_bound(kube, source, spec, facts, plan, deadline):
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
                "%s/%s" % ref for ref in unbound), plan=plan.to_result(), writes=kube.writes)
        source.pause(BIND_POLL_SECONDS)
        found = kube.map(lambda ref: kube.get("PersistentVolumeClaim", ref[1], ref[0]), unbound)
        unbound = [ref for ref, pvc in zip(unbound, found)
                   if isinstance(pvc, Exception) or ((pvc or {}).get("status") or {}).get("phase") != "Bound"]
    return assemble_facts(source, spec)


def _restarting(plan):
    """True while a rolling upgrade has nodes whose named workloads still run on their previous digest."""
    return plan.rollout is not None and bool(plan.rollout.restart)


def _poll(kube, source, spec, facts, plan, deadline, status_of):
    """(facts, whether it polled) once every current slot of the plan is Extracted or Error (or unplaceable), or at
    the deadline while a rolling upgrade moves: every node that had a verified digest still serves it, and the next
    run goes on from the live slots (the operator's comes soon: its handler runs again while the rollout moves), so a
    rollout longer than one run is no failure. Any other wait past the deadline fails."""
    status = status_of(spec, plan, facts)
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
                                  status=status, plan=plan.to_result(), writes=kube.writes)
        source.pause(WAIT_POLL_SECONDS)
        facts = assemble_facts(source, spec)
        status = status_of(spec, plan, facts)
    return facts, polled


def _mark_then_release(kube, source, spec, facts, deadline, scrub):
    """Record finished extractions on their PVCs; when that plan wrote anything, plan once more: the marks, which the
    webhook already sees, release in this run the previous digest's slots (make before break: never a moment with
    neither) and the store's Job and access pair, which go once a slot is marked (planner._extract), so a waited run
    leaves the cache settled and the next run writes nothing."""
    for step in ("recording finished extractions", "releasing what the marks replace"):
        plan = plan_cache(spec, facts)
        errors = execute(kube, plan, max(deadline - time.monotonic(), CLEANUP_MIN_SECONDS), scrub)
        if errors:
            raise DistributeError("%s failed: %s" % (step, errors[0]["error"]), errors=errors)
        if not plan.actions:
            break
        facts = assemble_facts(source, spec)
    return facts, plan


def _waiting(status):
    """The current slots still to wait for: neither Extracted nor Error, nor held for a later upgrade wave or until
    pods release a previous digest (extract_limits.max_digests): waiting in this run cannot move either."""
    return [e for e in status["entries"] if e["phase"] not in (EXTRACTED, ERROR, OUTDATED, INCOMPATIBLE)
            and e.get("reason") not in (planner.WAITING_FOR_WAVE, planner.DIGEST_LIMIT)]


def _unplaceable(status, waiting):
    """With no eligible node (status unplaced), Jobs the scheduler cannot place are not waited for: they stay
    Pending with the reason (GKM's behaviour) instead of failing the run at the timeout."""
    return bool(status.get("unplaced")) and all(e.get("reason") == UNSCHEDULABLE for e in waiting)


def _phase_counts(status):
    counts = {}
    for entry in status["entries"]:
        counts[entry["phase"]] = counts.get(entry["phase"], 0) + 1
    return ", ".join("%s=%d" % item for item in sorted(counts.items()))
