"""The kernel overlay through the real API server (kwok nodes, the webhook server as a local process given its tools
image): a GKMCache of real Triton kernels (CacheSpec(compiled=True)) reconciled onto an AMD node records
status.kernelOverlay; a tenant's pod annotated gkm.io/cache, created through its ServiceAccount token in a namespace
enforcing Pod Security `restricted`, is stored with the emptyDir, the init container of the tools image and
TRITON_CACHE_DIR; annotated gkm.io/cache-overlay: disabled it keeps the plain mount; a pod mounting its own volume
where the overlay goes is refused naming it; a tenant's pod naming the serving PVC by claim gets the overlay for its
own mount, unless it sets TRITON_CACHE_DIR itself."""

import json
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.kernel_overlay import (
    ENTRY_POINT,
    OVERLAY_PATH,
)
from tests.helpers import kcache_images
from tests.helpers.modules import run_module
from tests.helpers.tenant import apply_tenant, tenant_kube
from tests.helpers.webhook import GPU_TOLERATION, CertificateFiles, LocalWebhookServer, install, wait_until
from tests.integration.webhook.test_steering_apiserver import GROUP, VERSION, reconcile

pytestmark = [pytest.mark.cluster, pytest.mark.registry, pytest.mark.tenant]

# The server is told this image; kwok's nodes pull nothing, so it need not exist.
TOOLS = "registry.local:5000/gkm/tools:overlay-test"
CACHE = "vector-add"
ANNOTATIONS = {"gkm.io/cache": CACHE, "gkm.io/cache-mount-path": "/kernels"}
# What Pod Security `restricted` asks of the tenant's own container; the init container brings its own.
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _ready(node):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions")
               or [])


@pytest.fixture(scope="module")
def setup(sim, kube, crds, registry, tmp_path_factory):
    """(namespace, the reconciled cache's status): one kwok AMD node, a namespace made a tenant's once the cache is
    extracted (its Jobs are the collection's, not the tenant's), the webhook registered."""
    admin, core = Kube(kube), client.CoreV1Api(kube)
    suffix = uuid.uuid4().hex[:5]
    [node] = gpu_nodes.render_nodes([{"name": "ko-%s-amd" % suffix, "count": 1, "vendor": "amd"}])
    name = node["metadata"]["name"]
    namespace = "t-overlay-%s" % suffix
    certs = CertificateFiles(str(tmp_path_factory.mktemp("overlay")))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file, extra_args=["--tools-image", TOOLS])
    hook = {"name": "ko-" + suffix, "namespace": "gkm-ko-" + suffix}
    try:
        admin.request("POST", "/api/v1/nodes", body=node)
        wait_until("the AMD node Ready", lambda: _ready(admin.get("Node", name)), timeout=120, interval=0.5)
        apply_tenant(admin, namespace, pod_security="baseline")
        image = kcache_images.build_image(registry.host, "overlay/vector-add", "v1",
                                          kcache_images.CacheSpec(backend="hip", compiled=True))
        crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": CACHE, "namespace": namespace},
            "spec": {"image": image.ref, "podTemplate": {"spec": {
                "tolerations": [GPU_TOLERATION],
                "nodeSelector": {"kubernetes.io/hostname": name}}}}})
        reconciled = reconcile(sim, CACHE, namespace, wait=True, wait_timeout=120)
        assert not reconciled.get("failed"), reconciled.get("msg")
        apply_tenant(admin, namespace, pod_security="restricted")
        server.start().wait_ready(certs.ca)
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], url=server.url, ca_bundle=certs.ca)
        yield namespace, reconciled
    finally:
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], state="absent")
        server.stop()
        run_module("cache_distribute", sim.kubeconfig, name=CACHE, namespace=namespace, state="absent", force=True)
        core.delete_namespace(namespace)
        admin.delete("Node", name)


def _pod(name, annotations, **container):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": annotations}, "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 4321, "seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": [GPU_TOLERATION],
        "containers": [dict({"name": "main", "image": "registry.k8s.io/pause:3.10", "securityContext": RESTRICTED},
                            **container)]}}


def _create(tenant, body):
    """The pod as the API server stored it, created by the tenant."""
    return tenant.kube.request("POST", "/api/v1/namespaces/%s/pods" % tenant.namespace, body=body)[1]


def test_the_reconcile_records_the_overlay_of_a_triton_image(setup):
    _namespace, reconciled = setup
    assert reconciled["resource"]["status"]["kernelOverlay"] == {"variable": "TRITON_CACHE_DIR"}
    assert reconciled["cache"]["kernel_overlay"] == {"variable": "TRITON_CACHE_DIR", "reason": None}


