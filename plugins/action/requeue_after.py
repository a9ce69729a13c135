# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""requeue_after: return the period for ansible-operator to reconcile the run's resource again after (see the module
documentation in plugins/modules/requeue_after.py). Runs on the controller: nothing to execute on a host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.gkm.cluster.plugins.module_utils.operator.requeue import RequeueError, requeue_period


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("period",))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        try:
            period = requeue_period(self._task.args.get("period"))
        except RequeueError as error:
            raise AnsibleActionFail(str(error)) from error
        result.update(changed=False, period=period)
        return result
