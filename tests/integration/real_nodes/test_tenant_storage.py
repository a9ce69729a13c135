"""Issue 31, class 1, as a tenant on a real node: a cache nobody but root can write, and root only past the webhook.

The tenant (ServiceAccount `tenant` with `edit`, through its TokenRequest token) runs pods in its namespace at Pod
Security `baseline` on the real AMD node, where its cache was extracted by a Job in the system namespace
(`system_namespace_jobs`). The published tree is root's with no write bit, and so is the slot directory (the
kubelet's), so a pod running as uid 1000 (the extraction uid before, allowed by `restricted`) mounting the serving
PVC and the node's slot PVC writable changes nothing and plants no link that the next pod of the serving PVC would
follow; a root pod mounting them read-only, as the webhook makes every pod's volume of a cache
(`webhook/admission/steering.py`), changes nothing either. A sentinel directory the test makes next to the node's
cache root stands in for the rest of the host; no link ever points at a real host path.

Before (main 5aaecb8): the slot directory and the tree were uid 1000's, so the uid 1000 pod created and changed
files of the cache through the serving PVC and replaced the slot's `cache` by a link to the sentinel, and the next
pod of the serving PVC listed the sentinel's file. Left open (docs/security.md, class 1): root mounting either claim
writable in a pod the webhook does not see.
"""

import os
import shutil
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import AMD_NODE, BASELINE, GPU_TOLERATION, pod_logs, real_pod_template
from tests.helpers.webhook import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes, pytest.mark.tenant]

SYSTEM_NAMESPACE = "gkm-system"
# What the tenant's pods try, each reported as done or refused: write through the serving PVC, then replace
# the slot's published directory by a link to the sentinel, which the kubelet would follow for the next pod.
ATTEMPTS = (
    ("create", "echo x > /serving/planted"),
    ("change", "echo x >> /serving/.gkm-cache.json"),
    ("delete", "rm /serving/.gkm-cache.json"),
    ("move", "mv /slot/cache /slot/moved"),
    ("link", "ln -s %(sentinel)s /slot/cache"),
)


def _pod(name, image, volumes, script, read_only, uid=0):
    """A pod of the tenant as `uid` (root: baseline allows it) on the AMD node, mounting each (volume, claim)."""
    return {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": AMD_NODE},
        "tolerations": [GPU_TOLERATION], "securityContext": {"runAsUser": uid, "runAsGroup": uid},
        "containers": [{"name": "main", "image": image, "command": ["sh", "-c", script],
                        "volumeMounts": [{"name": volume, "mountPath": "/" + volume} for volume, _claim in volumes]}],
        "volumes": [{"name": volume, "persistentVolumeClaim": dict(
            {"claimName": claim}, **({"readOnly": True} if read_only else {}))} for volume, claim in volumes]}}


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


def test_no_tenant_pod_the_webhook_admits_writes_a_cache_nor_redirects_its_serving_pvc(
        sim, kube, registry, tools_image, real_nodes, tenant, sentinel):
    client.CoreV1Api(kube).patch_namespace(tenant.namespace, {"metadata": {"labels": BASELINE}})
    core = client.CoreV1Api(tenant.api)
    pushed = kcache_images.build_image(registry.host, "real/tenant-storage", "v1",
                                       kcache_images.CacheSpec(backend="hip", kernels=2, seed=41, compiled=True))
    name = "ro-%s" % uuid.uuid4().hex[:5]
    args = dict(name=name, namespace=tenant.namespace, image=pushed.ref, registry_plain_http=True,
                extract_image=tools_image, host_path_root=NODE_DISK, pod_template=real_pod_template(), wait=True,
                wait_timeout=120, node_details=True, system_namespace_jobs=True)
    try:
        result = run_module("cache_distribute", sim.kubeconfig, **args)
        assert not result.get("failed"), result.get("msg")
        slot_pvc = next(e["pvc"] for e in result["status"]["entries"] if e["node"] == AMD_NODE)
        # Published read-only: root's, no write bit anywhere in the tree nor on the slot directory, the node's store
        # (the extractor ran as root without capabilities, in the directory the kubelet made).
        slot = os.path.join(NODE_DISK, tenant.namespace, name, "_store", pushed.digest.split(":")[1])
        info = os.lstat(slot)
        assert (info.st_uid, info.st_mode & 0o022) == (0, 0), (slot, info.st_uid, oct(info.st_mode))
        for directory, _subdirectories, files in os.walk(os.path.join(slot, "cache")):
            for path in [directory] + [os.path.join(directory, file) for file in files]:
                info = os.lstat(path)
                assert (info.st_uid, info.st_mode & 0o7222) == (0, 0), (path, info.st_uid, oct(info.st_mode))
        volumes = [("serving", name), ("slot", slot_pvc)]

        # uid 1000 mounting both writable, and root mounting both read-only as the webhook leaves every pod's
        # volume of a cache: each tries to change the cache and to plant the link.
        script = "; ".join("if %s 2>/dev/null; then echo done %s; else echo refused %s; fi" % (
            command % {"sentinel": sentinel}, what, what) for what, command in ATTEMPTS)
        for writer, read_only, uid in (("writer-uid1000", False, 1000), ("writer-root", True, 0)):
            core.create_namespaced_pod(tenant.namespace, _pod(writer, tools_image, volumes, script,
                                                              read_only=read_only, uid=uid))
            log = _finished_log(core, tenant.namespace, writer)
            verdicts = sorted(line for line in log.splitlines() if line.startswith(("done ", "refused ")))
            print("%s: %s" % (writer, ", ".join(verdicts)))
            assert verdicts == sorted("refused %s" % what for what, _command in ATTEMPTS), log

        # The next pod of the serving PVC on that node reads the cache, not the sentinel.
        core.create_namespaced_pod(tenant.namespace, _pod("reader", tools_image, volumes[:1], "ls -A /serving",
                                                          read_only=True))
        listed = _finished_log(core, tenant.namespace, "reader").split()
        assert "sentinel-file" not in listed and ".gkm-cache.json" in listed, listed
        print("the next pod of the serving PVC lists: %s" % " ".join(listed))
    finally:
        core.delete_collection_namespaced_pod(tenant.namespace, grace_period_seconds=0)
        wait_until("the tenant's pods gone", lambda: not core.list_namespaced_pod(tenant.namespace).items,
                   timeout=60)
        removed = run_module("cache_distribute", sim.kubeconfig, **dict(args, state="absent", force=True))
        assert not removed.get("failed"), removed.get("msg")
    assert os.listdir(sentinel) == ["sentinel-file"]
