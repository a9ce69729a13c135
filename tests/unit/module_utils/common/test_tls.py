import datetime

from cryptography import x509

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls


def test_signed_cert_has_sans_and_verifies_against_its_ca():
    ca_cert, ca_key = tls.new_ca("test-ca")
    cert, _key = tls.new_signed_cert(ca_cert, ca_key, "svc", dns_names=["svc.ns.svc"], ip_addresses=["127.0.0.1"])
    san = tls.load_cert(cert).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["svc.ns.svc"]
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert tls.issued_by(cert, ca_cert)
    other_ca, _other_key = tls.new_ca("other-ca")
    assert not tls.issued_by(cert, other_ca)


def test_expiry_window():
    ca_cert, ca_key = tls.new_ca("test-ca")
    cert, _key = tls.new_signed_cert(ca_cert, ca_key, "svc", valid_days=10)
    assert tls.expires_within(cert, datetime.timedelta(days=11))
    assert not tls.expires_within(cert, datetime.timedelta(days=9))
