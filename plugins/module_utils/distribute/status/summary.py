# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The part of a cache resource's status that replaces its per-node lists, bounded whatever the cluster's size, pure.

One entry per namespace and node made a ClusterGKMCache over 3 namespaces pass etcd's 1.5 MiB request
limit near 1,800 nodes. Per-node state lives in the per-node objects (node_objects.py); the resource
keeps counts, at most MAX_PROBLEMS of the worst slots with the total, and at most MAX_REASON_LINES lines of
why nodes do not get the cache (count and a few names), so its size no longer grows with the cluster.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import resource_terms
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    ERROR,
    OUTDATED,
    PENDING,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import KEPT_UNTIL_REPLACED
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_status import exclusion_code

MAX_PROBLEMS = 10
MAX_EXAMPLE_NODES = 3
MAX_REASON_LINES = 16
MAX_MESSAGE = 512
# Worst first: a failed extraction, then one that is stuck (a Pending slot with a reason), then old content kept.
_SEVERITY = {ERROR: 0, PENDING: 1, OUTDATED: 2}


def _is_problem(entry):
    """An error, a stuck slot, or old content kept for a pod; not a previous digest kept until its node's new
    one is extracted (that is the upgrade working)."""
    if entry.get("reason") == KEPT_UNTIL_REPLACED:
        return False
    return entry["phase"] in (ERROR, OUTDATED) or (entry["phase"] == PENDING and bool(entry.get("reason")))


def _problem(entry):
    problem = {"namespace": entry.get("namespace") or "", "node": entry.get("node") or "", "phase": entry["phase"],
               "reason": entry.get("reason") or entry["phase"],
               "message": resource_terms(entry.get("message") or "")[:MAX_MESSAGE]}
    fixes = entry.get("fix") or []
    if fixes:
        problem["fix"] = [resource_terms(fix) for fix in ([fixes] if isinstance(fixes, str) else fixes)]
    for key in ("pvc", "job"):
        if entry.get(key):
            problem[key] = entry[key]
    return problem


def worst_entries(entries, limit=MAX_PROBLEMS):
    """(the `limit` worst problem entries, how many there are in all). Within a severity each distinct reason comes
    first once, so a reason on a few nodes is not crowded out by one on many."""
    problems = [entry for entry in entries if _is_problem(entry)]
    problems.sort(key=lambda e: (_SEVERITY[e["phase"]], e.get("namespace") or "", e.get("node") or ""))
    firsts, repeats, seen = [], [], set()
    for entry in problems:
        key = (entry["phase"], entry.get("reason"))
        (repeats if key in seen else firsts).append(entry)
        seen.add(key)
    # A stable sort: within a severity the first of each reason, then the rest, each in namespace and node order.
    ordered = sorted(firsts + repeats, key=lambda e: _SEVERITY[e["phase"]])
    return ordered[:limit], len(problems)


def worst_problems(entries, limit=MAX_PROBLEMS):
    """(the `limit` worst problem entries in the resource's field names, how many there are in all)."""
    worst, total = worst_entries(entries, limit)
    return [_problem(entry) for entry in worst], total


def excluded_reasons(excluded, resource_fields=True):
    """One line per distinct reason nodes do not get the cache (so each untolerated taint and each GPU kind is
    named), most nodes first: its code, the message, the node count and a few nodes. Past MAX_REASON_LINES the
    rest is one line with reason Other. resource_fields: the messages name the resource's fields, else the
    module's options."""
    lines = {}
    for node in sorted(excluded):
        message = "; ".join(excluded[node])
        message = (resource_terms(message) if resource_fields else message)[:MAX_MESSAGE]
        key = (exclusion_code(excluded[node]), message)
        line = lines.get(key)
        if line is None:
            lines[key] = line = {"reason": key[0], "message": message, "nodeCnt": 0, "nodes": []}
        line["nodeCnt"] += 1
        if len(line["nodes"]) < MAX_EXAMPLE_NODES:
            line["nodes"].append(node)
    ordered = sorted(lines.values(), key=lambda line: (-line["nodeCnt"], line["reason"], line["message"]))
    if len(ordered) <= MAX_REASON_LINES:
        return ordered
    kept, rest = ordered[:MAX_REASON_LINES - 1], ordered[MAX_REASON_LINES - 1:]
    other = {"reason": "Other", "message": "%d more reasons" % len(rest),
             "nodeCnt": sum(line["nodeCnt"] for line in rest),
             "nodes": [node for line in rest for node in line["nodes"]][:MAX_EXAMPLE_NODES]}
    return [*kept, other]


def bounded_fields(status, excluded, incompatible):
    """The bounded fields of a resource's status from a distribution result's status and excluded nodes."""
    problems, total = worst_problems(status.get("entries") or [])
    return {
        "problems": problems,
        "problemCnt": total,
        "nodeExcludedCnt": len(excluded),
        "nodeIncompatibleCnt": len(incompatible),
        "excludedReasons": excluded_reasons(excluded),
    }
