# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Self-signed TLS for the webhook: decide what to keep, renew or issue, given what the Secrets hold.

Pure apart from key generation (tls.py): no API calls. Two Secrets hold the material:
- the CA Secret: `ca.crt` (the current CA first, then earlier CAs that have not expired) and
  `ca.key` (the current CA's key; it never leaves this Secret, the server does not mount it);
- the serving Secret (type kubernetes.io/tls): `tls.crt`, `tls.key` and `ca.crt`, mounted by the server.

Renewal never opens a window where admission fails: a new CA joins the webhook's caBundle while
the previous CA stays in it until it expires, so a server still presenting a certificate of the
previous CA (the kubelet refreshes mounted Secrets with a delay) keeps being trusted. The caller
must publish the new bundle before it writes the new serving certificate.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import ipaddress
import re

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls

try:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
except ImportError:
    pass  # common.tls.CRYPTOGRAPHY_IMPORT_ERROR reports it; the module fails with missing_required_lib first

CA_CERT_KEY = "ca.crt"
CA_KEY_KEY = "ca.key"
TLS_CERT_KEY = "tls.crt"
TLS_KEY_KEY = "tls.key"

_PEM_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.DOTALL)


def split_pem_bundle(bundle):
    """The PEM certificates of a bundle, in order."""
    return [match.group(0) + "\n" for match in _PEM_CERT.finditer(bundle or "")]


def _now():
    return datetime.datetime.now(datetime.timezone.utc)


def _public_key_pem(public_key):
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _pair_matches(cert_pem, key_pem):
    try:
        cert_key = tls.load_cert(cert_pem).public_key()
        key = tls.load_key(key_pem).public_key()
    except Exception:  # malformed PEM of any kind means "does not match"
        return False
    return _public_key_pem(cert_key) == _public_key_pem(key)


def subject_alt_names(cert_pem):
    """(sorted DNS names, sorted IP addresses) of a certificate."""
    try:
        extension = tls.load_cert(cert_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return [], []
    names = extension.value
    return (sorted(names.get_values_for_type(x509.DNSName)),
            sorted(str(ip) for ip in names.get_values_for_type(x509.IPAddress)))


def hosts_to_sans(hosts):
    """Split host names into (sorted DNS names, sorted IP addresses) for a serving certificate."""
    dns_names, ips = set(), set()
    for host in hosts:
        try:
            ips.add(str(ipaddress.ip_address(host)))
        except ValueError:
            dns_names.add(host)
    return sorted(dns_names), sorted(ips)


class SelfSignedPlan:
    """The Secrets' desired data and the caBundle, with what changed and why.

    ca_data and serving_data map Secret keys to PEM strings; ca_bundle is the PEM the webhook
    trusts; reasons explains each renewal in words for the module's result.
    """

    def __init__(self, ca_data, serving_data, ca_bundle, ca_renewed, serving_renewed, reasons):
        self.ca_data = ca_data
        self.serving_data = serving_data
        self.ca_bundle = ca_bundle
        self.ca_renewed = ca_renewed
        self.serving_renewed = serving_renewed
        self.reasons = reasons


def _ca_problem(ca_certs, ca_key, lifetime_needed, now):
    if not ca_certs or not ca_key:
        return "no CA yet"
    try:
        if not _pair_matches(ca_certs[0], ca_key):
            return "the CA certificate and key do not match"
        if tls.expires_within(ca_certs[0], lifetime_needed, now=now):
            return "the CA expires on {0}, within the renewal window".format(tls.not_after(ca_certs[0]).date())
    except ValueError:
        return "the CA certificate does not parse"
    return None


def _serving_problem(cert, key, ca_cert, dns_names, ips, renew_before, now):
    if not cert or not key:
        return "no serving certificate yet"
    try:
        if not _pair_matches(cert, key):
            return "the serving certificate and key do not match"
        if not tls.issued_by(cert, ca_cert):
            return "the serving certificate was not issued by the current CA"
        if tls.expires_within(cert, renew_before, now=now):
            return "the serving certificate expires on {0}, within renew_before".format(tls.not_after(cert).date())
        if subject_alt_names(cert) != (dns_names, ips):
            return "the serving certificate names other hosts than {0}".format(", ".join(dns_names + ips))
    except ValueError:
        return "the serving certificate does not parse"
    return None


def plan_self_signed(ca_data, serving_data, common_name, hosts, cert_valid_days, ca_valid_days,
                     renew_before_days, now=None):
    """Decide the CA and serving material from the current Secret data (dicts of PEM strings, or None).

    The CA is renewed when it would expire within renew_before plus one serving-certificate
    lifetime, so every serving certificate it signs expires before it does.
    """
    now = now or _now()
    ca_data = ca_data or {}
    serving_data = serving_data or {}
    renew_before = datetime.timedelta(days=renew_before_days)
    reasons = []

    ca_certs = split_pem_bundle(ca_data.get(CA_CERT_KEY))
    ca_key = ca_data.get(CA_KEY_KEY)
    problem = _ca_problem(ca_certs, ca_key, renew_before + datetime.timedelta(days=cert_valid_days), now)
    ca_renewed = problem is not None
    if ca_renewed:
        reasons.append("new CA: " + problem)
        new_cert, ca_key = tls.new_ca("{0} CA".format(common_name), valid_days=ca_valid_days)
        ca_certs = [new_cert, *ca_certs]
    # Earlier CAs stay trusted until they expire: servers may still present certificates they signed.
    kept = []
    for cert in ca_certs:
        try:
            if cert not in kept and (cert is ca_certs[0] or not tls.expires_within(cert, datetime.timedelta(0), now)):
                kept.append(cert)
        except ValueError:
            continue
    ca_bundle = "".join(kept)

    dns_names, ips = hosts_to_sans(hosts)
    cert, key = serving_data.get(TLS_CERT_KEY), serving_data.get(TLS_KEY_KEY)
    problem = _serving_problem(cert, key, kept[0], dns_names, ips, renew_before, now)
    serving_renewed = problem is not None
    if serving_renewed:
        reasons.append("new serving certificate: " + problem)
        cert, key = tls.new_signed_cert(kept[0], ca_key, common_name, dns_names=dns_names, ip_addresses=ips,
                                        valid_days=cert_valid_days)
    return SelfSignedPlan(
        ca_data={CA_CERT_KEY: ca_bundle, CA_KEY_KEY: ca_key},
        serving_data={TLS_CERT_KEY: cert, TLS_KEY_KEY: key, CA_CERT_KEY: ca_bundle},
        ca_bundle=ca_bundle,
        ca_renewed=ca_renewed,
        serving_renewed=serving_renewed,
        reasons=reasons,
    )
