"""The admin's registry credentials go only to the host they are for (docs/security.md, class 3, the controller's
half): a user name and password to the one host the admin names, a token realm's Basic credentials only on the
registry's own host or one the admin lists."""

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.oci import registry


@pytest.mark.parametrize("realm, host", [
    ("https://auth.example.com/token", "auth.example.com"),
    ("http://127.0.0.1:5000/token?x=1", "127.0.0.1:5000"),
    ("https://Registry.Example.com:443/service/token", "registry.example.com:443"),
    ("registry.example.com/token", "registry.example.com"),
])
def test_the_host_of_a_token_realm(realm, host):
    assert registry.realm_host(realm) == host


@pytest.mark.parametrize("host, credentials_host, sent", [
    ("registry.example.com", "registry.example.com", True),
    ("Registry.Example.com", "registry.example.com", True),
    ("evil.example.com", "registry.example.com", False),
    ("registry.example.com:5000", "registry.example.com", False),
    ("127.0.0.1:5001", "127.0.0.1:5000", False),
    ("anything.example.com", None, True),
])
def test_credentials_go_only_to_the_host_they_are_for(host, credentials_host, sent):
    assert registry.credentials_for(host, credentials_host) is sent


def basic_of(client):
    return getattr(client._oras.auth, "_basic_auth", None)


def test_a_client_for_another_host_holds_no_credentials():
    assert basic_of(registry.RegistryClient("evil.example.com", username="admin", password="secret",
                                            credentials_host="registry.example.com")) is None
    assert basic_of(registry.RegistryClient("registry.example.com", username="admin", password="secret",
                                            credentials_host="registry.example.com"))


@pytest.mark.parametrize("challenge, allowed", [
    ('Bearer realm="https://registry.example.com/token",service="registry"', True),
    ('Bearer realm="https://auth.example.com/token",service="registry"', True),
    ('Bearer realm="https://evil.example.com/token",service="registry"', False),
    ('Bearer realm="https://registry.example.com.evil.example.com/token"', False),
    ('Bearer realm="http://127.0.0.1:9/token"', False),
])
def test_a_token_realm_gets_the_credentials_only_on_the_registrys_host_or_a_listed_one(challenge, allowed):
    client = registry.RegistryClient("registry.example.com", username="admin", password="secret",
                                     credentials_host="registry.example.com", auth_hosts=["auth.example.com"])
    assert client._oras.realm_allowed(challenge) is allowed
