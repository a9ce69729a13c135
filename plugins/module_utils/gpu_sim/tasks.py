# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of the sim_nodes module: sim_nodes.py's reconcile with the module's cluster, and its diff."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim.sim_nodes import reconcile


def sim_nodes(call):
    params = call.params
    result = reconcile(call.kube(), params["groups"], mode=params["mode"], prune=params["prune"],
                       wait=params["wait"], timeout=params["wait_timeout"], scope=params["scope"])
    result["diff"] = {
        "before": {"removed": result["deleted"], "replaced": result["replaced"]},
        "after": {"added": result["created"], "replaced": result["replaced"], "updated": result["updated"]},
    }
    return result
