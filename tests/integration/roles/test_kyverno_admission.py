"""Real Kyverno (tools/kyverno, run by sim.py kyverno-up) checks GKMCache signatures with the kyverno role's policies.

Images in the local registry are signed by the real cosign CLIs (v2 `.sig` tags, v3 sigstore bundles as OCI 1.1
referrers), with a key pair made by cosign and no transparency log; the role's policies carry the public key with
Rekor and SCT checks off. Every labelled case is also verified by the collection's own verification
(oci/signature.py, as cache_extract runs it) and the two answers must agree.
"""

import json
import os
import subprocess
import sys
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import signature_check
from ansible_collections.gkm.cluster.plugins.module_utils.extract import pull as cache_pull
from ansible_collections.gkm.cluster.plugins.module_utils.platform import kyverno_policy
from tests.helpers import kcache_images as ki
from tests.helpers.paths import ROOT
from tests.helpers.roles import run_role
from tests.helpers.sim import SIM_SCRIPT
from tests.helpers.webhook import wait_until

pytestmark = pytest.mark.cluster


GROUP, VERSION, PLURAL = "gkm.io", "v1alpha1", "gkmcaches"
FORMAT_LABEL = "gkm.io/signature-format"
POLICIES = ("gkm-verify-gkmcache-cosign-v2", "gkm-verify-gkmcache-cosign-v3")
# The one namespace where the admin requires signatures whatever a GKMCache's label says (issue 31, class 4).
REQUIRED_NAMESPACE = "t-kyverno-required-%s" % uuid.uuid4().hex[:6]


def _sim(*arguments):
    result = subprocess.run([sys.executable, SIM_SCRIPT, *arguments], check=True, cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _key_pair(binary, workdir):
    os.makedirs(workdir)
    with open(ki.cosign_cli_generate_key(binary, workdir)) as handle:
        return workdir, handle.read()


@pytest.fixture(scope="module")
def cosign(tmp_path_factory):
    """(cosign v2, cosign v3, (key dir, public PEM) of the trusted key, the same of another key)."""
    subprocess.run([os.path.join(ROOT, "tools", "bench-tools.sh")], check=True, capture_output=True)
    v2, v3 = ki.cosign_binary("cosign"), ki.cosign_binary("cosign3")
    assert v2 and v3, "tools/bench-tools.sh did not build cosign and cosign3"
    base = tmp_path_factory.mktemp("keys")
    return v2, v3, _key_pair(v2, str(base / "trusted")), _key_pair(v2, str(base / "other"))


@pytest.fixture(scope="module")
def kyverno(sim, kube, crds, cosign, tmp_path_factory):
    """Kyverno running with the role's policies for the trusted key; afterwards stopped and removed."""
    started = _sim("kyverno-up")
    try:
        run = run_role("kyverno", tmp_path_factory.mktemp("role"), {
            "kyverno_kubeconfig": sim.kubeconfig, "kyverno_ownership_namespace": "default",
            "kyverno_attestor_public_key": cosign[2][1], "kyverno_ignore_tlog": True, "kyverno_ignore_sct": True,
            "kyverno_require_signature": [REQUIRED_NAMESPACE], "kyverno_wait_timeout": 60,
            "kyverno_readiness_retries": 30, "kyverno_readiness_delay": 1})
        assert run.ok, run.failures()
        # Kyverno is there and not installed by the role: only the policies are applied.
        assert run.facts["kyverno_result"]["action"] == "skip", run.facts["kyverno_result"]
        custom = client.CustomObjectsApi(kube)

        def ready():
            policies = {item["metadata"]["name"]: item for item in custom.list_cluster_custom_object(
                "kyverno.io", "v1", "clusterpolicies")["items"]}
            return all(any(c["type"] == "Ready" and c["status"] == "True"
                           for c in ((policies.get(name) or {}).get("status") or {}).get("conditions") or [])
                       for name in POLICIES)

        wait_until("Kyverno to serve the GKMCache policies", ready, timeout=120)
        yield started
    finally:
        _sim("kyverno-down", "--purge")


def _cache(name, image, signature_format=None):
    labels = {FORMAT_LABEL: signature_format} if signature_format else {}
    return {"apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": name, "labels": labels}, "spec": {"image": image}}


def _admit(crds, namespace, image, signature_format=None):
    """(admitted, the stored image or Kyverno's message) of creating a GKMCache."""
    name = "c-%s" % uuid.uuid4().hex[:8]
    try:
        created = crds.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL,
                                                       _cache(name, image, signature_format))
    except ApiException as error:
        # 400: a webhook denied it; 500: a webhook could not be called.
        assert error.status in (400, 500), error.body
        return False, json.loads(error.body)["message"]
    return True, created


def _collection_verifies(image, public_key, signature_format):
    """The collection's own answer: cache_extract's verification (check mode: nothing is extracted)."""
    try:
        cache_pull.ensure_cache({"image": image.ref, "dest": "/nonexistent/gkm-kyverno-table", "plain_http": True,
                                 "verify": "cosign", "public_key": public_key,
                                 "signature_format": signature_format[len("cosign-"):]}, check_mode=True)
    except cache_pull.CachePullError as error:
        return False, str(error)
    return True, ""


def _repository(name):
    return "it/kyverno-%s-%s" % (name, uuid.uuid4().hex[:6])


