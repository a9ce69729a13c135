# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rolling cache upgrades, pure: which nodes of a ReadWriteOnce cache move to its new digest now.

A rollout exists while some node still serves a previous digest (plan.py keeps a node's verified slot until its
new one is Extracted: make before break). Each node is in one state, also its node label
`upgrade.gkm.io/<cache namespace>.<cache>`:
- pending: serves the previous digest and has not started the new one (waits for its wave);
- upgrading: its new slot exists and is not Extracted yet, or its workloads still wait to be restarted;
- upgraded: the new digest is Extracted there (the Job verified it) and no restart is outstanding;
- failed: the new digest's extraction failed there; the node still serves the previous digest;
- rolled-back: failed while the rollout is stopped: it stays on the previous digest and nothing retries it.
Nothing is remembered between reconciles but the live slots (a failure is recorded on its slot's PVC), so a plan
made twice is the same plan, and `--check --diff` shows the waves still to come.

The policy (upgrade_policy.py): at most maxUnavailable nodes that had a previous digest are upgrading at once (a
node whose named workloads still run on the previous digest keeps its place until they restart); paused starts no
node; more failed nodes than failureThreshold stop the rollout (nodes already upgrading finish).
A node with no previous digest (it joined, or never had the cache verified) has nothing to protect: it starts
at once and counts for no budget. A failure outlives its Job (failure_record.py records it on the failed slot's
PVC): to retry a failed node, delete that PVC.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    short_digest,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
    EXTRACTED,
    EXTRACTING,
    EXTRACTION_FAILED_LABEL,
    INCOMPATIBLE,
    OUTDATED,
    PENDING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.upgrade_policy import ORDER_BY_NAME

WAITING, UPGRADING, UPGRADED, FAILED, ROLLED_BACK = "pending", "upgrading", "upgraded", "failed", "rolled-back"
# A node's phase of the new digest is the worst of its namespaces' slots.
_PHASE_ORDER = (ERROR, PENDING, EXTRACTING, EXTRACTED)


class NodeProgress:
    """One node's facts: previous (short digest it still serves from a kept slot, or None), target (its phase of
    the new digest: Pending, Extracting, Extracted, Error; None before its new slot exists) and evictions
    (pods of the named owners still to be restarted onto the new cache)."""

    __slots__ = ("evictions", "previous", "target")

    def __init__(self, previous=None, target=None, evictions=0):
        self.previous = previous
        self.target = target
        self.evictions = evictions


def node_progress(entries, digest, started, kept_reason, evictions=None):
    """{node name: NodeProgress} from a cache's status entries (status.cache_status of a plan made without holds).

    digest: the new digest. started: names of the nodes whose new slot exists (its PVC is live); a slot the plan
    merely wants is Pending too, but the node has not started. kept_reason: the reason of an Outdated entry that
    plan.py kept because it still serves its node. evictions: {node: pods still to restart}.
    """
    target = short_digest(digest)
    phases, progress = {}, {}
    for entry in entries:
        node = entry.get("node")
        if not node:
            continue  # a shared (ReadOnlyMany) PVC has no per-node rollout
        if entry["phase"] == OUTDATED and entry.get("reason") == kept_reason:
            progress.setdefault(node, NodeProgress()).previous = entry["digest"]
        elif entry["phase"] not in (OUTDATED, INCOMPATIBLE) and entry["digest"] == target and node in started:
            phases.setdefault(node, set()).add(entry["phase"])
    for node, seen in phases.items():
        progress.setdefault(node, NodeProgress()).target = next(phase for phase in _PHASE_ORDER if phase in seen)
    for node, count in (evictions or {}).items():
        progress.setdefault(node, NodeProgress()).evictions = count
    return progress


def _order_key(order):
    def key(node):
        name = node["metadata"]["name"]
        if order == ORDER_BY_NAME:
            return (False, "", name)
        value = (node["metadata"].get("labels") or {}).get(order)
        return (value is None, value or "", name)

    return key


def _state(progress):
    if progress.target == ERROR:
        return FAILED
    if progress.target == EXTRACTED and not progress.evictions:
        return UPGRADED
    if progress.target is not None:
        return UPGRADING
    return WAITING


class WavePlan:
    """The rollout's state: states {node: state}, starting (nodes that begin the new digest now), waves (the
    pending nodes in the waves still to come, if every wave succeeds), restart (nodes whose new digest is
    Extracted and whose workloads are to be restarted now), evictions (their pods to evict now, set by
    rollout.py), stopped, paused, complete, budget, message."""

    def __init__(self, digest, policy):
        self.digest = digest
        self.policy = policy
        self.active = False
        self.states = {}
        self.starting = []
        self.waves = []
        self.restart = []
        self.evictions = []
        self.stopped = False
        self.complete = False
        self.budget = 0
        self.message = ""

    def nodes_in(self, state):
        return sorted(name for name, have in self.states.items() if have == state)

    def holds(self, node):
        """True when the node stays on its previous digest: the planner creates no new slot there."""
        return self.states.get(node) == WAITING

    def labels(self):
        """{node: state label value} while the rollout runs; {} once it is complete (the labels go)."""
        return dict(self.states) if self.active and not self.complete else {}

    def moving(self):
        """True while a later run can move the rollout on: neither complete, stopped nor paused, and some node is
        upgrading (its Job runs, or its workloads restart) or pending. Failed nodes alone wait for a fix, not for
        time."""
        return (self.active and not (self.complete or self.stopped or self.policy.paused)
                and any(state in (UPGRADING, WAITING) for state in self.states.values()))

    def to_dict(self):
        return {
            "digest": self.digest, "policy": self.policy.to_dict(), "active": self.active, "budget": self.budget,
            "stopped": self.stopped, "paused": self.policy.paused, "complete": self.complete,
            "starting": list(self.starting), "waves": [list(wave) for wave in self.waves],
            "restart": list(self.restart), "evict": [repr(pod) for pod in self.evictions], "moving": self.moving(),
            "message": self.message,
            **{state: self.nodes_in(state) for state in (WAITING, UPGRADING, UPGRADED, FAILED, ROLLED_BACK)},
        }


def plan_waves(policy, digest, nodes, progress):
    """The WavePlan of a cache's rollout to `digest` over `nodes` (the eligible Node objects), given
    {node: NodeProgress} (node_progress)."""
    plan = WavePlan(short_digest(digest), policy)
    ordered = sorted(nodes, key=_order_key(policy.order))
    facts = {node["metadata"]["name"]: progress.get(node["metadata"]["name"]) or NodeProgress() for node in ordered}
    # Pods still on a previous digest keep a rollout going after the previous slots are released.
    plan.active = any(fact.previous or fact.evictions for fact in facts.values())
    if not plan.active:
        plan.states = {name: _state(fact) if fact.target else UPGRADING for name, fact in facts.items()}
        plan.starting = [name for name, fact in facts.items() if fact.target is None]
        plan.complete = True
        plan.message = "no node serves a previous digest: every node takes %s at once" % plan.digest
        return plan
    total = len(facts)
    plan.budget = policy.unavailable_budget(total)
    plan.states = {name: _state(fact) for name, fact in facts.items()}
    failed = [name for name, state in plan.states.items() if state == FAILED]
    plan.stopped = len(failed) > policy.failure_budget(total)
    if plan.stopped:
        plan.states.update((name, ROLLED_BACK) for name in failed)
    in_flight = sum(1 for name, state in plan.states.items()
                    if state == UPGRADING and (facts[name].previous or facts[name].evictions))
    for name, fact in facts.items():
        if plan.states[name] != WAITING:
            continue
        if not fact.previous:
            plan.starting.append(name)  # nothing to protect
        elif not plan.stopped and not policy.paused and in_flight < plan.budget:
            plan.starting.append(name)
            in_flight += 1
        else:
            continue
        plan.states[name] = UPGRADING
    waiting = [name for name in facts if plan.states[name] == WAITING]
    if not plan.stopped:
        plan.waves = [waiting[index:index + plan.budget] for index in range(0, len(waiting), plan.budget)]
    plan.restart = [name for name, fact in facts.items() if fact.target == EXTRACTED and fact.evictions]
    plan.complete = all(state == UPGRADED for state in plan.states.values())
    plan.message = _message(plan, failed)
    return plan


def _message(plan, failed):
    counts = "; ".join("%d %s" % (len(plan.nodes_in(state)), state) for state in (
        UPGRADED, UPGRADING, WAITING, FAILED, ROLLED_BACK) if plan.nodes_in(state))
    if plan.complete:
        return "every node has %s" % plan.digest
    if plan.stopped:
        return ("rollout to %s stopped: %d node(s) failed (%s), more than failureThreshold %r allows; they serve their "
                "previous digest (%s). Fix: push a fixed image, or delete their PVCs labelled %s to retry"
                % (plan.digest, len(failed), ", ".join(failed[:5]), plan.policy.failure_threshold, counts,
                   EXTRACTION_FAILED_LABEL))
    if plan.policy.paused:
        return "rollout to %s paused (%s); set upgradePolicy.paused false to go on" % (plan.digest, counts)
    return "rollout to %s, %d node(s) at a time: %s" % (plan.digest, plan.budget, counts)
