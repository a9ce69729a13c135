"""The cert_manager role against the real local cluster, with the stand-in manifest (tests/fixtures/standins).

The stand-in is not cert-manager: it has cert-manager's CRDs, namespace and Deployments, which is what the
role's own logic (pinning, skip-if-present, ownership, uninstall-only-if-owned, the readiness check and its
failure message) works on. kwok runs the Deployments' pods; nothing really serves.
"""

import hashlib
import os

import pytest
import yaml
from kubernetes import client

from tests.helpers import platform
from tests.helpers.roles import run_role

pytestmark = pytest.mark.cluster

CRD = "certificates.cert-manager.io"
plain_node = platform.plain_node
ownership_namespace = platform.ownership_namespace
standin, delete_objects, record = platform.standin, platform.delete_objects, platform.record


def crd_exists(kube):
    return platform.crd_exists(kube, CRD)


def role_vars(sim, ownership_namespace, **extra):
    return dict({"cert_manager_kubeconfig": sim.kubeconfig, "cert_manager_ownership_namespace": ownership_namespace,
                 "cert_manager_wait_timeout": 60, "cert_manager_readiness_retries": 3,
                 "cert_manager_readiness_delay": 1}, **extra)


def test_argument_spec_and_pin_reject_bad_input(sim, tmp_path):
    run = run_role("cert_manager", tmp_path, {"cert_manager_install_method": "kubectl"})
    assert not run.ok
    message = " ".join(run.failures())
    assert "cert_manager_install_method" in message and "manifest, helm" in message

    run = run_role("cert_manager", tmp_path, {"cert_manager_version": "latest",
                                              "cert_manager_kubeconfig": sim.kubeconfig})
    assert not run.ok
    assert "a pin, never 'latest'" in " ".join(run.failures())


def test_install_is_pinned_recorded_idempotent_upgradable_and_removed(
        sim, kube, plain_node, ownership_namespace, tmp_path):
    path, objects = standin(tmp_path, "cert-manager.yaml", "v1.18.2")
    assert not crd_exists(kube), "a cert-manager CRD is already on the cluster; these tests need it absent"
    try:
        rehearsal = run_role("cert_manager", tmp_path,
                             role_vars(sim, ownership_namespace, cert_manager_manifest_path=path), check=True)
        assert rehearsal.ok, rehearsal.failures()
        assert rehearsal.facts["cert_manager_result"]["action"] == "install"
        assert rehearsal.changed >= 1
        assert not crd_exists(kube) and record(kube, ownership_namespace) is None

        mirror = "127.0.0.1:5000/mirror/jetstack"
        first = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_manifest_path=path, cert_manager_image_registry=mirror))
        assert first.ok, first.failures()
        assert first.facts["cert_manager_result"]["action"] == "install"
        assert crd_exists(kube)
        deployment = client.AppsV1Api(kube).read_namespaced_deployment("cert-manager", "cert-manager")
        assert deployment.spec.template.spec.containers[0].image == mirror + "/cert-manager-controller:v1.18.2"
        owned = record(kube, ownership_namespace)
        assert owned["version"] == "v1.18.2" and owned["method"] == "manifest" and owned["source"] == path
        assert owned["namespace_created"] is True

        again = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_manifest_path=path, cert_manager_image_registry=mirror))
        assert again.ok, again.failures()
        assert again.facts["cert_manager_result"]["action"] == "apply"
        assert again.changed == 0, again.changed_tasks()

        upgrade_path, _objects = standin(tmp_path, "cert-manager.yaml", "v1.18.3")
        upgrade = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_manifest_path=upgrade_path, cert_manager_version="v1.18.3"))
        assert upgrade.ok, upgrade.failures()
        assert upgrade.facts["cert_manager_result"]["action"] == "upgrade"
        labels = client.AppsV1Api(kube).read_namespaced_deployment("cert-manager", "cert-manager").metadata.labels
        assert labels["app.kubernetes.io/version"] == "v1.18.3"
        assert record(kube, ownership_namespace)["version"] == "v1.18.3"

        removal_rehearsal = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_state="absent"), check=True)
        assert removal_rehearsal.ok, removal_rehearsal.failures()
        assert crd_exists(kube) and record(kube, ownership_namespace) is not None

        removal = run_role("cert_manager", tmp_path, role_vars(sim, ownership_namespace, cert_manager_state="absent"))
        assert removal.ok, removal.failures()
        assert removal.facts["cert_manager_result"]["action"] == "remove"
        assert not crd_exists(kube)
        assert record(kube, ownership_namespace) is None
    finally:
        delete_objects(kube, objects)


