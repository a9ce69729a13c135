# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The smallest JSON merge patch (RFC 7386) that turns one document into another, pure.

Objects several writers share (a node's GKMCacheNode lists every cache on it) are written as a patch
of what changed, so one cache's write never carries, or overwrites, another cache's part.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def merge_patch(before, after):
    """A patch with the keys whose values differ (None deletes a key); lists are replaced whole.

    Returns {} when the documents are equal. Values must not be None themselves: a merge patch
    cannot set a null.
    """
    patch = {}
    for key in before:
        if key not in after:
            patch[key] = None
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            nested = merge_patch(old, value)
            if nested:
                patch[key] = nested
        elif key not in before or old != value:
            patch[key] = value
    return patch
