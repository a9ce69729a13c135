# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A refused reconcile as a cache resource's status, pure.

Every GkmError raised while one cache is reconciled becomes that resource's status: phase Error, a
Ready=False condition and GKM's matching condition type, the message in the resource's own field names
(spec.podTemplate, not the module's pod_template: contract.cache_resource.resource_terms), and the counts zeroed
so nothing stale remains.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
)

DEFAULT_REASON = "ReconcileFailed"
# GKM's condition type for a workload namespace that does not exist; every other refusal is its Error type.
NO_NAMESPACE = "NoNamespace"


def failure_reason(error):
    """The machine-readable reason of a refusal: the error's own `reason`, else the one its result carries."""
    return getattr(error, "reason", None) or (getattr(error, "result", None) or {}).get("reason") or DEFAULT_REASON


def error_status(reason, message, now, counts_names):
    """The whole status of a refused cache (a merge patch of it replaces every field of the last run)."""
    condition_type = NO_NAMESPACE if reason == NO_NAMESPACE else ERROR
    status = {
        "phase": ERROR,
        "resolvedDigest": "",
        "targets": [],
        "lastReconcileTime": now,
        "conditions": [
            {"type": "Ready", "status": "False", "reason": reason, "message": message, "lastTransitionTime": now},
            {"type": condition_type, "status": "True", "reason": reason, "message": message,
             "lastTransitionTime": now},
        ],
        "problems": [],
        "problemCnt": 0,
        "nodeExcludedCnt": 0,
        "nodeIncompatibleCnt": 0,
        "excludedReasons": [],
    }
    status.update({name: 0 for name in counts_names})
    return status
