# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of the cache modules (cache_distribute, cache_info, cache_reconcile), one function each.

Each takes the common/module.py ModuleCall and returns the module's result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import name_problem
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import DISTRIBUTION_ARG_SPEC
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.pipeline import (
    distribute,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.reconcile import reconcile
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.module_result import without_node_details
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.report import describe


def reported(call, work):
    """work()'s result, or the result a refusal carries, without the per-node lists unless node_details asks."""
    if call.params["node_details"]:
        return work()
    try:
        return without_node_details(work())
    except GkmError as error:
        error.result = without_node_details(error.result)
        raise


def cache_distribute(call):
    workers = call.params["concurrency"]

    def work():
        return distribute(call.kube(workers), call.params, check_mode=call.check_mode, want_diff=call.diff)

    return reported(call, work)


def cache_info(call):
    for field in ("name", "namespace"):
        problem = call.params[field] and name_problem(field, call.params[field])
        if problem:
            raise GkmError(problem)
    return describe(call.kube(), call.params["name"], call.params["namespace"])


def cache_reconcile(call):
    params = call.params
    options = {key: params[key] for key in DISTRIBUTION_ARG_SPEC}
    namespace = params["namespace"] if params["kind"] == "GKMCache" else None

    def work():
        return reconcile(call.kube(options["concurrency"]), params["kind"], params["name"], namespace, options,
                         check_mode=call.check_mode, want_diff=call.diff, definition=params["definition"])

    return reported(call, work)
