# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A rolling upgrade in the cache resource's status, pure: `status.upgrade` and the `Upgraded` condition.

Bounded whatever the cluster's size: the target digest, the phase, the counts per state and a message; which node
is in which state is its label `upgrade.gkm.io/<cache namespace>.<cache>` (upgrade_waves.py) and its per-node
object's entry.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    UPGRADED_CONDITION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.upgrade_waves import (
    FAILED,
    ROLLED_BACK,
    UPGRADED,
    UPGRADING,
    WAITING,
)

PROGRESSING, PAUSED, STOPPED, COMPLETE = "Progressing", "Paused", "Stopped", "Complete"
# The condition's reason per phase; a stopped rollout says why it stopped.
_REASONS = {PROGRESSING: "RolloutProgressing", PAUSED: "RolloutPaused", STOPPED: "RolloutStopped",
            COMPLETE: "RolloutComplete"}
# The states under their status field names.
COUNT_NAMES = ((WAITING, "pending"), (UPGRADING, "upgrading"), (UPGRADED, "upgraded"), (FAILED, "failed"),
               (ROLLED_BACK, "rolledBack"))
MAX_MESSAGE = 1024


def phase(rollout):
    """Complete, Stopped, Paused or Progressing, from a WavePlan's to_dict()."""
    if rollout["complete"]:
        return COMPLETE
    if rollout["stopped"]:
        return STOPPED
    return PAUSED if rollout["paused"] else PROGRESSING


def upgrade_status(rollout):
    """status.upgrade from a WavePlan's to_dict() (the module result's `rollout`)."""
    return {
        "digest": rollout["digest"],
        "phase": phase(rollout),
        "paused": bool(rollout["paused"]),
        "maxUnavailable": int(rollout["budget"]),
        "counts": {name: len(rollout.get(state) or []) for state, name in COUNT_NAMES},
        "message": (rollout.get("message") or "")[:MAX_MESSAGE],
    }


def upgrade_condition(upgrade, now):
    """The Upgraded condition of a status.upgrade (now: an RFC 3339 timestamp)."""
    return {"type": UPGRADED_CONDITION, "status": "True" if upgrade["phase"] == COMPLETE else "False",
            "reason": _REASONS[upgrade["phase"]], "message": upgrade["message"], "lastTransitionTime": now}
