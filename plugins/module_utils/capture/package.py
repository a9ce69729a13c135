# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The merged kernels as an OCI image in MCV's Triton format, pure and deterministic: the same kernels make the
same layer, config and manifest bytes, so capturing nothing new pushes nothing.

The layer holds `io.triton.cache/<hash dir>/<files>` and `io.triton.manifest/manifest.json`; the config's labels
and the manifest entries come from the kernels' metadata by kernels/image.py, the rules the collection's other
images are built with. The digest of Triton's `triton_key()` is not in a kernel's metadata, so a captured image
carries no `io.gkm.cache/triton-key` label.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gzip
import io
import json
import posixpath
import tarfile

from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import (
    CACHE_DIR,
    MANIFEST_PATH,
    labels,
    mcv_manifest_entry,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import OCI_MANIFEST, sha256_digest

OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"


def layer_files(kernels, facts):
    """{path in the layer: bytes}: every kernel's files and MCV's manifest.json (entries in hash order)."""
    files = {posixpath.join(CACHE_DIR, hash_dir, name): data
             for hash_dir, kernel in kernels.items() for name, data in kernel.items()}
    entries = [mcv_manifest_entry(facts[hash_dir]) for hash_dir in sorted(kernels)]
    files[MANIFEST_PATH] = json.dumps({"triton": entries}, indent=2, sort_keys=True).encode()
    return files


def layer(files):
    """(gzip tar bytes, the uncompressed tar's digest): files in path order, owned by root, 0644, time 0."""
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[path]))
    tar_bytes = tar_buffer.getvalue()
    return gzip.compress(tar_bytes, compresslevel=6, mtime=0), sha256_digest(tar_bytes)


def image(kernels, facts):
    """{"layer", "config", "manifest": bytes, "digest": the manifest's, "labels", "kernels": count} of the image."""
    files = layer_files(kernels, facts)
    blob, diff_id = layer(files)
    found = labels("triton", [facts[hash_dir] for hash_dir in sorted(kernels)], sum(len(d) for d in files.values()))
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": found},
                         "rootfs": {"type": "layers", "diff_ids": [diff_id]}}, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": sha256_digest(config), "size": len(config)},
        "layers": [{"mediaType": OCI_LAYER_GZIP, "digest": sha256_digest(blob), "size": len(blob)}],
    }, sort_keys=True).encode()
    return {"layer": blob, "config": config, "manifest": manifest, "digest": sha256_digest(manifest), "labels": found,
            "kernels": len(kernels)}
