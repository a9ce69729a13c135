# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The error of every capture stage."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError


class CaptureError(GkmError):
    """A capture refused or failed; nothing was pushed or patched after it. The message names the cause."""
