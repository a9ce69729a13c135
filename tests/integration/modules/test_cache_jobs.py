"""The extraction Jobs as the real API server sees them: Pod Security admission of their pods with the extractor as
root and as uid 1000, and the registry Secret they mount (created, unchanged, rotated, removed, never shown)."""

import base64
import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.helpers import kcache_images
from tests.helpers.modules import AuditWrites, run_module

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

NODE = "gkm-gpu-worker-1"
EXTRACT_IMAGE = "gkm-cluster-tools:test"
PSA_LABEL = "pod-security.kubernetes.io/enforce"
SECRET_SELECTOR = "gkm.io/cache=%s"
# Where the Jobs of hostPath slots and their Secret are by default (system_namespace_jobs).
SYSTEM_NAMESPACE = "gkm-system"


@pytest.fixture(scope="module")
def image(registry):
    return kcache_images.build_image(registry.host, "jobs/vector-add", "v1",
                                     kcache_images.CacheSpec(backend="hip", compiled=True))


def distribute(sim, name, namespace, image_ref, **args):
    template = {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                         "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                             "nodeSelectorTerms": [{"matchFields": [
                                 {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}}}}}
    check, diff = args.pop("check", False), args.pop("diff", False)
    args.setdefault("wait", False)
    return run_module("cache_distribute", sim.kubeconfig, check=check, diff=diff, name=name, namespace=namespace,
                      image=image_ref, extract_image=EXTRACT_IMAGE, registry_plain_http=True, pod_template=template,
                      **args)


def remove(sim, name, namespace):
    result = run_module("cache_distribute", sim.kubeconfig, name=name, namespace=namespace, state="absent",
                        force=True)
    assert not result.get("failed"), result


def job_pod_admission(kube, namespace, name):
    """The API server's verdict (dry run) on a pod made from the cache's Job template: None or the refusal."""
    job = client.BatchV1Api(kube).list_namespaced_job(namespace, label_selector="gkm.io/cache=%s" % name).items[0]
    template = client.ApiClient().sanitize_for_serialization(job.spec.template)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "admission-%s" % uuid.uuid4().hex[:5]},
           "spec": template["spec"]}
    try:
        client.CoreV1Api(kube).create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as error:
        assert error.status == 403, error
        return json.loads(error.body)["message"]
    return None


def enforce(kube, namespace, level):
    client.CoreV1Api(kube).patch_namespace(namespace, {"metadata": {"labels": {PSA_LABEL: level}}})


def test_pod_security_baseline_admits_the_root_extractor_restricted_only_the_job_without_it(
        sim, kube, image, namespace):
    with_step, without_step = ("psa-%s-%s" % (which, uuid.uuid4().hex[:5]) for which in ("with", "without"))
    try:
        # No provisioner here, so the PVs are hostPath ones and set_volume_owner (the extractor as root) is on. The
        # Jobs in the cache's namespace, where its Pod Security decides: the layout system_namespace_jobs=false keeps.
        for name, mode in ((with_step, "auto"), (without_step, "never")):
            result = distribute(sim, name, namespace, image.ref, set_volume_owner=mode, system_namespace_jobs=False)
            assert not result.get("failed"), result.get("msg")
        enforce(kube, namespace, "restricted")
        refusal = job_pod_admission(kube, namespace, with_step)
        assert refusal and 'violates PodSecurity "restricted:latest"' in refusal
        # Root, but no capability added: only runAsNonRoot and runAsUser=0 break the restricted profile.
        assert 'container "extract"' in refusal and "runAsNonRoot" in refusal and "runAsUser=0" in refusal
        assert "unrestricted capabilities" not in refusal
        assert job_pod_admission(kube, namespace, without_step) is None
        enforce(kube, namespace, "baseline")
        assert job_pod_admission(kube, namespace, with_step) is None
    finally:
        for name in (with_step, without_step):
            remove(sim, name, namespace)


def secrets(kube, namespace, name):
    return client.CoreV1Api(kube).list_namespaced_secret(namespace, label_selector=SECRET_SELECTOR % name).items


