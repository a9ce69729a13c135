# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of the platform modules (component_ownership, hardware_preflight, sweep), one function each.

Each takes the common/module.py ModuleCall and returns the module's result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.platform import ownership_store, preflight_gather
from ansible_collections.gkm.cluster.plugins.module_utils.platform.sweep import sweep as sweep_labelled


def component_ownership(call):
    result, diff = ownership_store.run(call.params, call.check_mode, call.kube)
    if diff:
        result["diff"] = diff
    return result


def hardware_preflight(call):
    return preflight_gather.run(call.params, call.check_mode, call.kube)


def sweep(call):
    result = sweep_labelled(call.kube(), call.params["kinds"], call.params["delete_namespaces"], call.check_mode,
                            call.params["system_namespace"], call.params.get("scrub_image"),
                            call.params["scrub_timeout"])
    labelled = result["deleted"] + ["Namespace %s" % name for name in result["unlabelled"]]
    result["diff"] = {"before": {"labelled": sorted(labelled)}, "after": {"labelled": []}}
    return result
