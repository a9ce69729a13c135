# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one wrapper every gkm.cluster module runs through.

A module file holds its documentation, its own argument spec and one `run_module` call naming the
function that does its work. The wrapper adds kubernetes.core's auth options, checks the Python
libraries, hands the work function a `ModuleCall`, turns errors into failures that name their cause,
and drops the diff unless the user asked for one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth
from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import (
    DEFAULT_WORKERS,
    KUBERNETES_IMPORT_ERROR,
    Kube,
)
from ansible_collections.gkm.cluster.plugins.module_utils.common.timings import process_age
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC


class ModuleCall:
    """What a module's work function gets: its parameters, check and diff modes, and the cluster."""

    def __init__(self, module):
        self.params = module.params
        self.check_mode = module.check_mode
        self.diff = module._diff

    def api_client(self, workers=DEFAULT_WORKERS):
        if KUBERNETES_IMPORT_ERROR:
            raise GkmError(missing_required_lib("kubernetes"))
        return api_client_from_auth({key: self.params.get(key) for key in AUTH_ARG_SPEC}, workers)

    def kube(self, workers=DEFAULT_WORKERS):
        """A Kube on this task's cluster; in check mode every write is a server-side dry run."""
        return Kube(self.api_client(workers), dry_run=self.check_mode, workers=workers)


def run_module(argument_spec, work, libraries=(), always_needs_cluster=True, **module_options):
    """Run a module: work(ModuleCall) returns its result dict, a "diff" key included when it has one.

    Every module takes kubernetes.core's auth options. libraries: (name, import error or None) of the
    Python libraries the work needs besides the kubernetes client, which is checked up front unless
    always_needs_cluster is false (then only when the work asks for the cluster).
    """
    spec = dict(argument_spec, **AUTH_ARG_SPEC)
    if always_needs_cluster:
        libraries = (("kubernetes", KUBERNETES_IMPORT_ERROR), *libraries)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True, **module_options)
    for library, import_error in libraries:
        if import_error:
            module.fail_json(msg=missing_required_lib(library), exception=import_error)
    startup, started = process_age(), time.monotonic()
    try:
        result = work(ModuleCall(module))
    except GkmError as error:
        module.fail_json(msg=str(error), **_with_warnings_given(module, error.result))
    except Exception as error:  # the client's own errors (auth, connection) with their trace for -vvv
        name = module._name.rsplit(".", 1)[-1]
        module.fail_json(msg="%s failed: %s" % (name, error), exception=traceback.format_exc())
    if not module._diff:
        result.pop("diff", None)
    if "timings" in result:
        # Before the work: interpreter, imports, argument checks; the work's own phases add up to less than "work".
        result["timings"].update(startup=startup, work=round(time.monotonic() - started, 3))
    module.exit_json(**_with_warnings_given(module, result))


def _with_warnings_given(module, result):
    """The result without its "warnings", each given to module.warn: ansible-core reports them as warnings
    (and 2.19 deprecates passing them to exit_json)."""
    result = dict(result)
    for warning in result.pop("warnings", None) or []:
        module.warn(warning)
    return result
