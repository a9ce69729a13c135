"""Steering on the real nodes, through the webhook server (a local process) and the kubelets:
- a bare Pod that names a GKMCache's serving PVC, with no node of its own, is steered to the real AMD node (the NVIDIA
  node's GPU does not fit the hip image), runs there and reads the cache its node extracted;
- a bare Pod carrying only the annotations gkm.io/cache and gkm.io/cache-mount-path, for a GKMCache in imageVolume
  mode, gets the digest-pinned image volume and the GPU affinity, lands on the AMD node, whose containerd pulls the
  image from the local registry, and reads the kernel file from it; once the kubelet lists the image in the Node's
  status, a reconcile reports the AMD node as having pulled it and the still running pod as mounting it;
- a 2-replica Deployment naming a serving PVC whose cache moves to a new digest: its running pods keep reading the old
  files, a new pod naming the cache is rewritten to the alias serving PVC at the new digest and reads the new files,
  and once the Deployment is gone the serving PVC is renewed, the alias goes, and a new pod reads the new files.
The files' hashes are read from the registry, not by our code. The tenant (`edit` in each test's namespace, through
its ServiceAccount's token) creates the GKMCaches and the workloads; the admin runs the reconcile and reads the Node."""

import json
import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.real_nodes import (
    GPU_TOLERATION,
    ON_REAL_NODES,
    delete_namespace,
    layer_files,
    pod_logs,
    real_pod_template,
    running_pods,
)
from tests.helpers.tenant import REAL_NODES_TOKEN_SECONDS, tenant_namespace
from tests.helpers.webhook import CertificateFiles, LocalWebhookServer, install, wait_until
from tests.integration.webhook.test_steering_apiserver import GROUP, VERSION, reconcile

pytestmark = [pytest.mark.cluster, pytest.mark.real_nodes]

AMD_NODE = "gkm-real-amd-1"
MANIFEST = "io.triton.manifest/manifest.json"


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


