# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node readiness labels, pure: which nodes hold a ReadWriteOnce cache extracted at its current digest, as one
node label per cache that schedulers and the steering webhook can select on.

Key: `cache.gkm.io/<cache namespace>.<cache>` for a GKMCache, `cache.gkm.io/<cache>` for a ClusterGKMCache
(namespace and cache names hold no dot, so the two never meet); a name part longer than 63 characters becomes a
readable prefix and a stable hash (naming.label_value). Value: the short digest (12 hex) the node holds.

A node carries the label while every current slot of the cache on it (one per namespace) is Extracted at the
current digest; it loses it when one fails, is removed, or a new digest is not extracted there yet.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.naming import label_value, short_digest

LABEL_PREFIX = "cache.gkm.io/"
EXTRACTED = "Extracted"
# Status entries that are not a current slot of the node.
NOT_CURRENT = ("Outdated", "Incompatible")


def label_key(cache, cache_namespace):
    return LABEL_PREFIX + label_value("%s.%s" % (cache_namespace, cache) if cache_namespace else cache)


def ready_labels(spec, entries):
    """{node: short digest} of the nodes whose current slots are all Extracted (none for ReadOnlyMany, whose PVC
    serves every node, or an absent cache)."""
    if spec.state != "present" or not spec.per_node:
        return {}
    phases = {}
    for entry in entries:
        if entry.get("node") and entry["phase"] not in NOT_CURRENT:
            phases.setdefault(entry["node"], set()).add(entry["phase"])
    value = short_digest(spec.digest)
    return {node: value for node, seen in phases.items() if seen == {EXTRACTED}}


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
