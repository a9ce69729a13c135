"""Issue 31, class 1, as a tenant on a real node: a cache nobody but the node can write.

The tenant (ServiceAccount `tenant` with `edit`, through its TokenRequest token) runs pods as root in its namespace at
Pod Security `baseline` on the real AMD node, where its cache was extracted by a Job in the system namespace
(`system_namespace_jobs`). The webhook's ValidatingAdmissionPolicy (webhook/install/objects.py, applied here as
webhook_install applies it, with no webhook server at all: it holds without one) refuses a writable mount of the
serving PVC or of the node's slot PVC; read-only, root writes nothing and plants no link that the next pod of the
serving PVC would follow. A sentinel directory the test makes next to the node's cache root stands in for the rest of
the host; no link ever points at a real host path.

Before (main e02e868, no policy; reproduced with GKM_ISSUE31_BEFORE=1, which leaves the policy out): both writable
pods admitted; the root pod created and changed files of the cache through the serving PVC and replaced the slot's
`cache` by a link to the sentinel; the next pod of the serving PVC listed the sentinel's file. After: both refused
at admission naming the volume and the field; read-only, every write and the link fail with EROFS.
"""

import json
import os
import shutil
import uuid

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install import objects
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import AMD_NODE, BASELINE, GPU_TOLERATION, pod_logs, real_pod_template
from tests.helpers.webhook import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes, pytest.mark.tenant]

SYSTEM_NAMESPACE = "gkm-system"
BEFORE = os.environ.get("GKM_ISSUE31_BEFORE") == "1"
# What the tenant's root pod tries, each reported as done or refused: write through the serving PVC, then replace
# the slot's published directory by a link to the sentinel, which the kubelet would follow for the next pod.
ATTEMPTS = (
    ("create", "echo x > /serving/planted"),
    ("change", "echo x >> /serving/.gkm-cache.json"),
    ("delete", "rm /serving/.gkm-cache.json"),
    ("move", "mv /slot/cache /slot/moved"),
    ("link", "ln -s %(sentinel)s /slot/cache"),
)


def _pod(name, image, volumes, script, read_only):
    """A pod of the tenant running as root (baseline allows it) on the AMD node, mounting each (volume, claim)."""
    return {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": AMD_NODE},
        "tolerations": [GPU_TOLERATION], "securityContext": {"runAsUser": 0, "runAsGroup": 0},
        "containers": [{"name": "main", "image": image, "command": ["sh", "-c", script],
                        "volumeMounts": [{"name": volume, "mountPath": "/" + volume} for volume, _claim in volumes]}],
        "volumes": [{"name": volume, "persistentVolumeClaim": dict(
            {"claimName": claim}, **({"readOnly": True} if read_only else {}))} for volume, claim in volumes]}}


def _refusal(core, namespace, pod):
    """The API server's answer to the tenant's pod (a dry run): None when admitted, else the refusal's message."""
    try:
        core.create_namespaced_pod(namespace, pod, dry_run="All")
    except ApiException as error:
        assert error.status == 403, error.body
        return error.body
    return None


