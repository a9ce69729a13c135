# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A cosign v2 signature of an image digest with the admin's private key, pure (cryptography): what
oci/signature.verify_v2 accepts, and cosign itself.

The payload is cosign's simple-signing document naming the repository and the exact manifest digest; the signature
(ECDSA P-256 or RSA with SHA-256 over the payload, or Ed25519) goes, base64, into the
`dev.cosignproject.cosign/signature` annotation of the signature manifest's one layer (publish.py). The key is a PEM
private key (PKCS#8 or the curve's own format, with its password if it has one); cosign's own encrypted key file
(`ENCRYPTED SIGSTORE PRIVATE KEY`) is not read: `cosign import-key-pair` goes the other way, so export the key as
PEM to give it here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError


def payload(repository, digest):
    """The simple-signing payload cosign signs for `repository@digest`."""
    return json.dumps({"critical": {"identity": {"docker-reference": repository},
                                    "image": {"docker-manifest-digest": digest},
                                    "type": "cosign container image signature"},
                       "optional": None}, sort_keys=True).encode()


def load_private_key(pem, password=None):
    from cryptography.hazmat.primitives import serialization

    try:
        return serialization.load_pem_private_key(pem.encode() if isinstance(pem, str) else pem,
                                                  password.encode() if password else None)
    except (ValueError, TypeError) as error:
        raise CaptureError("signing_key is not a PEM private key this module can use (or its password is wrong): "
                           "%s" % error) from None


def signature(private_key, data):
    """The base64 signature of `data` as oci/public_key.PublicKey verifies it for the key's type."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

    if isinstance(private_key, ec.EllipticCurvePrivateKey):
        signed = private_key.sign(data, ec.ECDSA(hashes.SHA256()))
    elif isinstance(private_key, rsa.RSAPrivateKey):
        signed = private_key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    elif isinstance(private_key, ed25519.Ed25519PrivateKey):
        signed = private_key.sign(data)
    else:
        raise CaptureError("signing_key is a %s key; ECDSA, RSA or Ed25519 is needed" % type(private_key).__name__)
    return base64.b64encode(signed).decode()
