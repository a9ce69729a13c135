# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""(I/O: the registry) The cache's current image content, pulled by the extractor (extract/pull.py: its digest
checks and entry rules) into a directory, the group files as the image has them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.capture.read import load_kernels
from ansible_collections.gkm.cluster.plugins.module_utils.extract.pull import CachePullError, ensure_cache
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import CACHE_DIR


def current_kernels(image, dest, registry_options):
    """(the image's digest, {hash dir: files}) of the cache's image. An image of another layout than Triton's (vLLM's)
    is refused: capture adds Triton kernels to a Triton cache."""
    options = dict(registry_options, image=image, dest=dest, rewrite_group_paths=False, compatibility="ignore")
    try:
        pulled = ensure_cache(options)
    except CachePullError as error:
        raise CaptureError("the cache's current image cannot be read: %s" % error) from error
    if pulled.get("kind") != "triton":
        raise CaptureError("the cache's image %s is a %s cache; capture adds to Triton caches only"
                           % (image, pulled["kind"]))
    root = os.path.join(dest, CACHE_DIR)
    hash_dirs = sorted(entry for entry in os.listdir(root) if os.path.isdir(os.path.join(root, entry))) \
        if os.path.isdir(root) else []
    return pulled["digest"], load_kernels(root, hash_dirs)
