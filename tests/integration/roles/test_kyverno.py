"""The kyverno role against the real local cluster, with the stand-in manifest (tests/fixtures/standins).

The stand-in is not Kyverno: it has Kyverno's namespace, Deployments and ClusterPolicy CRD, with a schema written
for these tests that checks the fields our policies use, so the API server itself rejects a policy of the wrong
shape. Nothing evaluates the policies here: the real Kyverno verifying GKMCache signatures with the role's policies is
tests/integration/roles/test_kyverno_admission.py.
"""

import pytest
from kubernetes import client

from tests.helpers import platform
from tests.helpers.roles import run_role

pytestmark = pytest.mark.cluster

plain_node = platform.plain_node
ownership_namespace = platform.ownership_namespace
standin, delete_objects, record = platform.standin, platform.delete_objects, platform.record

ISSUER = "https://token.actions.githubusercontent.com"
SUBJECT = "https://github.com/example-org/kernel-caches/.github/workflows/build.yml@refs/heads/main"
PUBLIC_KEY = ("-----BEGIN PUBLIC KEY-----\n"
              "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEexampleexampleexampleexampleexampleexample\n"
              "-----END PUBLIC KEY-----")


def policies(kube):
    items = client.CustomObjectsApi(kube).list_cluster_custom_object("kyverno.io", "v1", "clusterpolicies")["items"]
    return {item["metadata"]["name"]: item for item in items}


def crd_exists(kube):
    return platform.crd_exists(kube, "clusterpolicies.kyverno.io")


def role_vars(sim, ownership, **extra):
    return dict({"kyverno_kubeconfig": sim.kubeconfig, "kyverno_ownership_namespace": ownership,
                 "kyverno_wait_timeout": 60, "kyverno_readiness_retries": 3, "kyverno_readiness_delay": 1}, **extra)


def test_refuses_without_a_signer_identity_and_changes_nothing(sim, kube, tmp_path, ownership_namespace):
    path, _objects = standin(tmp_path, "kyverno.yaml", "v1.19.1")
    run = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_manifest_path=path))
    assert not run.ok
    message = " ".join(run.failures())
    assert "no signer identity is set" in message
    assert "kyverno_attestor_public_key" in message and "kyverno_attestor_keyless_issuer" in message
    assert not crd_exists(kube)

    run = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_manifest_path=path,
                                                  kyverno_attestor_keyless_issuer=ISSUER,
                                                  kyverno_attestor_keyless_subject="https://github.com/*"))
    assert not run.ok
    assert "matches any signer" in " ".join(run.failures())

    run = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_signature_formats=["cosign-v4"]))
    assert not run.ok
    assert "kyverno_signature_formats" in " ".join(run.failures())
    assert not crd_exists(kube)


