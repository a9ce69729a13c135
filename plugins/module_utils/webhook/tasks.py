# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The work of the webhook_install module: install.py's run with the module's cluster."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install import installer as install


def webhook_install(call):
    result, diffs = install.run(call.params, call.check_mode, call.kube)
    result["diff"] = diffs
    return result
