# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""(I/O: the admin's registry) The packaged image pushed by digest, with its cosign v2 signature beside it
(`sha256-<hex>.sig`, where oci/signature.verify_v2 and cosign look), and optionally a tag.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gkm.cluster.plugins.module_utils.capture import sign
from ansible_collections.gkm.cluster.plugins.module_utils.capture.package import OCI_CONFIG
from ansible_collections.gkm.cluster.plugins.module_utils.oci.registry import OCI_MANIFEST
from ansible_collections.gkm.cluster.plugins.module_utils.oci.signature import SIGNATURE_ANNOTATION, SIMPLESIGNING


def signature_manifest(client, container, repository, digest, private_key):
    """The signature manifest of `digest` (its payload and config blobs uploaded) as bytes."""
    signed = sign.payload(repository, digest)
    config = json.dumps({"architecture": "", "os": "", "config": {},
                         "rootfs": {"type": "layers", "diff_ids": [client.push_blob(container, signed)]}},
                        sort_keys=True).encode()
    return json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": client.push_blob(container, config), "size": len(config)},
        "layers": [{"mediaType": SIMPLESIGNING, "digest": client.push_blob(container, signed), "size": len(signed),
                    "annotations": {SIGNATURE_ANNOTATION: sign.signature(private_key, signed)}}],
    }, sort_keys=True).encode()


def publish(client, container, repository, built, private_key, tag=None):
    """Push the image of package.image (blobs, then the manifest by digest), sign it, tag it when asked; its
    digest."""
    client.push_blob(container, built["layer"])
    client.push_blob(container, built["config"])
    digest = client.push_manifest(container, built["digest"], built["manifest"], OCI_MANIFEST)
    client.push_manifest(container, digest.replace(":", "-") + ".sig",
                         signature_manifest(client, container, repository, digest, private_key), OCI_MANIFEST)
    if tag:
        client.push_manifest(container, tag, built["manifest"], OCI_MANIFEST)
    return digest