def test_install_policies_by_label_idempotence_reselection_and_removal(
        sim, kube, plain_node, ownership_namespace, tmp_path):
    path, objects = standin(tmp_path, "kyverno.yaml", "v1.19.1")
    keyless = dict(kyverno_manifest_path=path, kyverno_attestor_keyless_issuer=ISSUER,
                   kyverno_attestor_keyless_subject=SUBJECT)
    assert not crd_exists(kube), "a Kyverno CRD is already on the cluster; these tests need it absent"
    try:
        rehearsal = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, **keyless), check=True)
        assert rehearsal.ok, rehearsal.failures()
        assert not crd_exists(kube)

        first = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, **keyless))
        assert first.ok, first.failures()
        result = first.facts["kyverno_result"]
        assert result["action"] == "install"
        assert result["policies"] == ["gkm-verify-gkmcache-cosign-v2", "gkm-verify-gkmcache-cosign-v3"]
        assert record(kube, ownership_namespace, "kyverno")["version"] == "v1.19.1"

        live = policies(kube)
        for signature_format, verify_type in (("cosign-v2", "Cosign"), ("cosign-v3", "SigstoreBundle")):
            rule = live["gkm-verify-gkmcache-" + signature_format]["spec"]["rules"][0]
            assert rule["match"]["any"][0]["resources"]["selector"]["matchLabels"] == {
                "gkm.io/signature-format": signature_format}
            assert rule["match"]["any"][0]["resources"]["kinds"] == ["gkm.io/v1alpha1/GKMCache"]
            assert rule["imageExtractors"] == {"GKMCache": [{"path": "/spec/image"}]}
            verify = rule["verifyImages"][0]
            assert verify["type"] == verify_type and verify["mutateDigest"] is True
            assert verify["attestors"][0]["entries"][0] == {"keyless": {
                "issuer": ISSUER, "subject": SUBJECT, "rekor": {"url": "https://rekor.sigstore.dev"}}}

        again = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, **keyless))
        assert again.ok, again.failures()
        assert again.changed == 0, again.changed_tasks()

        narrowed = run_role("kyverno", tmp_path, role_vars(
            sim, ownership_namespace, kyverno_manifest_path=path, kyverno_attestor_public_key=PUBLIC_KEY,
            kyverno_signature_formats=["cosign-v3"]))
        assert narrowed.ok, narrowed.failures()
        live = policies(kube)
        assert "gkm-verify-gkmcache-cosign-v2" not in live
        entry = live["gkm-verify-gkmcache-cosign-v3"]["spec"]["rules"][0]["verifyImages"][0]["attestors"][0]
        assert entry["entries"][0] == {"keys": {"publicKeys": PUBLIC_KEY}}

        removal = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_state="absent"))
        assert removal.ok, removal.failures()
        assert removal.facts["kyverno_result"]["action"] == "remove"
        assert not crd_exists(kube)
        assert record(kube, ownership_namespace, "kyverno") is None
    finally:
        delete_objects(kube, objects)


def test_someone_elses_kyverno_keeps_running_and_only_our_policies_go(
        sim, kube, plain_node, ownership_namespace, tmp_path):
    path, objects = standin(tmp_path, "kyverno.yaml", "v1.14.0")
    try:
        installed = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_manifest_path=path,
                                                            kyverno_version="v1.14.0",
                                                            kyverno_attestor_public_key=PUBLIC_KEY))
        assert installed.ok, installed.failures()
        # Make it someone else's: drop our record, as if another tool had installed Kyverno.
        client.CoreV1Api(kube).delete_namespaced_config_map("gkm-cluster-ownership", ownership_namespace)
        client.CustomObjectsApi(kube).create_cluster_custom_object("kyverno.io", "v1", "clusterpolicies", {
            "apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy", "metadata": {"name": "someone-elses-policy"},
            "spec": {"rules": [{"name": "theirs", "match": {"any": [{"resources": {"kinds": ["Pod"]}}]}}]}})

        present = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_manifest_path=path,
                                                          kyverno_attestor_public_key=PUBLIC_KEY))
        assert present.ok, present.failures()
        assert present.facts["kyverno_result"]["action"] == "skip"
        assert present.facts["kyverno_result"]["found_version"] == "v1.14.0"

        absent = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_state="absent"))
        assert absent.ok, absent.failures()
        assert absent.facts["kyverno_result"]["action"] == "keep"
        assert crd_exists(kube)
        assert set(policies(kube)) == {"someone-elses-policy"}
    finally:
        delete_objects(kube, objects)


def test_the_default_download_is_refused_without_a_known_checksum(sim, kube, tmp_path, ownership_namespace):
    run = run_role("kyverno", tmp_path, role_vars(sim, ownership_namespace, kyverno_attestor_keyless_issuer=ISSUER,
                                                  kyverno_attestor_keyless_subject=SUBJECT))
    assert not run.ok
    message = " ".join(run.failures())
    assert ("kyverno v1.19.1: no known checksum for "
            "https://github.com/kyverno/kyverno/releases/download/v1.19.1/install.yaml") in message
    assert "sha256sum" in message and "set kyverno_manifest_checksum" in message
    assert not crd_exists(kube) and record(kube, ownership_namespace, "kyverno") is None
