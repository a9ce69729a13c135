# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The captured kernels merged with the cache's current ones, pure: a union by kernel directory (the hash).

A kernel both hold must be the same bytes, file for file, its group made canonical first (check.py): the same hash
with other bytes is refused, naming both digests, since one of the two compiles is not what the key promises (or the
IR records another compile's paths: Triton's .source and IR files carry the source file's absolute path, so the same
kernel compiled from another install differs; capture a pod given the cache, whose own compiles are its misses).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError


def kernel_digest(files):
    """sha256 over a kernel directory's files (name, length, bytes, in name order): its identity in messages."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(b"%s\0%d\0" % (name.encode("utf-8"), len(files[name])))
        digest.update(files[name])
    return "sha256:" + digest.hexdigest()


def merge(current, captured):
    """(merged {hash dir: files}, the hash dirs added). Raises CaptureError for a kernel held by both with other
    bytes."""
    merged = dict(current)
    added = []
    for hash_dir in sorted(captured):
        files = captured[hash_dir]
        if hash_dir in current:
            if current[hash_dir] != files:
                raise CaptureError("kernel %s is in the cache's image as %s and was captured as %s: the same kernel "
                                   "with other bytes is refused"
                                   % (hash_dir, kernel_digest(current[hash_dir]), kernel_digest(files)))
            continue
        merged[hash_dir] = files
        added.append(hash_dir)
    return merged, added