def test_registry_credentials_and_ca_reach_the_job_as_a_secret_and_nowhere_else(
        sim, kube, image, namespace, tmp_path):
    name = "sec-%s" % uuid.uuid4().hex[:5]
    password = "pw-%s" % uuid.uuid4().hex
    auth = base64.b64encode(("robot:%s" % password).encode()).decode()
    ca_file = tmp_path / "ca.crt"
    ca_file.write_text("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n")
    credentials = {"registry_username": "robot", "registry_password": password, "registry_ca_file": str(ca_file),
                   "registry_host": sim.registry}
    try:
        planned = distribute(sim, name, namespace, image.ref, check=True, diff=True, **credentials)
        assert planned["plan"]["summary"]["create"]["Secret"] == 1
        shown = json.dumps(planned)
        assert password not in shown and auth not in shown
        secret_diff = next(d for d in planned["diff"] if d["after"].get("kind") == "Secret")
        assert secret_diff["after"]["data"] == {"ca.crt": "<redacted>", "config.json": "<redacted>"}
        assert secrets(kube, SYSTEM_NAMESPACE, name) == []

        audit = AuditWrites()
        created = distribute(sim, name, namespace, image.ref, diff=True, **credentials)
        assert not created.get("failed"), created
        assert password not in json.dumps(created) and auth not in json.dumps(created)
        # In the system namespace with the Job, none in the tenant's.
        assert secrets(kube, namespace, name) == []
        secret, = secrets(kube, SYSTEM_NAMESPACE, name)
        config = json.loads(base64.b64decode(secret.data["config.json"]))
        assert config == {"auths": {sim.registry: {"auth": auth}}}
        assert base64.b64decode(secret.data["ca.crt"]).decode() == ca_file.read_text()
        assert secret.metadata.labels["app.kubernetes.io/managed-by"] == "gkm.cluster"
        job, = client.BatchV1Api(kube).list_namespaced_job(
            SYSTEM_NAMESPACE, label_selector="gkm.io/cache=%s" % name).items
        job_text = json.dumps(client.ApiClient().sanitize_for_serialization(job))
        assert password not in job_text and auth not in job_text
        pod_spec = job.spec.template.spec
        volume = next(v for v in pod_spec.volumes if v.name == "registry")
        assert volume.secret.secret_name == secret.metadata.name and volume.secret.default_mode == 0o440
        extractor = pod_spec.containers[0]
        assert not extractor.env
        assert any(m.mount_path == "/gkm-registry" and m.read_only for m in extractor.volume_mounts)
        assert "--docker-config" in extractor.command and "--ca-file" in extractor.command
        # The Secret went in before the Job that mounts it.
        writes = [w for w in audit.since(SYSTEM_NAMESPACE) if "dryRun" not in w]
        assert writes.index(next(w for w in writes if "/secrets" in w)) < writes.index(
            next(w for w in writes if "/jobs" in w)), writes

        settled = distribute(sim, name, namespace, image.ref, wait=True, wait_timeout=120, **credentials)
        assert not settled.get("failed"), settled
        again = distribute(sim, name, namespace, image.ref, **credentials)
        assert again["changed"] is False and again["api_writes"] == 0, again["plan"]

        rotated_credentials = {key: "new" if key == "registry_password" else value
                               for key, value in credentials.items()}
        rotated = distribute(sim, name, namespace, image.ref, diff=True, **rotated_credentials)
        assert rotated["plan"]["summary"] == {"update": {"Secret": 1}}, rotated["plan"]
        secret_diff = next(d for d in rotated["diff"] if d["after"].get("kind") == "Secret")
        assert secret_diff["after"]["data"] == {"ca.crt": "<redacted>", "config.json": "<redacted, changed>"}

        anonymous = distribute(sim, name, namespace, image.ref)
        assert ("delete", "Secret") in {(a["action"], a["kind"]) for a in anonymous["plan"]["actions"]}
        assert secrets(kube, SYSTEM_NAMESPACE, name) == []

        distribute(sim, name, namespace, image.ref, **credentials)
        assert len(secrets(kube, SYSTEM_NAMESPACE, name)) == 1
    finally:
        remove(sim, name, namespace)
    assert secrets(kube, SYSTEM_NAMESPACE, name) == []
