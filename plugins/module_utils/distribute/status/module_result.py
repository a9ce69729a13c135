# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cache_distribute and cache_reconcile results without their per-node lists unless asked, pure.

A run works with one status entry per namespace and node; returned whole, they were most of the result (46 KB
of 52 KB at 180 slots) and 15,000 of them cost the Ansible controller seconds. Without node_details the result
keeps what the resource's status keeps - counts, phase, the worst problems with their total and one line per
reason nodes do not get the cache - so its size no longer grows with the cluster. The per-node state is in the
per-node objects, which cache_info reads.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import image_volume
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.summary import (
    MAX_PROBLEMS,
    excluded_reasons,
    worst_entries,
)

# The per-node lists of a distribution result, returned only with node_details.
PER_NODE_KEYS = ("eligible_nodes", "excluded_nodes")


def without_node_details(result):
    """The result with status.entries replaced by its worst problems, the unschedulable Jobs bounded (an imageVolume
    cache's pulled nodes and mounting pods too), and the eligible and excluded node lists replaced by one line per
    exclusion reason. A result without a status (a run refused early) is returned as it is."""
    status = result.get("status")
    if not isinstance(status, dict) or "entries" not in status:
        return result
    bounded = {key: value for key, value in result.items() if key not in PER_NODE_KEYS}
    problems, total = worst_entries(status["entries"])
    unschedulable = status.get("unschedulable") or []
    bounded["status"] = dict({key: value for key, value in status.items() if key != "entries"},
                             problems=problems, problem_count=total, unschedulable=unschedulable[:MAX_PROBLEMS],
                             unschedulable_count=len(unschedulable))
    if status.get("image_volume"):
        bounded["status"]["image_volume"] = image_volume.bounded(status["image_volume"])
    if "excluded_nodes" in result:
        bounded["excluded_reasons"] = excluded_reasons(result["excluded_nodes"] or {}, resource_fields=False)
    return bounded
