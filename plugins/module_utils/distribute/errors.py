# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The error every stage of a reconcile raises: what went wrong, and the partial result known so far."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError


class DistributeError(GkmError):
    """The run cannot go on; `result` carries what is known so far (plan, status, writes)."""

    def __init__(self, message, **result):
        super(DistributeError, self).__init__(message, result)
