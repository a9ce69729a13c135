# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: registry_secrets_namespace
short_description: The one namespace the extraction Jobs' registry Secrets live in, if the options put them all there
version_added: 0.1.0
description:
  - Returns the system namespace when the distribution options put every extraction Job there
    (C(system_namespace_jobs) true and C(create_pvs) C(always), so no slot is a provisioned volume whose Job stays in
    the slot's namespace), else an empty string (Secrets in the caches' namespaces).
  - The gkm role grants the in-cluster operator Secrets in that namespace only, and the operator watches them there
    only, so it cannot read the Secrets of any tenant's namespace.
options:
  _input:
    description: The distribution options, as C(gkm.cluster.cache_distribute) takes them (C(system_namespace),
      C(system_namespace_jobs), C(create_pvs)); one left out has that module's default.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say where the operator may read Secrets
  ansible.builtin.debug:
    msg: "{{ {'system_namespace': 'gkm-system', 'system_namespace_jobs': true, 'create_pvs': 'always'}
             | gkm.cluster.registry_secrets_namespace }}"
"""

RETURN = r"""
_value:
  description: The namespace, or an empty string when Secrets may live in any cache's namespace.
  type: str
"""

from ansible.module_utils.parsing.convert_bool import boolean  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import (  # noqa: E402
    DISTRIBUTION_ARG_SPEC,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.render import (  # noqa: E402
    registry_secrets_namespace as decided,
)

OPTIONS_READ = ("system_namespace", "system_namespace_jobs", "create_pvs")


def registry_secrets_namespace(options):
    # An option the inventory leaves out is the module's default, as the operator's reconciles get it.
    options = dict({key: DISTRIBUTION_ARG_SPEC[key]["default"] for key in OPTIONS_READ}, **(options or {}))
    options["system_namespace_jobs"] = boolean(options["system_namespace_jobs"], strict=False)
    return decided(options) or ""


class FilterModule(object):
    def filters(self):
        return {"registry_secrets_namespace": registry_secrets_namespace}
