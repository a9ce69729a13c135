"""The controller's capture (controller/gkm_controller/captures.py): the admin's --capture setting checked at start,
naming what is wrong, and which Pod events start a capture: a finished pod opted in to a cache the admin allows, once.

kopf 1.45.2 is pinned in requirements/dev.txt for Python 3.11 and later; without it this file skips."""

import json
import logging

import pytest

kopf = pytest.importorskip("kopf")

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from kubernetes import client  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex  # noqa: E402
from controller.gkm_controller import handlers, main  # noqa: E402
from controller.gkm_controller.captures import Captures, capture_settings  # noqa: E402


@pytest.fixture
def key_file(tmp_path):
    """An EC P-256 signing key's PEM file, encrypted with the password "pw"."""
    key = ec.generate_private_key(ec.SECP256R1())
    path = tmp_path / "cosign.key"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.BestAvailableEncryption(b"pw")))
    return str(path)


def settings(key_file, **changes):
    return json.dumps(dict({"repositories": {"team-a/llama": "reg/captures/llama"}, "allowed_namespaces": ["team-a"],
                            "signing_key_file": key_file}, **changes))


def pod(uid="u-1", phase="Succeeded", capture="llama", namespace="team-a"):
    annotations = {"gkm.io/capture": capture} if capture else {}
    return {"metadata": {"name": "warm-up", "namespace": namespace, "uid": uid, "annotations": annotations},
            "status": {"phase": phase}}


def test_no_setting_is_no_capture_and_a_whole_one_is_read_with_its_key(key_file):
    assert capture_settings("") is None
    read = capture_settings(settings(key_file), "pw")
    assert read["repositories"] == {"team-a/llama": "reg/captures/llama"} and read["tag"] is None


@pytest.mark.parametrize("changes, password, named", [
    ({"repositories": {}}, "pw", "repositories"),
    ({"repositories": {"team-a/llama": ""}}, "pw", "repositories"),
    ({"allowed_namespaces": "team-a"}, "pw", "allowed_namespaces"),
    ({"signing_key_file": None}, "pw", "signing_key_file"),
    ({"tag": 3}, "pw", "tag"),
    ({"push": True}, "pw", "unknown setting push"),
    ({}, "wrong", "password is wrong"),
    ({"signing_key_file": "/nonexistent/cosign.key"}, "pw", "neither PEM text nor a readable file"),
], ids=["no cache", "no repository", "namespaces not a list", "no key", "tag not a string", "unknown", "password",
        "key file missing"])
def test_a_setting_the_controller_cannot_use_stops_it_at_start_naming_the_setting(
        key_file, changes, password, named):
    with pytest.raises(ValueError, match=named):
        capture_settings(settings(key_file, **changes), password)
    with pytest.raises(SystemExit):
        main.parse_args(["--capture", settings(key_file, **changes)], {"GKM_CAPTURE_KEY_PASSWORD": password})


def test_a_finished_pod_opted_in_to_an_allowed_cache_is_captured_once_and_no_other(key_file, caplog):
    captures = Captures(None, ClusterIndex(), capture_settings(settings(key_file), "pw"),
                        {"registry_plain_http": True, "wait": True}, "pw")
    started = []
    captures.capture = lambda namespace, name, target: started.append((namespace, name, target))
    try:
        assert captures.pod_changed(pod(phase="Running")) is None
        assert captures.pod_changed(pod(uid="u-2", capture=None)) is None
        captures.pod_changed(pod()).result(timeout=10)
        assert captures.pod_changed(pod()) is None  # once per pod
        with caplog.at_level(logging.WARNING):
            assert captures.pod_changed(pod(uid="u-3", capture="other")) is None
        assert "opted in to capture into 'other', a cache capture.repositories does not name" in caplog.text
        assert started == [("team-a", "warm-up", ("GKMCache", "llama", "team-a"))]
        # The registry options are the distribution options' own; nothing else of them reaches the capture.
        assert captures.registry == {"registry_plain_http": True}
    finally:
        captures.stop()


def test_the_pod_watch_hands_listed_added_and_modified_pods_to_the_capture_and_not_deleted_ones():
    seen = []
    controller = handlers.Controller(ClusterIndex(), lambda *args: None, on_pod=seen.append)
    for event_type in (None, "ADDED", "MODIFIED", "DELETED"):
        controller.pod_event(event_type, pod(uid=str(event_type)))
    assert [obj["metadata"]["uid"] for obj in seen] == ["None", "ADDED", "MODIFIED"]


def test_build_wires_the_capture_to_the_pod_watch_only_when_set(key_file):
    plain = main.build(main.parse_args([], {}), client.ApiClient())[2]
    assert plain.on_pod is None
    args = main.parse_args(["--capture", settings(key_file)], {"GKM_CAPTURE_KEY_PASSWORD": "pw"})
    wired = main.build(args, client.ApiClient())[2]
    try:
        assert wired.on_pod.__self__.settings == args.capture
    finally:
        wired.on_pod.__self__.stop()
