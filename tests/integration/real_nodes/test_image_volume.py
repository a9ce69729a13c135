"""ImageVolume on the real nodes (containerd 2.x, feature gate ImageVolume): a pod mounts a cache image by digest.

The kubelet asks containerd to pull the image and mount it read-only; the container reads a kernel file of it
and cannot write there. The file's hash is read from the registry, not by our code. The pod is a tenant's (`edit` in
a `baseline` namespace, through its ServiceAccount's token).
"""

import time
import uuid

import pytest
from kubernetes import client

from tests.helpers import kcache_images
from tests.helpers.real_nodes import GPU_TOLERATION, delete_namespace, layer_files, pod_logs
from tests.helpers.tenant import REAL_NODES_TOKEN_SECONDS, tenant_namespace

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]


def _finished_pod(core, namespace, name, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.status.phase in ("Succeeded", "Failed"):
            return pod
        time.sleep(0.5)
    raise AssertionError("pod %s not finished in %d s: %s" % (name, timeout, pod.status))


def test_a_pod_reads_a_kernel_file_from_an_image_volume_on_a_real_node(kube, registry, real_nodes, tools_image):
    image = kcache_images.build_image(registry.host, "real/image-volume-%s" % uuid.uuid4().hex[:6], "v1",
                                      kcache_images.CacheSpec(kernels=2, seed=23, compiled=True))
    expected = layer_files(registry.host, image.repository, image.digest)
    kernel = sorted(path for path in expected if path.endswith(".cubin"))[0]
    node = real_nodes[0]["name"]
    tenant = tenant_namespace(kube, "t-real-image-%s" % uuid.uuid4().hex[:6], "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace, core = tenant.namespace, tenant.core
    script = ("sha256sum /cache/%s && if touch /cache/written 2>/dev/null; then echo WRITABLE; else echo READ-ONLY; fi"
              % kernel)
    try:
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": "reader"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [GPU_TOLERATION],
                "restartPolicy": "Never", "automountServiceAccountToken": False,
                "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "runAsGroup": 4321},
                "containers": [{"name": "reader", "image": tools_image, "command": ["sh", "-c", script],
                                "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
                "volumes": [{"name": "cache", "image": {"reference": image.digest_ref,
                                                        "pullPolicy": "IfNotPresent"}}],
            }})
        pod = _finished_pod(core, namespace, "reader")
        logs = pod_logs(core, namespace, "reader")
    finally:
        delete_namespace(client.CoreV1Api(kube), namespace)
    assert pod.status.phase == "Succeeded", (pod.status, logs)
    assert logs.split() == [expected[kernel], "/cache/" + kernel, "READ-ONLY"], logs
    assert pod.spec.node_name == node
