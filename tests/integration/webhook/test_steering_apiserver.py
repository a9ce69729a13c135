"""Steering through the real API server and scheduler (kwok nodes): one reconciled GKMCache over a mixed set of AMD,
NVIDIA and CPU nodes, the webhook server as a local process registered by webhook_install.

amd-1 and amd-2 hold the cache (readiness labels written by the reconcile), amd-3 is left out of the cache's
placement (never extracted), nvidia-1 and cpu-1 are selected but cannot take it. A Deployment's pods land on amd-1 or
amd-2 only; a pod's own affinity is merged; a pod that fits nowhere, or names a cache never reconciled, is denied
with the reason and the fix; the opt-out annotation keeps a placement; the annotation mounts the serving PVC, or
the image itself for an imageVolume cache; a DaemonSet over the five nodes runs on the two ready ones, and its other
pods wait Pending; so does one labelled gkm.io/pvc-mutation over those and ten more nodes, at once on the two whose
PVCs it gets. Workloads are not changed unless annotated gkm.io/cache-steering: template: such a DaemonSet's
template is steered, so it counts only the two ready nodes, and re-applying it changes nothing. An imageVolume cache's
status counts and lists the pods mounting its image (one on an older digest: outdated) and the node whose status says
it pulled it; the caches role's caches_mount_mode makes a cache without spec.mountMode imageVolume.
"""

import base64
import json
import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import APPLY_CONTENT_TYPE, Kube
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from tests.helpers import kcache_images
from tests.helpers.modules import NODE_DISK, run_module
from tests.helpers.roles import run_playbook
from tests.helpers.webhook import GPU_TOLERATION, CertificateFiles, LocalWebhookServer, install, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.registry]

GROUP, VERSION = "gkm.io", "v1alpha1"
PAUSE = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
HOSTNAME = "kubernetes.io/hostname"
TEST_LABEL = "gkm.io/steering-test"


class Setup:
    def __init__(self, suffix, namespace, cache, image):
        self.suffix = suffix
        self.namespace = namespace
        self.cache = cache
        self.image = image
        digest = image.digest
        self.short_digest = digest.split(":")[1][:12]
        self.ready_key = "cache.gkm.io/%s.%s" % (namespace, cache)

    def node(self, name):
        return "st-%s-%s" % (self.suffix, name)


def _ready(node):
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions")
               or [])


def _pinned_to(names):
    # One term per node: a matchFields In on metadata.name takes one value.
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]} for name in names]}}}


@pytest.fixture(scope="module")
def setup(sim, kube, crds, registry, tmp_path_factory):
    raw, core = Kube(kube), client.CoreV1Api(kube)
    suffix = uuid.uuid4().hex[:5]
    labels = {TEST_LABEL: suffix}
    nodes = gpu_nodes.render_nodes([
        {"name": "st-%s-amd" % suffix, "count": 3, "vendor": "amd", "labels": labels},
        {"name": "st-%s-nvidia" % suffix, "count": 1, "vendor": "nvidia", "labels": labels},
        {"name": "st-%s-cpu" % suffix, "count": 1, "vendor": "none", "labels": labels},
    ])
    names = [node["metadata"]["name"] for node in nodes]
    namespace, cache = "t-steering-%s" % suffix, "vector-add"
    certs = CertificateFiles(str(tmp_path_factory.mktemp("steering")))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file)
    hook = {"name": "st-" + suffix, "namespace": "gkm-st-" + suffix}
    try:
        for node in nodes:
            raw.request("POST", "/api/v1/nodes", body=node)
        wait_until("the steering test's nodes Ready", lambda: all(_ready(raw.get("Node", n)) for n in names),
                   timeout=120, interval=0.5)
        core.create_namespace({"metadata": {"name": namespace, "labels": {"gkm.io/test": "true"}}})
        image = kcache_images.build_image(registry.host, "steering/vector-add", "v1",
                                          kcache_images.CacheSpec(backend="hip"))
        selected = [n for n in names if not n.endswith("amd-3")]
        template = {"spec": {"tolerations": [GPU_TOLERATION], "affinity": _pinned_to(selected)}}
        crds.create_namespaced_custom_object(GROUP, VERSION, namespace, "gkmcaches", {
            "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
            "metadata": {"name": cache, "namespace": namespace},
            "spec": {"image": image.ref, "podTemplate": template}})
        reconciled = reconcile(sim, cache, namespace, wait=True, wait_timeout=120)
        assert not reconciled.get("failed"), reconciled.get("msg")
        server.start().wait_ready(certs.ca)
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], url=server.url, ca_bundle=certs.ca)
        yield Setup(suffix, namespace, cache, image)
    finally:
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], state="absent")
        server.stop()
        run_module("cache_distribute", sim.kubeconfig, name=cache, namespace=namespace, state="absent", force=True)
        core.delete_namespace(namespace)
        for name in names:
            raw.delete("Node", name)
        # Gone before the next module runs: a playbook reconciles every cache in the cluster, and this
        # namespace's unresolvable one ("later") would fail it while the namespace is still terminating.
        wait_until("namespace %s deleted" % namespace, lambda: namespace not in {
            item.metadata.name for item in core.list_namespace().items}, timeout=120, interval=0.5)


