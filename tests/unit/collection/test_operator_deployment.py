"""The in-cluster operator's Deployment (roles/gkm/templates/operator.yaml.j2) runs the controller with settings it
accepts: the caches role's options, named as the controller names them, and nothing else."""

import json
import os

import pytest
import yaml

from tests.helpers.operator_rbac import option_names, render_operator
from tests.helpers.paths import ROOT


def deployment(caches_options=None, **capture):
    (found,) = [obj for obj in render_operator(caches_options=caches_options, **capture) if obj["kind"] == "Deployment"]
    return found


def environment(caches_options=None, **capture):
    (container,) = deployment(caches_options, **capture)["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def test_the_option_names_are_the_caches_roles_but_the_tools_image():
    with open(os.path.join(ROOT, "roles", "caches", "vars", "main.yml")) as handle:
        role_options = set(yaml.safe_load(handle)["caches_reconcile_options"])
    assert set(option_names()) == role_options - {"extract_image"}


def test_the_caches_variables_set_become_options_without_their_prefix():
    env = environment({"caches_host_path_root": "/disk", "caches_serving_pvc": False, "caches_kubeconfig": "/k",
                       "caches_registry_ca_file": "", "caches_declared": [{"name": "x"}]})
    # The scrub runs in the operator's own namespace (render_operator's gkm-system).
    assert json.loads(env["GKM_CACHES_OPTIONS"]) == {
        "wait": True, "wait_timeout": 120, "system_namespace": "gkm-system", "host_path_root": "/disk",
        "serving_pvc": False}
    assert env["GKM_TOOLS_IMAGE"] == "registry.example/tools:0"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["GKM_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_the_controller_accepts_every_option_the_role_can_give():
    main = pytest.importorskip("controller.gkm_controller.main")  # kopf: Python 3.11 and later
    given = {"caches_" + name: "x" for name in option_names()}
    options = json.loads(environment(given)["GKM_CACHES_OPTIONS"])
    assert set(options) == set(option_names())
    assert main.distribution_options(options, "t")["extract_image"] == "t"


def test_the_probes_ask_the_port_the_controller_serves():
    spec = deployment()["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    port = int(environment()["GKM_PROBE_PORT"])
    assert container["readinessProbe"]["httpGet"] == container["livenessProbe"]["httpGet"] == {
        "path": "/healthz", "port": port}
    assert container["securityContext"]["readOnlyRootFilesystem"] and spec["securityContext"]["runAsNonRoot"]


def test_capture_gives_the_controller_its_setting_and_the_key_file_only_to_its_group():
    capture = {"repositories": {"team-a/llama": "reg/captures/llama"}, "allowed_namespaces": ["team-a"]}
    spec = deployment(capture=capture, capture_key_secret="capture-key")["spec"]["template"]["spec"]
    env = environment(capture=capture, capture_key_secret="capture-key")
    assert json.loads(env["GKM_CAPTURE"]) == dict(capture, signing_key_file="/etc/gkm/capture/cosign.key")
    assert env["GKM_CAPTURE_KEY_PASSWORD"] == {"secretKeyRef": {"name": "capture-key", "key": "cosign.password",
                                                                "optional": True}}
    (volume,) = [v for v in spec["volumes"] if v["name"] == "capture-key"]
    assert volume["secret"] == {"secretName": "capture-key", "defaultMode": 0o440,
                                "items": [{"key": "cosign.key", "path": "cosign.key"}]}
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsGroup"]
    (container,) = spec["containers"]
    assert {"name": "capture-key", "mountPath": "/etc/gkm/capture", "readOnly": True} in container["volumeMounts"]
    # Without the setting, neither the variable nor the key's volume.
    assert "GKM_CAPTURE" not in environment()
    assert [v["name"] for v in deployment()["spec"]["template"]["spec"]["volumes"]] == ["tmp"]
