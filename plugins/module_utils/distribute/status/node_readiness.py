# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node readiness labels, pure: which nodes hold a ReadWriteOnce cache extracted at its current digest, as one
node label per cache that schedulers and the steering webhook can select on.

Key: `cache.gkm.io/<cache namespace>.<cache>` for a GKMCache, `cache.gkm.io/<cache>` for a ClusterGKMCache
(namespace and cache names hold no dot, so the two never meet); a name part longer than 63 characters becomes a
readable prefix and a stable hash (naming.label_value). Value: the short digest (12 hex) the node holds.

A node carries the label while every current slot of the cache on it (one per namespace) is Extracted at the
current digest. While a new digest is not extracted there yet, a node that still serves a previous digest from
the slots plan.py keeps (make before break) keeps the previous value; it loses the label when a slot fails with
nothing kept, or is removed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import short_digest
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import KEPT_UNTIL_REPLACED

EXTRACTED = "Extracted"
# Status entries that are not a current slot of the node.
NOT_CURRENT = ("Outdated", "Incompatible")


def ready_labels(spec, entries):
    """{node: short digest} of the nodes whose current slots are all Extracted, or else whose every namespace is
    Extracted or still served by a kept previous slot (that digest); none for ReadOnlyMany, whose PVC serves every
    node, or an absent cache."""
    if spec.state != "present" or not spec.per_node:
        return {}
    phases, kept = {}, {}
    for entry in entries:
        if not entry.get("node"):
            continue
        if entry.get("reason") == KEPT_UNTIL_REPLACED:
            kept.setdefault(entry["node"], {})[entry["namespace"]] = entry["digest"]
        elif entry["phase"] not in NOT_CURRENT:
            phases.setdefault(entry["node"], {})[entry["namespace"]] = entry["phase"]
    value = short_digest(spec.digest)
    labels = {}
    for node, by_namespace in phases.items():
        previous = kept.get(node, {})
        if all(phase == EXTRACTED for phase in by_namespace.values()):
            labels[node] = value
        elif all(phase == EXTRACTED or namespace in previous for namespace, phase in by_namespace.items()):
            labels[node] = min(previous[namespace] for namespace, phase in by_namespace.items()
                               if phase != EXTRACTED)
    return labels


def label_changes(nodes, key, desired):
    """[(node name, value or None to remove)] that take the nodes' `key` label to `desired`; nothing when they
    already match."""
    changes = []
    for node in nodes:
        name = node["metadata"]["name"]
        have = (node["metadata"].get("labels") or {}).get(key)
        want = desired.get(name)
        if have != want:
            changes.append((name, want))
    return sorted(changes)