def test_a_tenant_s_annotated_pod_is_stored_with_the_overlay_and_passes_restricted(kube, setup):
    namespace, _reconciled = setup
    tenant = tenant_kube(kube, namespace)
    stored = _create(tenant, _pod("overlaid", dict(ANNOTATIONS)))["spec"]
    volumes = {v["name"]: v for v in stored["volumes"]}
    assert volumes["gkm-kernels-vector-add"]["emptyDir"] == {}
    assert volumes["gkm-cache-vector-add"]["persistentVolumeClaim"] == {"claimName": CACHE, "readOnly": True}
    init, use = stored["initContainers"]
    assert (init["name"], init["image"], init["imagePullPolicy"]) == ("gkm-kernels-vector-add", TOOLS, "IfNotPresent")
    # The kernel-use sidecar, stored as a native sidecar beside it, restricted like it, the overlay read-only.
    assert (use["name"], use["image"], use["restartPolicy"]) == ("gkm-kernel-use-vector-add", TOOLS, "Always")
    assert use["securityContext"] == init["securityContext"]
    assert {(m["name"], m["mountPath"], m.get("readOnly", False)) for m in use["volumeMounts"]
            if not m["name"].startswith("kube-api-access")} == {("gkm-kernels-vector-add", OVERLAY_PATH, True)}
    assert init["command"] == ["python3", "-m", ENTRY_POINT, "/kernels", OVERLAY_PATH,
                               "--termination-log", "/dev/termination-log"]
    assert {(m["name"], m["mountPath"], m.get("readOnly", False)) for m in init["volumeMounts"]
            if not m["name"].startswith("kube-api-access")} == {
        ("gkm-cache-vector-add", "/kernels", True), ("gkm-kernels-vector-add", OVERLAY_PATH, False)}
    [main] = stored["containers"]
    assert main["env"] == [{"name": "TRITON_CACHE_DIR", "value": OVERLAY_PATH}]
    assert [(m["name"], m["mountPath"]) for m in main["volumeMounts"]
            if not m["name"].startswith("kube-api-access")] == [
        ("gkm-cache-vector-add", "/kernels"), ("gkm-kernels-vector-add", OVERLAY_PATH)]


def test_a_pod_declining_the_overlay_keeps_the_plain_mount(kube, setup):
    namespace, _reconciled = setup
    tenant = tenant_kube(kube, namespace)
    stored = _create(tenant, _pod("plain", dict(ANNOTATIONS, **{"gkm.io/cache-overlay": "disabled"})))["spec"]
    assert [v["name"] for v in stored["volumes"] if not v["name"].startswith("kube-api-access")] == [
        "gkm-cache-vector-add"]
    assert "initContainers" not in stored and "env" not in stored["containers"][0]


def test_a_pod_using_the_overlay_s_directory_itself_is_refused_naming_it(kube, setup):
    namespace, _reconciled = setup
    body = _pod("taken", dict(ANNOTATIONS), volumeMounts=[{"name": "mine", "mountPath": OVERLAY_PATH}])
    body["spec"]["volumes"] = [{"name": "mine", "emptyDir": {}}]
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(tenant_kube(kube, namespace).api).create_namespaced_pod(namespace, body)
    message = json.loads(refused.value.body)["message"]
    assert "volume mine" in message and OVERLAY_PATH in message and "mount it elsewhere" in message, message


def test_a_tenant_s_pod_naming_the_serving_pvc_by_claim_gets_the_overlay_for_its_own_mount(kube, setup):
    namespace, _reconciled = setup
    tenant = tenant_kube(kube, namespace)

    def claimed(name, **container):
        body = _pod(name, {}, volumeMounts=[{"name": "mine", "mountPath": "/models", "readOnly": True}], **container)
        body["spec"]["volumes"] = [{"name": "mine", "persistentVolumeClaim": {"claimName": CACHE, "readOnly": True}}]
        return _create(tenant, body)["spec"]

    stored = claimed("by-claim")
    init, _use = stored["initContainers"]
    assert init["command"][3:5] == ["/models", OVERLAY_PATH]
    assert {"name": "mine", "mountPath": "/models", "readOnly": True} in init["volumeMounts"]
    [main] = stored["containers"]
    assert main["env"] == [{"name": "TRITON_CACHE_DIR", "value": OVERLAY_PATH}]
    # Its own variable is the pod author's choice: stored as written, no overlay.
    own = claimed("by-claim-own", env=[{"name": "TRITON_CACHE_DIR", "value": "/models/io.triton.cache"}])
    assert "initContainers" not in own and own["containers"][0]["env"] == [
        {"name": "TRITON_CACHE_DIR", "value": "/models/io.triton.cache"}]
