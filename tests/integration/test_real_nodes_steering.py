"""Steering on the real nodes, through the webhook server (a local process) and the kubelets:
- a bare Pod that names a GKMCache's serving PVC, with no node of its own, is steered to the real AMD node (the NVIDIA
  node's GPU does not fit the hip image), runs there and reads the cache its node extracted;
- a bare Pod carrying only the annotations gkm.io/cache and gkm.io/cache-mount-path, for a GKMCache in imageVolume
  mode, gets the digest-pinned image volume and the GPU affinity, lands on the AMD node, whose containerd pulls the
  image from the local registry, and reads the kernel file from it.
The files' hashes are read from the registry, not by our code."""

import json
import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import (
    BASELINE,
    GPU_TOLERATION,
    ON_REAL_NODES,
    delete_namespace,
    labelled_namespace,
    layer_files,
    pod_logs,
    real_pod_template,
)
from tests.helpers.webhook import CertificateFiles, LocalWebhookServer, install, wait_until
from tests.integration.test_steering_apiserver import GROUP, VERSION, reconcile

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

AMD_NODE = "gkm-real-amd-1"


def _finished(core, namespace, name):
    pod = core.read_namespaced_pod(name, namespace)
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


@pytest.fixture(scope="module")
def webhook(sim, tmp_path_factory):
    """The webhook server as a local process, registered for the module's tests."""
    suffix = uuid.uuid4().hex[:6]
    certs = CertificateFiles(str(tmp_path_factory.mktemp("real-steering")))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file)
    hook = {"name": "rs-" + suffix, "namespace": "gkm-rs-" + suffix}
    try:
        server.start().wait_ready(certs.ca)
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], url=server.url, ca_bundle=certs.ca)
        yield
    finally:
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], state="absent")
        server.stop()


def _reader(tools_image, command, **volume_source):
    """A bare Pod whose only placement is "a real node", running command as a non-root user."""
    body = {"metadata": {"name": "reader"}, "spec": {
        "restartPolicy": "Never", "tolerations": [GPU_TOLERATION], "affinity": ON_REAL_NODES,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "runAsGroup": 4321,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "app", "image": tools_image, "command": command,
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
    if volume_source:
        body["spec"]["containers"][0]["volumeMounts"] = [{"name": "kernels", "mountPath": "/kernels",
                                                          "readOnly": True}]
        body["spec"]["volumes"] = [dict(name="kernels", **volume_source)]
    return body


def _cache(crds, registry, namespace, cache, seed, **spec):
    """A hip cache image pushed and its GKMCache created with spec: (a kernel file's name, its sha256 in the
    registry)."""
    cache_spec = kcache_images.CacheSpec(backend="hip", kernels=2, seed=seed)
    pushed = kcache_images.build_image(registry.host, "real-steer/" + cache, "v1", cache_spec)
    crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
        "metadata": {"name": cache, "namespace": namespace}, "spec": dict(spec, image=pushed.ref)})
    kernel = next(e.name for e in kcache_images.cache_entries(cache_spec)[0] if e.name.endswith(".llir"))
    return kernel, layer_files(registry.host, "real-steer/" + cache, pushed.digest, {kernel})[kernel]


def _read_on_the_amd_node(core, namespace, expected, started, what):
    """The reader pod ran on the AMD node and printed the registry's hash of the kernel file first."""
    pod = wait_until("the reader pod finished", lambda: _finished(core, namespace, "reader"), timeout=180,
                     interval=0.5)
    assert pod.spec.node_name == AMD_NODE
    assert pod.status.phase == "Succeeded", pod.status
    assert pod_logs(core, namespace, "reader").split()[0] == expected
    print("pod created -> %s on %s in %.1fs" % (what, AMD_NODE, time.monotonic() - started))


def test_a_bare_pod_naming_the_serving_pvc_is_steered_to_the_amd_node_and_reads_its_cache(
        sim, kube, crds, registry, real_nodes, tools_image, webhook):
    core = client.CoreV1Api(kube)
    namespace = labelled_namespace(core, "t-real-steer-%s" % uuid.uuid4().hex[:6], BASELINE)
    cache = "vector-add"
    try:
        kernel, expected = _cache(crds, registry, namespace, cache, 21, podTemplate=real_pod_template())
        reconciled = reconcile(sim, cache, namespace, extract_image=tools_image, wait=True, wait_timeout=240)
        assert not reconciled.get("failed"), reconciled.get("msg")

        started = time.monotonic()
        # Only its own placement (any real node) and the cache's PVC: steering narrows it to the AMD node.
        core.create_namespaced_pod(namespace, _reader(tools_image, ["sha256sum", "/kernels/" + kernel],
                                                      persistentVolumeClaim={"claimName": cache}))
        _read_on_the_amd_node(core, namespace, expected, started, "kernel read")
    finally:
        core.delete_collection_namespaced_pod(namespace)
        # The scrub Jobs remove the node's copy: they run the tools image on the real nodes.
        removed = run_module("cache_distribute", sim.kubeconfig, name=cache, namespace=namespace, state="absent",
                             force=True, extract_image=tools_image, registry_plain_http=True,
                             host_path_root=NODE_DISK, pod_template=real_pod_template(), wait=True)
        assert not removed.get("failed"), removed.get("msg")
        delete_namespace(core, namespace)


def test_an_annotated_pod_gets_an_image_volume_cache_is_steered_to_the_amd_node_and_reads_the_pulled_image(
        sim, kube, crds, registry, real_nodes, tools_image, webhook):
    core = client.CoreV1Api(kube)
    namespace = labelled_namespace(core, "t-real-imgvol-%s" % uuid.uuid4().hex[:6], BASELINE)
    cache = "by-image"
    try:
        kernel, expected = _cache(crds, registry, namespace, cache, 22, mountMode="imageVolume")
        resolved = reconcile(sim, cache, namespace)
        assert not resolved.get("failed") and resolved["resource"]["status"]["phase"] == "Resolved", \
            resolved.get("msg")

        body = _reader(tools_image, ["sha256sum", "/kernels/" + kernel])
        body["metadata"]["annotations"] = {"gkm.io/cache": cache, "gkm.io/cache-mount-path": "/kernels"}

        def created():
            try:
                return core.create_namespaced_pod(namespace, body)
            except ApiException as error:  # the server's view may not hold the resolved digest yet
                assert "has no resolved image digest yet" in json.loads(error.body)["message"], error.body
                return None

        started = time.monotonic()
        admitted = wait_until("the reader pod admitted with its image volume", created, timeout=30, interval=0.5)
        [volume] = [v for v in admitted.spec.volumes if v.image is not None]
        assert volume.image.reference.endswith("/real-steer/%s@%s" % (cache, resolved["resource"]["status"][
            "resolvedDigest"]))
        _read_on_the_amd_node(core, namespace, expected, started, "image pulled and kernel read")
    finally:
        core.delete_collection_namespaced_pod(namespace)
        delete_namespace(core, namespace)