def reconcile(sim, name, namespace, **args):
    args.setdefault("extract_image", "gkm-cluster-tools:test")
    return run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=name, namespace=namespace,
                      registry_plain_http=True, host_path_root=NODE_DISK, **args)


def pod(name, claim=None, annotations=None, **spec):
    body = {"metadata": {"name": name, "annotations": annotations or {}},
            "spec": dict({"containers": [PAUSE], "tolerations": [GPU_TOLERATION]}, **spec)}
    if claim:
        body["spec"]["volumes"] = [{"name": "kernels", "persistentVolumeClaim": {"claimName": claim}}]
    return body


def terms_of(spec):
    return spec["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]


def scheduled(core, namespace, selector, count=1):
    # count: a ReplicaSet creates its pods in batches, so the first ones can be scheduled before the last exist.
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return pods if len(pods) >= count and all(p.spec.node_name for p in pods) else None


def running(core, namespace, selector, count):
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return pods if len(pods) == count and all(p.status.phase == "Running" for p in pods) else None


def denial(core, namespace, body, timeout=30):
    """The API server's message refusing body (a server-side dry run; retried while the server's view catches up)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            core.create_namespaced_pod(namespace, body, dry_run="All")
        except ApiException as error:
            return json.loads(error.body)["message"]
        assert time.monotonic() < deadline, "pod %s was admitted" % body["metadata"]["name"]
        time.sleep(0.2)


def test_a_deployments_pods_land_only_on_ready_compatible_nodes(kube, setup):
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    labels = {"app": "users"}
    template = pod("ignored", claim=setup.cache)
    template["metadata"] = {"labels": labels}
    apps.create_namespaced_deployment(setup.namespace, {"metadata": {"name": "users"}, "spec": {
        "replicas": 4, "selector": {"matchLabels": labels}, "template": template}})
    # The Deployment stays as written (re-applying it changes nothing); its pods are steered.
    deployment = apps.api_client.sanitize_for_serialization(apps.read_namespaced_deployment("users", setup.namespace))
    assert "affinity" not in deployment["spec"]["template"]["spec"]
    pods = wait_until("the Deployment's pods scheduled", lambda: scheduled(core, setup.namespace, "app=users", 4),
                      timeout=90)
    assert len(pods) == 4
    assert {p.spec.node_name for p in pods} <= {setup.node("amd-1"), setup.node("amd-2")}
    # Each pod is pinned to the digest its serving PVC holds.
    for created in pods:
        [term] = terms_of(core.api_client.sanitize_for_serialization(created)["spec"])
        assert {"key": setup.ready_key, "operator": "In", "values": [setup.short_digest]} in term["matchExpressions"]


def test_a_pods_own_affinity_is_merged(kube, setup):
    core = client.CoreV1Api(kube)
    own = {"key": HOSTNAME, "operator": "In", "values": [setup.node(n) for n in ("amd-2", "amd-3", "nvidia-1")]}
    body = pod("own-affinity", claim=setup.cache, affinity={
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [own]}]}}})
    body["metadata"]["labels"] = {"case": "own"}
    core.create_namespaced_pod(setup.namespace, body)
    [created] = wait_until("the pod scheduled", lambda: scheduled(core, setup.namespace, "case=own"), timeout=60)
    assert created.spec.node_name == setup.node("amd-2")
    [term] = terms_of(core.api_client.sanitize_for_serialization(created)["spec"])
    assert term["matchExpressions"][0] == own
    assert {"key": setup.ready_key, "operator": "In", "values": [setup.short_digest]} in term["matchExpressions"]


def test_a_pod_that_fits_nowhere_is_denied_with_the_reason_and_the_fix_unless_it_opts_out(kube, crds, setup):
    core = client.CoreV1Api(kube)
    on_amd3 = pod("on-amd-3", claim=setup.cache, nodeSelector={HOSTNAME: setup.node("amd-3")})
    message = denial(core, setup.namespace, on_amd3)
    assert 'GKMCache "%s/%s"' % (setup.namespace, setup.cache) in message
    assert "widen the pod's placement" in message and "gkm.io/cache-steering: disabled" in message
    assert "2 node(s) are usable" in message

    # A cache never reconciled: nothing is extracted anywhere yet.
    crds.create_namespaced_custom_object(GROUP, VERSION, setup.namespace, "gkmcaches", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
        "metadata": {"name": "later", "namespace": setup.namespace}, "spec": {"image": "registry.invalid/x:v1"}})
    message = denial(core, setup.namespace, pod("later-user", claim="later"))
    assert 'GKMCache "%s/later" has not been resolved or extracted yet' % setup.namespace in message
    assert "wait for its first reconcile" in message

    on_amd3["metadata"]["annotations"] = {"gkm.io/cache-steering": "disabled"}
    created = core.create_namespaced_pod(setup.namespace, on_amd3)
    assert created.spec.affinity is None


def test_the_annotation_mounts_the_serving_pvc_and_steers(kube, setup):
    core = client.CoreV1Api(kube)
    body = pod("annotated", annotations={"gkm.io/cache": setup.cache, "gkm.io/cache-mount-path": "/kernels"})
    created = core.api_client.sanitize_for_serialization(core.create_namespaced_pod(setup.namespace, body))
    volume = {"name": "gkm-cache-" + setup.cache, "persistentVolumeClaim": {"claimName": setup.cache,
                                                                            "readOnly": True}}
    assert volume in created["spec"]["volumes"]
    assert {"name": volume["name"], "mountPath": "/kernels", "readOnly": True} in \
        created["spec"]["containers"][0]["volumeMounts"]
    assert {"key": setup.ready_key, "operator": "In", "values": [setup.short_digest]} in \
        terms_of(created["spec"])[0]["matchExpressions"]


def test_a_daemonset_over_partly_ready_nodes_runs_on_the_ready_ones_and_its_other_pods_wait(kube, setup):
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    labels = {"app": "per-node"}
    template = pod("ignored", claim=setup.cache, nodeSelector={TEST_LABEL: setup.suffix})
    template["metadata"] = {"labels": labels}
    apps.create_namespaced_daemon_set(setup.namespace, {"metadata": {"name": "per-node"}, "spec": {
        "selector": {"matchLabels": labels}, "template": template}})

    def status():
        current = apps.read_namespaced_daemon_set_status("per-node", setup.namespace).status
        return current if current.desired_number_scheduled == 5 and current.number_ready == 2 else None

    assert wait_until("the DaemonSet ready on the two nodes holding the cache", status, timeout=90)
    pods = core.list_namespaced_pod(setup.namespace, label_selector="app=per-node").items
    assert sorted(p.spec.node_name for p in pods if p.spec.node_name) == [setup.node("amd-1"), setup.node("amd-2")]
    # The other three were admitted with the readiness requirement and wait Pending: no FailedCreate backoff.
    waiting = [p for p in pods if not p.spec.node_name]
    assert len(waiting) == 3
    for pending in waiting:
        [term] = terms_of(core.api_client.sanitize_for_serialization(pending)["spec"])
        assert {"key": setup.ready_key, "operator": "In", "values": [setup.short_digest]} in term["matchExpressions"]


def test_a_pvc_mutation_daemonset_runs_at_once_on_every_usable_node_and_waits_on_the_others(kube, setup):
    """A DaemonSet labelled gkm.io/pvc-mutation over every node of a label: the five nodes and ten more without a GPU.
    Its pods on the nodes without the cache's PVC are admitted to wait Pending (a denial would stop the controller's
    slow-start batch and back the whole DaemonSet off, so its pods on amd-1 and amd-2 could wait minutes)."""
    raw, core, apps = Kube(kube), client.CoreV1Api(kube), client.AppsV1Api(kube)
    key = "gkm.io/steering-ds-test"
    extra = gpu_nodes.render_nodes([{"name": "st-%s-ds-cpu" % setup.suffix, "count": 10, "vendor": "none",
                                     "labels": {key: setup.suffix}}])
    nodes = [setup.node(n) for n in ("amd-1", "amd-2", "amd-3", "nvidia-1", "cpu-1")]
    usable = set(nodes[:2])
    labels = {"app": "per-node-pvcs", "gkm.io/pvc-mutation": "true"}
    template = pod("ignored", claim=setup.cache, nodeSelector={key: setup.suffix})
    template["metadata"] = {"labels": labels}
    try:
        for node in extra:
            raw.request("POST", "/api/v1/nodes", body=node)
        for name in nodes:
            core.patch_node(name, {"metadata": {"labels": {key: setup.suffix}}})
        names = nodes + [node["metadata"]["name"] for node in extra]
        wait_until("the extra nodes Ready", lambda: all(_ready(raw.get("Node", n)) for n in names), timeout=120,
                   interval=0.5)
        started = time.monotonic()
        apps.create_namespaced_daemon_set(setup.namespace, {"metadata": {"name": "per-node-pvcs"}, "spec": {
            "selector": {"matchLabels": {"app": "per-node-pvcs"}}, "template": template}})

        def on_every_usable_node():
            pods = core.list_namespaced_pod(setup.namespace, label_selector="app=per-node-pvcs").items
            placed = {p.spec.node_name for p in pods if p.spec.node_name and p.status.phase == "Running"}
            return pods if len(pods) == len(names) and placed >= usable else None

        pods = wait_until("a running pod on each usable node and a pod for every node", on_every_usable_node,
                          timeout=30, interval=0.2)
        print("pvc-mutation DaemonSet: %d pods, running on the %d usable nodes after %.1f s" % (
            len(pods), len(usable), time.monotonic() - started))
        assert {p.spec.node_name for p in pods if p.spec.node_name} == usable
        for created in pods:
            spec = core.api_client.sanitize_for_serialization(created)
            claim = spec["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
            if created.spec.node_name:
                assert claim != setup.cache  # its node's own PVC
                continue
            # The others keep the cache's claim, are steered to their node once it holds the serving PVC's digest,
            # and say why they wait.
            assert claim == setup.cache
            [term] = terms_of(spec["spec"])
            assert {"key": setup.ready_key, "operator": "In", "values": [setup.short_digest]} in \
                term["matchExpressions"]
            assert "waits Pending until its node holds it" in created.metadata.annotations["gkm.io/cache-pending"]
    finally:
        apps.delete_namespaced_daemon_set("per-node-pvcs", setup.namespace)
        for node in extra:
            raw.delete("Node", node["metadata"]["name"])
        for name in nodes:
            core.patch_node(name, {"metadata": {"labels": {key: None}}})


def test_a_daemonset_annotated_for_template_steering_counts_only_the_ready_nodes_and_a_reapply_changes_nothing(
        kube, setup):
    raw, apps = Kube(kube), client.AppsV1Api(kube)
    labels = {"app": "steered-template"}
    template = pod("ignored", claim=setup.cache, nodeSelector={TEST_LABEL: setup.suffix})
    template["metadata"] = {"labels": labels}
    manifest = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {
        "name": "steered-template", "namespace": setup.namespace, "annotations": {"gkm.io/cache-steering": "template"}},
        "spec": {"selector": {"matchLabels": labels}, "template": template}}
    path = "/apis/apps/v1/namespaces/%s/daemonsets/steered-template" % setup.namespace

    def apply():
        return raw.request("PATCH", path, [("fieldManager", "steering-test")], manifest, APPLY_CONTENT_TYPE)[1]

    created = apply()
    [term] = terms_of(created["spec"]["template"]["spec"])
    assert {"key": setup.ready_key, "operator": "Exists"} in term["matchExpressions"]

    def status():
        current = apps.read_namespaced_daemon_set_status("steered-template", setup.namespace).status
        return current if current.desired_number_scheduled == 2 and current.number_ready == 2 else None

    # Of the five nodes it selects, the two that hold the cache: desired 2, all ready, none Pending.
    assert wait_until("the DaemonSet desired and ready on the two nodes holding the cache", status, timeout=90)
    assert apply()["metadata"]["generation"] == created["metadata"]["generation"]


def test_the_annotation_of_an_image_volume_cache_mounts_the_pinned_image_on_a_gpu_it_fits(sim, kube, crds, setup):
    core = client.CoreV1Api(kube)
    crds.create_namespaced_custom_object(GROUP, VERSION, setup.namespace, "gkmcaches", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
        "metadata": {"name": "by-image", "namespace": setup.namespace},
        "spec": {"image": setup.image.ref, "mountMode": "imageVolume"}})
    resolved = reconcile(sim, "by-image", setup.namespace)
    assert not resolved.get("failed") and resolved["resource"]["status"]["phase"] == "Resolved", resolved.get("msg")
    body = pod("by-image", annotations={"gkm.io/cache": "by-image", "gkm.io/cache-mount-path": "/kernels"})
    body["metadata"]["labels"] = {"case": "image"}
    reference = setup.image.digest_ref

    def created():
        try:
            return core.api_client.sanitize_for_serialization(core.create_namespaced_pod(setup.namespace, body))
        except ApiException as error:  # the server's view may not hold the resolved digest yet
            assert "has no resolved image digest yet" in json.loads(error.body)["message"], error.body
            return None

    spec = wait_until("the pod admitted with its image volume", created, timeout=30)["spec"]
    assert {"name": "gkm-cache-by-image", "image": {"reference": reference, "pullPolicy": "IfNotPresent"}} in \
        spec["volumes"]
    # No readiness label in this mode: any node whose GPU the image was built for.
    assert [e["key"] for e in terms_of(spec)[0]["matchExpressions"]] == [
        "gkm.io/gpu-backend", "gkm.io/gpu-arch", "gkm.io/gpu-warp-size"]
    [placed] = wait_until("the pod scheduled", lambda: scheduled(core, setup.namespace, "case=image"), timeout=60)
    assert core.read_node(placed.spec.node_name).metadata.labels["gkm.io/gpu-backend"] == "hip"

    # Who uses the image (docs/modes/image-volume.md): kwok pulls nothing, so the node's status says what its kubelet
    # would, that it pulled the pinned reference; a pod mounting another digest of the repository is outdated.
    node = placed.spec.node_name
    core.patch_node_status(node, {"status": {"images": [{"names": [reference, "busybox:1"], "sizeBytes": 1}]}})
    older = reference.split("@")[0] + "@sha256:" + "0" * 64
    other = next(name for name in (setup.node("amd-1"), setup.node("amd-2")) if name != node)
    old = pod("by-image-old", nodeName=other, volumes=[{"name": "cache", "image": {"reference": older}}])
    old["metadata"]["labels"] = {"case": "image"}
    core.create_namespaced_pod(setup.namespace, old)
    wait_until("both pods running", lambda: running(core, setup.namespace, "case=image", 2), timeout=60)
    used = reconcile(sim, "by-image", setup.namespace)
    assert not used.get("failed"), used.get("msg")
    status = used["resource"]["status"]
    assert (status["nodeInUseCnt"], status["nodeNotInUseCnt"], status["podRunningCnt"], status["podOutdatedCnt"]) == (
        1, 0, 1, 1)
    assert status["imageVolume"]["pulledNodes"] == [node] and status["imageVolume"]["pulledNodeCnt"] == 1
    assert [(p["name"], p["node"], p["digest"]) for p in status["imageVolume"]["pods"]] == [
        ("by-image", node, setup.image.digest), ("by-image-old", other, "sha256:" + "0" * 64)]
    assert status["conditions"][0]["message"].endswith("1 node(s) pulled it, 1 running pod(s) mount it, 1 an older "
                                                       "digest")
    # What the API server kept of the written status, as kubectl shows it.
    written = crds.get_namespaced_custom_object(GROUP, VERSION, setup.namespace, "gkmcaches", "by-image")["status"]
    assert written["imageVolume"] == status["imageVolume"] and written["podOutdatedCnt"] == 1
    # cache_info reports it from that status: no PVC or Job exists to read.
    info = run_module("cache_info", sim.kubeconfig, name="by-image", namespace=setup.namespace)
    [reported] = info["caches"]
    assert reported["status"]["phase"] == "Resolved" and reported["status"]["counts"]["pod_outdated"] == 1
    assert reported["status"]["image_volume"]["pulled_nodes"] == [node]
    assert [p["name"] for p in reported["status"]["image_volume"]["pods"]] == ["by-image", "by-image-old"]


def test_a_cache_without_a_mount_mode_gets_the_caches_role_default(sim, kube, crds, setup, tmp_path):
    """caches_mount_mode: imageVolume, through the caches role's reconcile (as the operator's runs include it), with no
    tools image: a GKMCache that sets no spec.mountMode is Resolved, and nothing is extracted for it; a webhook given
    the same default (--default-mount-mode, which the gkm role sets from caches_mount_mode) mounts its image."""
    crds.create_namespaced_custom_object(GROUP, VERSION, setup.namespace, "gkmcaches", {
        "apiVersion": "%s/%s" % (GROUP, VERSION), "kind": "GKMCache",
        "metadata": {"name": "by-default", "namespace": setup.namespace}, "spec": {"image": setup.image.ref}})
    run = run_playbook({"module_defaults": {"group/gkm.cluster.k8s": {"kubeconfig": sim.kubeconfig}}, "tasks": [{
        "name": "Reconcile one cache as the operator does",
        "ansible.builtin.include_role": {"name": "gkm.cluster.caches", "tasks_from": "reconcile.yml"},
        "vars": {"caches_reconcile_state": "present", "caches_mount_mode": "imageVolume", "caches_extract_image": "",
                 "caches_registry_plain_http": True, "caches_wait": False,
                 "caches_targets": [{"kind": "GKMCache", "name": "by-default", "namespace": setup.namespace}]}}]},
        tmp_path)
    assert run.ok, run.failures() or run.stderr[-2000:]
    [reconciled] = run.result("Reconcile every cache")["results"]
    assert reconciled["cache"]["mount_mode"] == "imageVolume" and reconciled["plan"]["actions"] == []
    assert reconciled["resource"]["status"]["phase"] == "Resolved"
    assert not client.BatchV1Api(kube).list_namespaced_job(
        setup.namespace, label_selector="gkm.io/cache=by-default").items

    (tmp_path / "certs").mkdir()
    certs = CertificateFiles(str(tmp_path / "certs"))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file,
                                extra_args=["--default-mount-mode", "imageVolume"])
    try:
        server.start().wait_ready(certs.ca)
        annotated = pod("by-default", annotations={"gkm.io/cache": "by-default", "gkm.io/cache-mount-path": "/k"})

        def mounted_volumes():
            answer = server.admit_pod(annotated, setup.namespace, certs.ca)
            if not answer["allowed"]:  # the server's watch may not hold the resolved digest yet
                return None
            patch = json.loads(base64.b64decode(answer["patch"]))
            return [op["value"] for op in patch if op["path"] == "/spec/volumes"]

        [volumes] = wait_until("the pod admitted", mounted_volumes, timeout=30)
        assert volumes == [{"name": "gkm-cache-by-default",
                            "image": {"reference": setup.image.digest_ref, "pullPolicy": "IfNotPresent"}}]
    finally:
        server.stop()
