# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The kubernetes client range every module is tested with (make test runs its lowest and highest).
    DOCUMENTATION = r"""
requirements:
  - kubernetes >= 24.2.0
"""
