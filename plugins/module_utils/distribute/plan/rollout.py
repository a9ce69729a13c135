# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling upgrade inside one reconcile, pure: from a plan made without holds to its WavePlan (upgrade_waves.py),
whose pending nodes the runner then plans again as held, and what `--check --diff` shows of it.

Only a per-node cache whose resource declares spec.upgradePolicy rolls out in waves; any other moves every node at
once (make before break still keeps each node's previous slot until its new one is extracted).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    label_value,
    short_digest,
    upgrade_state_label_key,
)
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    DIGEST_LABEL,
    NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import planner
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import KEPT_UNTIL_REPLACED
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.slot_states import slot_entries
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.upgrade_waves import (
    WAITING,
    node_progress,
    plan_waves,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.workload_restarts import (
    evictions_due,
    outdated_pods,
)


def started_nodes(spec, eligible, pvcs):
    """Names of the eligible nodes whose PVC of the current digest exists (they began the new digest)."""
    by_label = {label_value(node["metadata"]["name"]): node["metadata"]["name"] for node in eligible}
    digest = short_digest(spec.digest)
    started = set()
    for pvc in pvcs:
        labels = pvc["metadata"].get("labels") or {}
        if labels.get(DIGEST_LABEL) == digest and labels.get(NODE_LABEL) in by_label:
            started.add(by_label[labels[NODE_LABEL]])
    return started


def wave_plan(spec, plan, entries, pvcs, pods):
    """The WavePlan of the cache's rollout, from a plan made without holds, its status entries, the cache's live
    PVCs and the pods of its namespaces; None when the cache does not roll out in waves. Its `evictions` are the
    pods of upgradePolicy.restart's workloads to evict now (their node's new digest is Extracted)."""
    if spec.upgrade_policy is None or not spec.per_node or spec.state != "present":
        return None
    eligible = plan.eligibility.eligible
    outdated = outdated_pods(spec.upgrade_policy.restart, spec.digest, pvcs, pods)
    progress = node_progress(entries, spec.digest, started_nodes(spec, eligible, pvcs), KEPT_UNTIL_REPLACED,
                             {node: len(found) for node, found in outdated.items()})
    waves = plan_waves(spec.upgrade_policy, spec.digest, eligible, progress)
    waves.evictions = evictions_due(outdated, waves.restart)
    return waves


def held(waves):
    """The nodes the planner must keep on their previous digest."""
    return waves.nodes_in(WAITING) if waves is not None else []


def upgrade_states(waves):
    """{node: upgrade state} while a rollout runs, {} otherwise: the nodes' state labels, and the `upgradeState` of
    their per-node entries (node_status.py)."""
    return waves.labels() if waves is not None else {}


def rollout_diff(spec, waves, nodes):
    """The `--diff` entry of an active rollout: the nodes' state labels now, and the wave plan."""
    key = upgrade_state_label_key(spec.name, spec.cache_namespace)
    before = {node["metadata"]["name"]: (node["metadata"].get("labels") or {})[key] for node in nodes
              if key in (node["metadata"].get("labels") or {})}
    header = "upgrade of %s" % "/".join(filter(None, (spec.cache_namespace, spec.name)))
    return {"before_header": header, "before": before, "after_header": header, "after": waves.to_dict()}


def plan_cache(spec, facts):
    """The plan for these facts; in a rolling upgrade, made again with the nodes its waves hold (rollout.py)."""
    try:
        plan = planner.plan(spec, facts)
        waves = None
        if spec.upgrade_policy is not None:
            eligibility = plan.eligibility
            entries = slot_entries(plan.slots, eligibility.incompatible, eligibility.excluded, facts.objects,
                                   facts.pods)[0]
            waves = wave_plan(spec, plan, entries, facts.objects.get("PersistentVolumeClaim", []), facts.pods)
            if held(waves):
                plan = planner.plan(spec, facts, hold=held(waves))
    except planner.PlanError as error:
        raise DistributeError(str(error), reason=error.reason) from error
    plan.rollout = waves
    return plan