def test_someone_elses_cert_manager_is_left_alone(sim, kube, plain_node, ownership_namespace, tmp_path):
    path, objects = standin(tmp_path, "cert-manager.yaml", "v1.17.0")
    platform.create_objects(kube, objects)
    try:
        present = run_role("cert_manager", tmp_path,
                           role_vars(sim, ownership_namespace, cert_manager_manifest_path=path))
        assert present.ok, present.failures()
        result = present.facts["cert_manager_result"]
        assert result["action"] == "skip" and result["found_version"] == "v1.17.0"
        assert "not installed by gkm.cluster" in result["reason"]
        assert record(kube, ownership_namespace) is None
        image = client.AppsV1Api(kube).read_namespaced_deployment("cert-manager", "cert-manager") \
            .spec.template.spec.containers[0].image
        assert image.endswith(":v1.17.0")

        absent = run_role("cert_manager", tmp_path, role_vars(sim, ownership_namespace, cert_manager_state="absent"))
        assert absent.ok, absent.failures()
        assert absent.facts["cert_manager_result"]["action"] == "keep"
        assert crd_exists(kube)
    finally:
        delete_objects(kube, objects)


def test_readiness_failure_names_the_refusal_and_what_to_check(sim, kube, plain_node, ownership_namespace, tmp_path):
    path, objects = standin(tmp_path, "cert-manager.yaml", "v1.18.2")
    with open(os.path.join(platform.STANDINS, "unreachable-webhook.yaml")) as handle:
        webhook = yaml.safe_load(handle)
    client.AdmissionregistrationV1Api(kube).create_validating_webhook_configuration(webhook)
    try:
        run = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_manifest_path=path, cert_manager_readiness_retries=2))
        assert not run.ok
        message = run.failures()[-1]
        assert "cert-manager is installed but its API does not work yet" in message
        assert "server-side dry-run Certificate was refused after 2 attempts" in message
        assert "failed calling webhook" in message
        assert "cert-manager-webhook pods" in message and ".svc" in message
        # Recorded before the check, so a failed install can still be removed by state=absent.
        assert record(kube, ownership_namespace)["version"] == "v1.18.2"
    finally:
        client.AdmissionregistrationV1Api(kube).delete_validating_webhook_configuration(webhook["metadata"]["name"])
    removal = run_role("cert_manager", tmp_path, role_vars(sim, ownership_namespace, cert_manager_state="absent"))
    try:
        assert removal.ok, removal.failures()
        assert not crd_exists(kube)
    finally:
        delete_objects(kube, objects)


def test_a_download_needs_a_known_checksum_and_is_verified_against_it(sim, kube, ownership_namespace, tmp_path):
    # The pinned release's checksum is not in the table (see roles/cert_manager/vars/main.yml): the default
    # URL is refused before anything is downloaded or applied (github.com is not even reachable here).
    run = run_role("cert_manager", tmp_path, role_vars(sim, ownership_namespace))
    assert not run.ok
    message = " ".join(run.failures())
    assert ("cert-manager v1.18.2: no known checksum for "
            "https://github.com/cert-manager/cert-manager/releases/download/v1.18.2/cert-manager.yaml") in message
    assert "sha256sum" in message and "set cert_manager_manifest_checksum" in message
    assert not crd_exists(kube) and record(kube, ownership_namespace) is None

    path, _objects = standin(tmp_path, "cert-manager.yaml", "v1.18.2")
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    with platform.serve_directory(os.path.dirname(path)) as base:
        url = "%s/%s" % (base, os.path.basename(path))
        malformed = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_manifest_url=url, cert_manager_manifest_checksum=digest))
        assert not malformed.ok
        assert 'cert_manager_manifest_checksum must be "sha256:"' in " ".join(malformed.failures())

        wrong = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_manifest_url=url,
            cert_manager_manifest_checksum="sha256:" + "0" * 64), check=True)
        assert not wrong.ok
        assert "did not match %s; it was %s." % ("0" * 64, digest) in " ".join(wrong.failures())

        # The table the roles pin: an entry for the version verifies a download without a user checksum.
        table = {"platform_component_name": "cert-manager", "platform_component_version": "v1.18.2",
                 "platform_component_namespace": "cert-manager", "platform_component_manifest_url": url,
                 "platform_component_kubeconfig": sim.kubeconfig,
                 "platform_component_ownership_namespace": ownership_namespace}
        tampered = run_role("platform_component", tmp_path, dict(
            table, platform_component_manifest_checksums={"v1.18.2": "sha256:" + "1" * 64}), check=True)
        assert not tampered.ok
        assert "did not match %s; it was %s." % ("1" * 64, digest) in " ".join(tampered.failures())
        pinned = run_role("platform_component", tmp_path, dict(
            table, platform_component_manifest_checksums={"v1.18.2": "sha256:" + digest}), check=True)
        assert pinned.ok, pinned.failures()
        assert pinned.facts["platform_component_result"]["action"] == "install"

        verified = run_role("cert_manager", tmp_path, role_vars(
            sim, ownership_namespace, cert_manager_manifest_url=url,
            cert_manager_manifest_checksum="sha256:" + digest), check=True)
        assert verified.ok, verified.failures()
        assert verified.facts["cert_manager_result"]["action"] == "install"
    assert not crd_exists(kube) and record(kube, ownership_namespace) is None