@pytest.fixture(scope="module")
def signed_images(registry, cosign):
    """Images per case of the table, signed as the case says (one image build per case, shared by the tests)."""
    v2, v3, trusted, other = cosign

    def image(name, seed):
        return ki.build_image(registry.host, _repository(name), "v1", ki.CacheSpec(kernels=1, seed=seed))

    images = {}
    images["v2-trusted"] = image("v2-trusted", 11)
    ki.cosign_cli_sign(v2, images["v2-trusted"], trusted[0])
    images["v3-trusted"] = image("v3-trusted", 12)
    ki.cosign_cli_sign(v3, images["v3-trusted"], trusted[0], v3=True)
    images["unsigned"] = image("unsigned", 13)
    images["v2-other-key"] = image("v2-other", 14)
    ki.cosign_cli_sign(v2, images["v2-other-key"], other[0])
    images["v3-other-key"] = image("v3-other", 15)
    ki.cosign_cli_sign(v3, images["v3-other-key"], other[0], v3=True)
    for fmt, source in (("v2", "v2-trusted"), ("v3", "v3-trusted")):
        # Another image of the same repository, carrying the signature made for the signed one.
        stolen = ki.build_image(registry.host, images[source].repository, "other", ki.CacheSpec(kernels=1, seed=16))
        ki.transplant_signatures(images[source], stolen)
        images["%s-other-digest" % fmt] = stolen
    return images


# case -> (image, label, admitted); the collection's own verification must give the same answer.
TABLE = [
    ("v2-trusted", "cosign-v2", True),
    ("v3-trusted", "cosign-v3", True),
    ("unsigned", "cosign-v2", False),
    ("unsigned", "cosign-v3", False),
    ("v2-other-key", "cosign-v2", False),
    ("v3-other-key", "cosign-v3", False),
    ("v2-other-digest", "cosign-v2", False),
    ("v3-other-digest", "cosign-v3", False),
    ("v2-trusted", "cosign-v3", False),
]


@pytest.mark.parametrize("case,label,admitted", TABLE,
                         ids=["%s-labelled-%s" % (case, label) for case, label, _admitted in TABLE])
def test_kyverno_and_the_collection_agree(kyverno, crds, namespace, signed_images, cosign, case, label, admitted):
    image = signed_images[case]
    verdict, outcome = _admit(crds, namespace, image.ref, label)
    ours, why = _collection_verifies(image, cosign[2][1], label)
    # The case table of the closing note (pytest -s shows it).
    print("TABLE %-16s %-10s kyverno=%-5s collection=%-5s | %s | %s" % (
        case, label, verdict, ours, "" if verdict else outcome.strip().splitlines()[-1].strip(), why))
    assert (verdict, ours) == (admitted, admitted), (outcome, why)
    if admitted:
        # Pinned to the digest Kyverno verified (mutateDigest).
        assert outcome["spec"]["image"].endswith("@" + image.digest), outcome["spec"]["image"]
        # Kyverno's own record of the pass is only noted: a tenant could write the same annotation (issue 31).
        condition = signature_check.signature_condition(outcome, "now")
        assert (condition["status"], condition["reason"]) == ("Unknown", "ReportedByKyverno"), outcome["metadata"]
    else:
        assert "gkm-verify-gkmcache-%s" % label in outcome and "failed to verify image" in outcome, outcome


def test_an_unlabelled_cache_is_admitted_unchecked_and_its_status_says_so(kyverno, crds, namespace, signed_images):
    admitted, created = _admit(crds, namespace, signed_images["unsigned"].ref)
    assert admitted
    # No policy matches it: Kyverno neither verifies nor pins it, and the status gets no SignatureVerified condition.
    assert created["spec"]["image"] == signed_images["unsigned"].ref
    assert signature_check.signature_condition(created, "now") is None


def test_an_unlabelled_cache_where_signatures_are_required_is_verified_at_admission(
        kyverno, crds, kube, signed_images):
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": REQUIRED_NAMESPACE, "labels": {"gkm.io/test": "true"}}})
    try:
        refused, message = _admit(crds, REQUIRED_NAMESPACE, signed_images["unsigned"].ref)
        # Verified in the first listed format, the label the owner left out notwithstanding.
        admitted, created = _admit(crds, REQUIRED_NAMESPACE, signed_images["v2-trusted"].ref)
    finally:
        core.delete_namespace(REQUIRED_NAMESPACE)
    assert not refused, message
    assert "gkm-verify-gkmcache-cosign-v2" in message and "failed to verify image" in message, message
    assert admitted, created
    assert created["spec"]["image"].endswith("@" + signed_images["v2-trusted"].digest), created["spec"]["image"]


def test_kyverno_accepts_the_keyless_identity_pinned_policies(kyverno, kube):
    """Not exercised (it needs Sigstore's public services), but Kyverno's own policy validation accepts it."""
    attestor = kyverno_policy.attestor_entry(
        keyless_issuer="https://token.actions.githubusercontent.com",
        keyless_subject="https://github.com/example-org/kernel-caches/.github/workflows/build.yml@refs/heads/main")
    custom = client.CustomObjectsApi(kube)
    for policy in kyverno_policy.render_verify_policies(["cosign-v2", "cosign-v3"], attestor,
                                                        name_prefix="gkm-keyless-probe"):
        created = custom.create_cluster_custom_object("kyverno.io", "v1", "clusterpolicies", policy, dry_run="All")
        entry = created["spec"]["rules"][0]["verifyImages"][0]["attestors"][0]["entries"][0]
        assert entry["keyless"] == attestor["keyless"], entry


def test_kyverno_down_refuses_gkmcache_writes_and_nothing_else(kyverno, crds, namespace, signed_images, kube):
    image = signed_images["v2-trusted"]
    _sim("kyverno-down")
    try:
        for label in ("cosign-v2", None):
            admitted, message = _admit(crds, namespace, image.ref, label)
            assert not admitted
            assert "failed calling webhook" in message, message
        core = client.CoreV1Api(kube)
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "still-writable"}})
        core.delete_namespaced_config_map("still-writable", namespace)
    finally:
        _sim("kyverno-up")
