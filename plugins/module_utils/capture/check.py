# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A kernel directory checked as Triton writes it and its group made canonical, pure.

Captured content comes from a tenant's pod and is trusted for nothing but what is checked here (after the
extractor's entry rules, read.py): the directory is named by the base32 form of the hash its metadata records; it
holds one group file `__grp__<name>.json` in Triton's shape listing plain file names (kernels/overlay.overlay_group's
checks), every file it lists and nothing else; the metadata `<name>.json` names the hash, the name and the target. The
group is rewritten to name the image's fixed root (kernels/image.GROUP_ROOT), as the images this collection builds
have it (the overlay re-points it in each pod). Whether the binary does what its IR says is not checked: nothing can,
short of compiling it again; the cache's signature says the admin published it, not that a tenant's compile is sound.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import json
import posixpath

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import (
    GROUP_ROOT,
    KernelMetadataError,
    kernel_facts,
)
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay import (
    GROUP_PREFIX,
    OverlayError,
    is_group_file,
    overlay_group,
)

# Triton's metadata and group files are a few kB; a larger one is not Triton's.
MAX_JSON_BYTES = 1024 * 1024


def hash_directory_name(kernel_hash):
    """The directory Triton stores a kernel under: the hex sha256 hash as unpadded base32 (runtime/cache.py)."""
    try:
        return base64.b32encode(bytes.fromhex(kernel_hash)).decode().rstrip("=")
    except (ValueError, binascii.Error, TypeError):
        raise CaptureError("the hash %r is not hexadecimal" % (kernel_hash,)) from None


def check_kernel(hash_dir, files, group_root=GROUP_ROOT):
    """(files with the group canonical, the kernel's facts) of one kernel directory; CaptureError naming what is
    wrong."""
    groups = [name for name in files if is_group_file(name)]
    if len(groups) != 1:
        raise CaptureError("kernel directory %s has %d group files; Triton writes one" % (hash_dir, len(groups)))
    [group] = groups
    kernel_name = group[len(GROUP_PREFIX):-len(".json")]
    try:
        if len(files[group]) > MAX_JSON_BYTES:
            raise OverlayError("larger than %d bytes" % MAX_JSON_BYTES)
        text, children = overlay_group(files[group].decode("utf-8"), posixpath.join(group_root, hash_dir))
    except (OverlayError, UnicodeDecodeError) as error:
        raise CaptureError("the group file %s/%s is not Triton's: %s" % (hash_dir, group, error)) from error
    listed = set(children)
    if listed | {group} != set(files):
        raise CaptureError("kernel directory %s holds %s; its group lists %s" % (
            hash_dir, ", ".join(sorted(set(files) - {group})), ", ".join(sorted(listed)) or "nothing"))
    metadata_name = kernel_name + ".json"
    if metadata_name not in files or len(files[metadata_name]) > MAX_JSON_BYTES:
        raise CaptureError("kernel directory %s has no metadata %s of at most %d bytes" % (
            hash_dir, metadata_name, MAX_JSON_BYTES))
    try:
        facts = kernel_facts(json.loads(files[metadata_name]))
    except (ValueError, KernelMetadataError) as error:
        raise CaptureError("the metadata %s/%s is not Triton's: %s" % (hash_dir, metadata_name, error)) from error
    if facts["name"] != kernel_name or hash_directory_name(facts["hash"]) != hash_dir:
        raise CaptureError("kernel directory %s holds the metadata of %s (hash %s), which Triton stores under %s" % (
            hash_dir, facts["name"], facts["hash"], hash_directory_name(facts["hash"])))
    return dict(files, **{group: text.encode("utf-8")}), facts
