# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # What every module that talks to a cluster shares besides kubernetes.core's auth options: the client
    # range make test runs (its lowest and highest), and the action group module_defaults can name.
    DOCUMENTATION = r"""
requirements:
  - kubernetes >= 24.2.0
attributes:
  action_group:
    description: Use C(group/gkm.cluster.k8s) in C(module_defaults) to set the auth options once for all these modules.
    support: full
    membership:
      - gkm.cluster.k8s
"""
