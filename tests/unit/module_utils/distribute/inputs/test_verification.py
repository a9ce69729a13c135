"""The extraction Jobs' own signature check: the format a label asks for, the key's way into the Jobs' Secret,
the extractor's options, and a verified slot extracted again when the check changes (pure, no cluster)."""

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SPEC_HASH_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import registry_secret, verification
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.verification import (
    SIGNATURE_NOT_VERIFIED,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import job_pods, planner, render
from ansible_collections.gkm.cluster.plugins.module_utils.extract import job_main
from tests.helpers.distribute import as_live, by_kind, facts, is_access, make_spec


def public_pem():
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


PEM = public_pem()


@pytest.mark.parametrize("label,expected", [("cosign-v2", "v2"), ("cosign-v3", "v3"), (None, None)])
def test_a_resource_label_picks_the_format_and_unlabelled_resources_are_not_verified(label, expected):
    verify = verification.job_verification({verification.LABEL_PARAM: label, "signature_public_key": PEM})
    assert verify == ((expected, PEM) if expected else None)


def test_cache_distribute_with_a_key_verifies_either_format_and_without_one_nothing():
    assert verification.job_verification({"signature_public_key": PEM}) == ("auto", PEM)
    assert verification.job_verification({verification.LABEL_PARAM: "cosign-v3"}) is None


@pytest.mark.parametrize("label,expected", [("cosign-v2", "v2"), ("cosign-v3", "v3"), (None, "auto")])
def test_the_admin_s_requirement_checks_every_cache_and_the_label_only_picks_the_format(label, expected):
    params = {verification.LABEL_PARAM: label, "signature_public_key": PEM, verification.REQUIRED_PARAM: True}
    assert verification.job_verification(params) == (expected, PEM)


@pytest.mark.parametrize("label", ["cosign-v2", None])
def test_a_required_check_without_the_key_is_refused_naming_the_key(label):
    with pytest.raises(verification.VerificationError, match="no signature_public_key was given"):
        verification.job_verification({verification.LABEL_PARAM: label, verification.REQUIRED_PARAM: True})


def test_an_unknown_label_value_is_refused_naming_the_two_formats():
    with pytest.raises(verification.VerificationError, match="cosign-v4: use cosign-v2 or cosign-v3"):
        verification.job_verification({verification.LABEL_PARAM: "cosign-v4", "signature_public_key": PEM})


def test_the_key_is_pem_text_or_a_file_and_anything_else_is_refused_before_any_job(tmp_path):
    path = tmp_path / "cosign.pub"
    path.write_text(PEM)
    assert verification.public_key_text(str(path)) == PEM
    with pytest.raises(verification.VerificationError, match="neither PEM text nor a readable file"):
        verification.public_key_text(str(tmp_path / "missing.pub"))
    with pytest.raises(verification.VerificationError, match="not a PEM public key"):
        verification.public_key_text("-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")


def verified_spec(signature_format="v3", pem=PEM, **params):
    spec = make_spec(**params)
    spec.verification = (signature_format, pem)
    spec.registry_files[verification.PUBLIC_KEY_FILE] = pem
    spec.extract_args = verification.extractor_args(spec.verification, registry_secret.MOUNT_PATH)
    return spec


def test_jobs_verify_with_the_mounted_key_and_the_label_s_format_against_the_digest_they_extract():
    spec = verified_spec()
    result = planner.plan(spec, facts())
    secret = by_kind(result.desired, "Secret")[0]
    assert set(secret["data"]) == {verification.PUBLIC_KEY_FILE}
    job = by_kind(result.desired, "Job")[0]
    pod_spec = job["spec"]["template"]["spec"]
    assert {"name": registry_secret.VOLUME_NAME, "mountPath": registry_secret.MOUNT_PATH, "readOnly": True} in (
        pod_spec["containers"][0]["volumeMounts"])
    args = job_main.build_parser().parse_args(pod_spec["containers"][0]["command"][3:])
    assert (args.verify, args.public_key, args.signature_format) == ("cosign", "/gkm-registry/cosign.pub", "v3")
    # The image is the digest the planner resolved: the signature must name exactly it.
    assert args.image == spec.image and args.image.endswith("@" + spec.digest)


def test_an_unverified_spec_renders_as_before():
    unverified = by_kind(planner.plan(make_spec(), facts()).desired, "PersistentVolumeClaim")[0]
    body = unverified["spec"]
    assert unverified["metadata"]["annotations"][SPEC_HASH_ANNOTATION] == render.spec_hash(body)


def test_turning_the_check_on_or_changing_key_or_format_extracts_the_slots_again():
    extracted = as_live(planner.plan(make_spec(), facts()).desired, complete_jobs=True, marked=True)
    assert planner.plan(make_spec(), facts(objects=extracted)).actions == []
    again = planner.plan(verified_spec(), facts(objects=extracted))
    # The slots again (the system namespace's Jobs went when their slots were marked).
    assert {(a.verb, a.kind) for a in again.actions if a.kind != "Secret" and not is_access(a.body)} == {
        ("replace", "PersistentVolume"), ("replace", "PersistentVolumeClaim"), ("create", "Job")}
    verified = as_live(again.desired, complete_jobs=True, marked=True)
    assert planner.plan(verified_spec(), facts(objects=verified)).actions == []
    for other in (verified_spec("v2"), verified_spec(pem=public_pem())):
        assert "replace" in {a.verb for a in planner.plan(other, facts(objects=verified)).actions}


def test_a_signature_refusal_has_its_own_exit_code_reason_and_fix():
    assert job_main.EXIT_SIGNATURE in render.FAIL_JOB_EXIT_CODES
    pod = {"metadata": {"name": "p", "creationTimestamp": "t"}, "spec": {"nodeName": "n1"},
           "status": {"containerStatuses": [{"name": render.EXTRACT_CONTAINER, "state": {"terminated": {
               "exitCode": job_main.EXIT_SIGNATURE, "message": "image x is not signed"}}}]}}
    problem = job_pods.pods_problem([pod])
    assert (problem.reason, problem.message) == (SIGNATURE_NOT_VERIFIED,
                                                 "extraction failed on node n1: image x is not signed")
    assert any("caches_signature_public_key" in fix for fix in problem.fix)
