"""What of the controller's registry options reaches the extraction Jobs, and how it is shown (pure)."""

import base64
import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import registry_secret as rs

HOST = "registry.example.com:5000"


def auths(data):
    return json.loads(data[rs.DOCKER_CONFIG_KEY])["auths"]


def test_username_and_password_become_a_docker_config_for_the_image_registry_only():
    data = rs.secret_data(HOST, "robot", "s3cret")
    assert auths(data) == {HOST: {"auth": base64.b64encode(b"robot:s3cret").decode()}}
    assert rs.CA_KEY not in data


def test_a_docker_config_is_cut_to_the_image_registry_and_its_inline_auth():
    config = json.dumps({
        "auths": {"https://%s/v1/" % HOST: {"auth": "dXNlcjpwdw=="}, "other.example.com": {"auth": "b3RoZXI6eA=="}},
        "credsStore": "desktop", "credHelpers": {"gcr.io": "gcloud"}})
    assert auths(rs.secret_data(HOST, docker_config_text=config)) == {HOST: {"auth": "dXNlcjpwdw=="}}
    split = json.dumps({"auths": {HOST: {"username": "u", "password": "p"}}})
    assert auths(rs.secret_data(HOST, docker_config_text=split)) == {HOST: {"auth": base64.b64encode(b"u:p").decode()}}
    # Only a credential helper for this registry: nothing can travel to the Jobs.
    assert rs.secret_data(HOST, docker_config_text=json.dumps({"credHelpers": {HOST: "x"}})) == {}
    with pytest.raises(rs.RegistrySecretError, match=r"registry_docker_config is not a Docker config\.json"):
        rs.secret_data(HOST, docker_config_text="{not json")


def test_ca_alone_and_nothing_at_all():
    assert rs.secret_data(HOST, ca_text="PEM") == {rs.CA_KEY: "PEM"}
    assert rs.secret_data(HOST) == {}
    assert rs.extractor_args({}) == []


def test_names_fit_and_keep_namespaced_and_cluster_caches_apart():
    long_name = "c" * 63
    name = rs.secret_name(long_name, "team-a", "team-a")
    assert len(name) <= 63 and "-registry-" in name
    assert rs.secret_name("va", "team-a", "team-a") != rs.secret_name("va", "", "team-a")


def test_redaction_keeps_keys_and_says_what_changed():
    live = {"kind": "Secret", "data": {"config.json": "b2xk", "ca.crt": "UEVN"}}
    desired = {"kind": "Secret", "data": {"config.json": "bmV3", "ca.crt": "UEVN"}}
    assert rs.redacted(desired, live)["data"] == {"ca.crt": rs.REDACTED, "config.json": rs.CHANGED}
    assert rs.redacted(desired)["data"] == {"ca.crt": rs.REDACTED, "config.json": rs.REDACTED}
    assert desired["data"]["config.json"] == "bmV3"  # the original is left alone
