# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Certificates made with `cryptography`: a CA, certificates it signs, and expiry checks.

Used by the webhook's self-signed TLS mode and by the local simulated cluster's control plane.
Keys are ECDSA P-256 unless RSA is asked for (service-account signing keys).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import ipaddress
import traceback

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    HAS_CRYPTOGRAPHY = True
    CRYPTOGRAPHY_IMPORT_ERROR = None
except ImportError:
    HAS_CRYPTOGRAPHY = False
    CRYPTOGRAPHY_IMPORT_ERROR = traceback.format_exc()

# Backdating absorbs clock skew between the machine that signs and the one that verifies.
_BACKDATE = datetime.timedelta(minutes=5)


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def new_private_key(kind="ec"):
    """Return a new private key: 'ec' (P-256) or 'rsa' (2048 bits)."""
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def key_to_pem(key):
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def public_key_to_pem(key):
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def cert_to_pem(cert):
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def load_cert(pem):
    return x509.load_pem_x509_certificate(pem.encode() if isinstance(pem, str) else pem)


def load_key(pem):
    return serialization.load_pem_private_key(pem.encode() if isinstance(pem, str) else pem, password=None)


def _name(common_name, organization=None):
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def new_ca(common_name, valid_days=3650):
    """Return (cert_pem, key_pem) of a new self-signed CA."""
    key = new_private_key()
    name = _name(common_name)
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert_to_pem(cert), key_to_pem(key)


def new_signed_cert(ca_cert_pem, ca_key_pem, common_name, dns_names=(), ip_addresses=(),
                    organization=None, valid_days=365, server=True, client=False):
    """Return (cert_pem, key_pem) of a leaf certificate signed by the given CA.

    dns_names and ip_addresses become subject alternative names; server/client choose the
    extended key usages.
    """
    ca_cert = load_cert(ca_cert_pem)
    ca_key = load_key(ca_key_pem)
    key = new_private_key()
    now = _now()
    usages = []
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    alt_names = [x509.DNSName(name) for name in dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return cert_to_pem(builder.sign(ca_key, hashes.SHA256())), key_to_pem(key)


def not_after(cert_pem):
    """Expiry of a PEM certificate as an aware UTC datetime."""
    return load_cert(cert_pem).not_valid_after_utc


def expires_within(cert_pem, delta, now=None):
    """True when the certificate expires before now + delta (a timedelta)."""
    return not_after(cert_pem) <= (now or _now()) + delta


def issued_by(cert_pem, ca_cert_pem):
    """True when cert_pem's signature verifies with ca_cert_pem's public key."""
    try:
        load_cert(cert_pem).verify_directly_issued_by(load_cert(ca_cert_pem))
    except Exception:
        return False
    return True
