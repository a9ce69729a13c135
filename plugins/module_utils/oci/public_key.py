# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A cosign public key (ECDSA, RSA or Ed25519) from PEM, and whether a signature is valid with it.

Apart from signature.py so that an extraction that verifies nothing never imports cryptography (about
25 ms of CPU at the extraction Job's start-up).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import traceback

try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

    HAS_CRYPTOGRAPHY = True
    CRYPTOGRAPHY_IMPORT_ERROR = None
except ImportError:
    HAS_CRYPTOGRAPHY = False
    CRYPTOGRAPHY_IMPORT_ERROR = traceback.format_exc()


class PublicKeyError(ValueError):
    """The key cannot be used: not PEM, or cryptography is missing."""


class PublicKey:
    """A public key loaded from PEM text."""

    def __init__(self, pem):
        if not HAS_CRYPTOGRAPHY:
            raise PublicKeyError("the cryptography Python package is required to verify signatures")
        data = pem.encode() if isinstance(pem, str) else pem
        try:
            self._key = serialization.load_pem_public_key(data)
        except ValueError as exc:
            raise PublicKeyError("public_key is not a PEM public key: %s" % exc) from exc

    def verifies(self, signature, data=None, digest=None):
        """True when `signature` is valid over `data` (or over the precomputed sha256 `digest`)."""
        key = self._key
        try:
            if isinstance(key, ec.EllipticCurvePublicKey):
                algorithm = ec.ECDSA(Prehashed(hashes.SHA256()) if digest is not None else hashes.SHA256())
                key.verify(signature, digest if digest is not None else data, algorithm)
            elif isinstance(key, rsa.RSAPublicKey):
                hashing = Prehashed(hashes.SHA256()) if digest is not None else hashes.SHA256()
                key.verify(signature, digest if digest is not None else data, padding.PKCS1v15(), hashing)
            elif isinstance(key, ed25519.Ed25519PublicKey) and data is not None:
                key.verify(signature, data)
            else:
                return False
        except InvalidSignature:
            return False
        return True