def _finished_log(core, namespace, name):
    def done():
        phase = core.read_namespaced_pod(name, namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    wait_until("pod %s finished" % name, done, timeout=60)
    return pod_logs(core, namespace, name)


@pytest.fixture
def sentinel():
    """A directory standing in for the host outside the cache root, with one file the tests look for."""
    path = os.path.join(os.path.dirname(NODE_DISK), "gkm-sentinel-%s" % uuid.uuid4().hex[:6])
    os.makedirs(path)
    with open(os.path.join(path, "sentinel-file"), "w") as handle:
        handle.write("host\n")
    yield path
    shutil.rmtree(path)


def test_root_in_a_baseline_namespace_cannot_write_a_cache_nor_redirect_its_serving_pvc(
        sim, kube, registry, tools_image, real_nodes, tenant, sentinel):
    admin = Kube(kube)
    client.CoreV1Api(kube).patch_namespace(tenant.namespace, {"metadata": {"labels": BASELINE}})
    core = client.CoreV1Api(tenant.api)
    pushed = kcache_images.build_image(registry.host, "real/tenant-storage", "v1",
                                       kcache_images.CacheSpec(backend="hip", kernels=2, seed=41, compiled=True))
    name = "ro-%s" % uuid.uuid4().hex[:5]
    settings = objects.Settings(name="t31-%s" % uuid.uuid4().hex[:5], namespace=SYSTEM_NAMESPACE)
    policy = [objects.read_only_policy(settings), objects.read_only_policy_binding(settings)]
    args = dict(name=name, namespace=tenant.namespace, image=pushed.ref, registry_plain_http=True,
                extract_image=tools_image, host_path_root=NODE_DISK, pod_template=real_pod_template(), wait=True,
                wait_timeout=120, node_details=True, system_namespace_jobs=True)
    try:
        result = run_module("cache_distribute", sim.kubeconfig, **args)
        assert not result.get("failed"), result.get("msg")
        slot_pvc = next(e["pvc"] for e in result["status"]["entries"] if e["node"] == AMD_NODE)
        # Published read-only: root's, no write bit anywhere in the tree (the extractor ran as root without
        # capabilities).
        published = os.path.join(NODE_DISK, tenant.namespace, name, tenant.namespace, pushed.digest.split(":")[1],
                                 "cache")
        for directory, _subdirectories, files in os.walk(published):
            for path in [directory] + [os.path.join(directory, file) for file in files]:
                info = os.lstat(path)
                assert (info.st_uid, info.st_mode & 0o7222) == (0, 0), (path, info.st_uid, oct(info.st_mode))
        volumes = [("serving", name), ("slot", slot_pvc)]
        if not BEFORE:
            for obj in policy:
                admin.apply(obj)

        # A writable mount of either claim is refused at admission, naming the volume and the field; the PVCs'
        # labels (edit may change them) play no part, the PVs (which the tenant cannot change) decide.
        for volume, claim in volumes:
            labels = core.read_namespaced_persistent_volume_claim(claim, tenant.namespace).metadata.labels
            core.patch_namespaced_persistent_volume_claim(claim, tenant.namespace, {"metadata": {"labels": {
                key: None for key in labels}}})
            writable = _pod("w-" + volume, tools_image, [(volume, claim)], "true", read_only=False)
            if BEFORE:
                assert _refusal(core, tenant.namespace, writable) is None
            else:
                refusal = wait_until("the policy refusing a writable %s" % volume,
                                     lambda pod=writable: _refusal(core, tenant.namespace, pod), timeout=30)
                assert "volume %s mounts PersistentVolumeClaim %s" % (volume, claim) in refusal, refusal
                assert "persistentVolumeClaim.readOnly: true" in refusal, refusal
                assert objects.read_only_policy_name(settings) in refusal, refusal
                print(json.loads(refusal)["message"])
            core.patch_namespaced_persistent_volume_claim(claim, tenant.namespace, {"metadata": {"labels": labels}})
        serving_pv = admin.list("PersistentVolume", label_selector="gkm.io/cache=%s,gkm.io/serving=true" % name)[0]
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(tenant.api).patch_persistent_volume(serving_pv["metadata"]["name"], {
                "metadata": {"labels": {"gkm.io/read-only-claim": None}}})
        assert refused.value.status == 403

        # Read-only (or, before, writable): root tries to change the cache and to plant the link.
        script = "; ".join("if %s 2>/dev/null; then echo done %s; else echo refused %s; fi" % (
            command % {"sentinel": sentinel}, what, what) for what, command in ATTEMPTS)
        core.create_namespaced_pod(tenant.namespace, _pod("writer", tools_image, volumes, script, read_only=not BEFORE))
        log = _finished_log(core, tenant.namespace, "writer")
        verdicts = sorted(line for line in log.splitlines() if line.startswith(("done ", "refused ")))
        print(", ".join(verdicts))
        expected = "done" if BEFORE else "refused"
        assert verdicts == sorted("%s %s" % (expected, what) for what, _command in ATTEMPTS), log

        # The next pod of the serving PVC on that node reads the cache, not the sentinel.
        core.create_namespaced_pod(tenant.namespace, _pod("reader", tools_image, volumes[:1], "ls -A /serving",
                                                          read_only=True))
        listed = _finished_log(core, tenant.namespace, "reader").split()
        assert ("sentinel-file" in listed) is BEFORE, listed
        assert (".gkm-cache.json" in listed) is not BEFORE, listed
        print("the next pod of the serving PVC lists: %s" % " ".join(listed))
    finally:
        core.delete_collection_namespaced_pod(tenant.namespace, grace_period_seconds=0)
        wait_until("the tenant's pods gone", lambda: not core.list_namespaced_pod(tenant.namespace).items,
                   timeout=60)
        for obj in reversed(policy):
            admin.delete(obj["kind"], obj["metadata"]["name"])
        removed = run_module("cache_distribute", sim.kubeconfig, **dict(args, state="absent", force=True))
        assert not removed.get("failed"), removed.get("msg")
    assert os.listdir(sentinel) == ["sentinel-file"]
