# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one base of every error the collection reports to its user."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class GkmError(Exception):
    """A failure the user can act on: the message names the object or field and the fix.

    result carries what was done before the failure, so a module can report it beside the message.
    """

    def __init__(self, message, result=None):
        super(GkmError, self).__init__(message)
        self.result = result or {}