def _cache(caches, registry, namespace, cache, seed, **spec):
    """A hip cache image pushed and its GKMCache created with spec: (a kernel file's name, its sha256 in the
    registry)."""
    cache_spec = kcache_images.CacheSpec(backend="hip", kernels=2, seed=seed)
    pushed = kcache_images.build_image(registry.host, "real-steer/" + cache, "v1", cache_spec)
    caches.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
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
    tenant = tenant_namespace(kube, "t-real-steer-%s" % uuid.uuid4().hex[:6], "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace, core, caches = tenant.namespace, tenant.core, tenant.caches
    cache = "vector-add"
    try:
        kernel, expected = _cache(caches, registry, namespace, cache, 21, podTemplate=real_pod_template())
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
        delete_namespace(client.CoreV1Api(kube), namespace)


def test_an_annotated_pod_gets_an_image_volume_cache_is_steered_to_the_amd_node_and_reads_the_pulled_image(
        sim, kube, crds, registry, real_nodes, tools_image, webhook):
    admin = client.CoreV1Api(kube)  # the Node, which a tenant cannot read, and the namespace
    tenant = tenant_namespace(kube, "t-real-imgvol-%s" % uuid.uuid4().hex[:6], "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace, core, caches = tenant.namespace, tenant.core, tenant.caches
    cache = "by-image"
    try:
        kernel, expected = _cache(caches, registry, namespace, cache, 22, mountMode="imageVolume")
        resolved = reconcile(sim, cache, namespace)
        assert not resolved.get("failed") and resolved["resource"]["status"]["phase"] == "Resolved", \
            resolved.get("msg")

        # It stays running once it printed the hash: the status counts running pods.
        body = _reader(tools_image, ["sh", "-c", "sha256sum /kernels/%s && exec sleep 300" % kernel])
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
        pod = wait_until("the reader pod printed the hash", lambda: _printed(core, namespace, "reader"), timeout=180,
                         interval=0.5)
        assert pod.spec.node_name == AMD_NODE
        assert pod_logs(core, namespace, "reader").split()[0] == expected
        print("pod created -> image pulled and kernel read on %s in %.1fs" % (AMD_NODE, time.monotonic() - started))

        # The kubelet lists the images it pulled in its Node's status (refreshed every 30 s): a reconcile then says the
        # AMD node pulled the image and the reader, still running, mounts it.
        started = time.monotonic()
        wait_until("the AMD node's status listing the image", lambda: volume.image.reference in {
            name for image in admin.read_node(AMD_NODE).status.images or [] for name in image.names or []},
            timeout=60, interval=1)
        print("image listed in the node's status %.1fs after the kernel was read" % (time.monotonic() - started))
        used = reconcile(sim, cache, namespace)
        assert not used.get("failed"), used.get("msg")
        status = used["resource"]["status"]
        assert (status["imageVolume"]["pulledNodes"], status["imageVolume"]["pulledNodeCnt"]) == ([AMD_NODE], 1)
        assert [(p["name"], p["node"], p["phase"]) for p in status["imageVolume"]["pods"]] == [
            ("reader", AMD_NODE, "Running")]
        assert (status["nodeInUseCnt"], status["podRunningCnt"], status["podOutdatedCnt"]) == (1, 1, 0)
    finally:
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        delete_namespace(admin, namespace)


def _printed(core, namespace, name):
    """The running pod once its log has a line (it must not have ended)."""
    pod = core.read_namespaced_pod(name, namespace)
    assert pod.status.phase in ("Pending", "Running"), pod.status
    return pod if pod.status.phase == "Running" and pod_logs(core, namespace, name).strip() else None


def _pushed(registry, cache, tag, seed):
    """A hip cache image pushed as real-steer/<cache>:<tag>: (its reference, the sha256 of its manifest file in the
    registry; the file's name is the same in every image, its content is not)."""
    pushed = kcache_images.build_image(registry.host, "real-steer/" + cache, tag,
                                       kcache_images.CacheSpec(backend="hip", kernels=2, seed=seed))
    return pushed.ref, layer_files(registry.host, "real-steer/" + cache, pushed.digest, {MANIFEST})[MANIFEST]


def _last_sum(core, namespace, name):
    """The hash a looping reader printed last (None before its first line)."""
    lines = [line for line in pod_logs(core, namespace, name).splitlines() if line.endswith("/kernels/" + MANIFEST)]
    return lines[-1].split()[0] if lines else None


def _replicas_reading(core, namespace):
    """Both replicas of the Deployment, once each runs and has printed a hash."""
    found = [pod for pod in running_pods(core, namespace, "app=kept-reader")
             if _last_sum(core, namespace, pod.metadata.name)]
    return found if len(found) == 2 else None


def _serving_digest(core, namespace, cache):
    """The digest label of the namespace's serving PVC, None while it is being replaced."""
    try:
        return core.read_namespaced_persistent_volume_claim(cache, namespace).metadata.labels["gkm.io/digest"]
    except ApiException as error:
        if error.status != 404:
            raise
        return None


def test_a_digest_change_under_a_deployment_keeps_its_files_and_new_pods_read_the_new_ones(
        sim, kube, crds, registry, real_nodes, tools_image, webhook):
    admin = client.CoreV1Api(kube)  # the Node, which a tenant cannot read, and the namespace
    tenant = tenant_namespace(kube, "t-real-kept-%s" % uuid.uuid4().hex[:6], "baseline", REAL_NODES_TOKEN_SECONDS)
    namespace, core, caches, apps = tenant.namespace, tenant.core, tenant.caches, client.AppsV1Api(tenant.api)
    cache = "kept"
    loop = ["sh", "-c", "while true; do sha256sum /kernels/%s; sleep 1; done" % MANIFEST]
    try:
        old_ref, old_sum = _pushed(registry, cache, "v1", 23)
        new_ref, new_sum = _pushed(registry, cache, "v2", 24)
        caches.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": cache, "namespace": namespace},
            "spec": {"image": old_ref, "podTemplate": real_pod_template()}})
        first = reconcile(sim, cache, namespace, extract_image=tools_image, wait=True, wait_timeout=240)
        assert not first.get("failed"), first.get("msg")

        # Only "a real node" and the claim: steering keeps both replicas to the node holding the hip cache.
        template = _reader(tools_image, loop, persistentVolumeClaim={"claimName": cache})
        template["metadata"] = {"labels": {"app": "kept-reader"}}
        template["spec"]["restartPolicy"] = "Always"
        apps.create_namespaced_deployment(namespace, {"metadata": {"name": "kept-reader"}, "spec": {
            "replicas": 2, "selector": {"matchLabels": {"app": "kept-reader"}}, "template": template}})
        pods = wait_until("both replicas reading", lambda: _replicas_reading(core, namespace), timeout=120)
        assert {p.spec.node_name for p in pods} == {AMD_NODE}
        assert {_last_sum(core, namespace, p.metadata.name) for p in pods} == {old_sum}

        started = time.monotonic()
        caches.patch_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", cache,
                                              {"spec": {"image": new_ref}})
        moved = reconcile(sim, cache, namespace, extract_image=tools_image, wait=True, wait_timeout=240)
        assert not moved.get("failed"), moved.get("msg")
        new_short = moved["resource"]["status"]["resolvedDigest"].split(":")[1][:12]
        node = admin.read_node(AMD_NODE)
        assert node.metadata.labels["cache.gkm.io/%s.%s" % (namespace, cache)] == new_short
        old_short = _serving_digest(core, namespace, cache)
        assert old_short != new_short  # the serving PVC is kept at the old digest while the replicas mount it
        assert moved["resource"]["status"]["podOutdatedCnt"] == 2

        # The running replicas keep printing the old file, a few seconds after the move.
        time.sleep(2)
        assert {p.metadata.name for p in running_pods(core, namespace, "app=kept-reader")} == {
            p.metadata.name for p in pods}
        assert {_last_sum(core, namespace, p.metadata.name) for p in pods} == {old_sum}

        # Every node has the new digest: the run added the alias serving PVC at it. A new pod naming the cache is
        # rewritten to the alias and steered by the readiness label at the new digest: it reads the new file while
        # the replicas go on reading the old one.
        alias = "%s-%s" % (cache, new_short)
        assert _serving_digest(core, namespace, alias) == new_short
        created = wait_until("the new reader admitted", lambda: _admitted(core, namespace, _reader(
            tools_image, ["sha256sum", "/kernels/" + MANIFEST], persistentVolumeClaim={"claimName": cache})),
            timeout=30, interval=0.5)
        assert [v.persistent_volume_claim.claim_name for v in created.spec.volumes if v.persistent_volume_claim] \
            == [alias]
        for term in created.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution \
                .node_selector_terms:
            placement = [(e.key, e.values) for e in term.match_expressions if e.key.startswith(("cache.gkm.io/",
                                                                                                "kubernetes.io/"))]
            assert placement == [("cache.gkm.io/%s.%s" % (namespace, cache), [new_short])], term
        pod = wait_until("the reader pod finished", lambda: _finished(core, namespace, "reader"), timeout=120,
                         interval=0.5)
        assert pod.spec.node_name == AMD_NODE and pod.status.phase == "Succeeded", pod.status
        assert pod_logs(core, namespace, "reader").split()[0] == new_sum
        assert {_last_sum(core, namespace, p.metadata.name) for p in pods} == {old_sum}
        print("digest change to a new pod reading the new files beside replicas on the old: %.1fs"
              % (time.monotonic() - started))

        # The Deployment gone, the serving PVC is renewed and the unused alias goes: a new pod reads the new file.
        apps.delete_namespaced_deployment("kept-reader", namespace)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_until("the readers gone", lambda: not core.list_namespaced_pod(namespace).items, timeout=60)
        renewed = reconcile(sim, cache, namespace, extract_image=tools_image, wait=True, wait_timeout=240)
        assert not renewed.get("failed"), renewed.get("msg")
        wait_until("the serving PVC renewed at the new digest", lambda: _serving_digest(
            core, namespace, cache) == new_short, timeout=30)
        assert _serving_digest(core, namespace, alias) is None
        wait_until("the new reader admitted", lambda: _admitted(core, namespace, _reader(
            tools_image, ["sha256sum", "/kernels/" + MANIFEST], persistentVolumeClaim={"claimName": cache})),
            timeout=30, interval=0.5)
        pod = wait_until("the reader pod finished", lambda: _finished(core, namespace, "reader"), timeout=120,
                         interval=0.5)
        assert pod.spec.node_name == AMD_NODE and pod.status.phase == "Succeeded", pod.status
        assert pod_logs(core, namespace, "reader").split()[0] == new_sum
    finally:
        apps.delete_collection_namespaced_deployment(namespace)
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        wait_until("the readers gone", lambda: not core.list_namespaced_pod(namespace).items, timeout=60)
        removed = run_module("cache_distribute", sim.kubeconfig, name=cache, namespace=namespace, state="absent",
                             force=True, extract_image=tools_image, registry_plain_http=True,
                             host_path_root=NODE_DISK, pod_template=real_pod_template(), wait=True)
        assert not removed.get("failed"), removed.get("msg")
        delete_namespace(admin, namespace)


def _admitted(core, namespace, body):
    """The created pod, or None while the server's view has not seen the latest PVC marks and labels yet."""
    try:
        return core.create_namespaced_pod(namespace, body)
    except ApiException as error:
        assert "no node holds it extracted" in json.loads(error.body)["message"], error.body
        return None
