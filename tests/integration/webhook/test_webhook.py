"""The PVC-mutation webhook through the real API server: DaemonSet admission, denials, failure policy,
bad payloads and certificate rotation. The server runs as a local process (url endpoint)."""

import collections
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SIM_NODE_LABEL,
)
from tests.helpers.webhook import (
    GPU_TOLERATION,
    KWOK_NODES,
    CertificateFiles,
    LocalWebhookServer,
    create_node_pvcs,
    install,
    wait_until,
)

pytestmark = pytest.mark.cluster

CACHE = "vector-add"
PAUSE = {"name": "main", "image": "registry.k8s.io/pause:3.10"}


def gpu_node_names(core):
    """The kwok GPU nodes: pods bound to them run nothing, so their images are never pulled."""
    labels = dict(KWOK_NODES, **{"hardware-type": "gpu", SIM_NODE_LABEL: "true"})
    nodes = core.list_node(label_selector=",".join("%s=%s" % label for label in sorted(labels.items()))).items
    return sorted(node.metadata.name for node in nodes)


class Webhook:
    def __init__(self, server, certs, name, namespace, kubeconfig):
        self.server = server
        self.certs = certs
        self.name = name
        self.namespace = namespace
        self.kubeconfig = kubeconfig

    def register(self, ca_bundle=None, **overrides):
        return install(self.kubeconfig, name=self.name, namespace=self.namespace, url=self.server.url,
                       ca_bundle=ca_bundle or self.certs.ca, **overrides)

    def requests(self):
        return self.server.metric(self.certs.ca, "gkm_webhook_requests_total")


@pytest.fixture
def webhook(sim, tmp_path):
    """A local server, synced with the cluster, registered with failurePolicy Fail; removed afterwards."""
    certs = CertificateFiles(str(tmp_path))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file).start()
    hook = Webhook(server, certs, "wh-" + uuid.uuid4().hex[:6], "gkm-wh-" + uuid.uuid4().hex[:6], sim.kubeconfig)
    try:
        server.wait_ready(certs.ca)
        hook.register()
        yield hook
    finally:
        try:
            install(sim.kubeconfig, name=hook.name, namespace=hook.namespace, state="absent")
        finally:
            server.stop()


def labelled_pod(name, claim=CACHE, node=None, labelled=True):
    spec = {"containers": [PAUSE], "tolerations": [GPU_TOLERATION],
            "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": claim}}]}
    if node:
        spec["nodeName"] = node
    labels = {"gkm.io/pvc-mutation": "true"} if labelled else {}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def daemonset(name):
    labels = {"app": name}
    return {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": labels}, "template": {
        "metadata": {"labels": dict(labels, **{"gkm.io/pvc-mutation": "true"})},
        "spec": {"tolerations": [GPU_TOLERATION], "nodeSelector": dict(KWOK_NODES, **{"hardware-type": "gpu"}),
                 "containers": [PAUSE],
                 "volumes": [{"name": "cache", "persistentVolumeClaim": {"claimName": CACHE}}]}}}}


def wait_view_has(webhook, pvcs):
    wait_until("the server's view to hold %d PVCs" % pvcs,
               lambda: webhook.server.metric(webhook.certs.ca, 'gkm_webhook_view_objects{kind="pvcs"}') >= pvcs)


@pytest.mark.matrix
def test_the_view_follows_pvcs_by_watch_events_not_re_lists(sim, kube, namespace, tmp_path):
    """Re-LISTs after failed watches keep the view right but slow; only the counters tell them apart."""
    certs = CertificateFiles(str(tmp_path))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file).start()
    try:
        server.wait_ready(certs.ca)
        nodes = gpu_node_names(client.CoreV1Api(kube))
        create_node_pvcs(kube, namespace, CACHE, nodes)
        events = 'gkm_webhook_watch_events_total{source="persistentvolumeclaims"}'
        wait_until("watch events for %d new PVCs" % len(nodes),
                   lambda: server.metric(certs.ca, events) >= len(nodes), timeout=30)
        assert server.metric(certs.ca, 'gkm_webhook_watch_restarts_total{source="persistentvolumeclaims"}') == 0
    finally:
        server.stop()


@pytest.mark.matrix
def test_daemonset_pods_get_their_own_node_pvc(kube, namespace, webhook):
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    nodes = gpu_node_names(core)
    expected = create_node_pvcs(kube, namespace, CACHE, nodes)
    wait_view_has(webhook, len(nodes))
    apps.create_namespaced_daemon_set(namespace, daemonset("cache-user"))

    def pods():
        found = core.list_namespaced_pod(namespace, label_selector="app=cache-user").items
        return found if len(found) == len(nodes) else None

    created = wait_until("one pod per GPU node", pods)
    claims = {}
    for pod in created:
        terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        node = terms[0].match_fields[0].values[0]
        claims[node] = pod.spec.volumes[0].persistent_volume_claim.claim_name
    assert claims == expected


def test_only_pods_that_may_use_a_cache_are_sent(kube, namespace, webhook):
    """Unlabelled pods go to the steering entry only when they name a PVC or annotate gkm.io/cache (matchConditions);
    the claim of an unlabelled pod is never rewritten."""
    core = client.CoreV1Api(kube)
    node = gpu_node_names(core)[0]
    create_node_pvcs(kube, namespace, CACHE, [node])
    wait_view_has(webhook, 1)
    before = webhook.requests()
    for index in range(3):
        pod = labelled_pod("plain-%d" % index, node=node, labelled=False)
        del pod["spec"]["volumes"]
        core.create_namespaced_pod(namespace, pod)
    assert webhook.requests() == before
    core.create_namespaced_pod(namespace, labelled_pod("claims", node=node, labelled=False))
    assert core.read_namespaced_pod("claims", namespace).spec.volumes[0].persistent_volume_claim.claim_name == CACHE
    assert webhook.requests() == before + 1
    core.create_namespaced_pod(namespace, labelled_pod("labelled", node=node))
    assert webhook.requests() == before + 2


def test_node_without_pvc_is_denied_with_what_to_run(kube, namespace, webhook):
    core, apps = client.CoreV1Api(kube), client.AppsV1Api(kube)
    nodes = gpu_node_names(core)
    with_pvc, without = nodes[:-1], nodes[-1]
    create_node_pvcs(kube, namespace, CACHE, with_pvc)
    wait_view_has(webhook, len(with_pvc))

    with pytest.raises(ApiException) as denied:
        core.create_namespaced_pod(namespace, labelled_pod("pinned", node=without))
    message = json.loads(denied.value.body)["message"]
    assert 'GKMCache "%s/%s" is not extracted for node "%s"' % (namespace, CACHE, without) in message
    assert "gkm.cluster.cache_distribute" in message

    # The DaemonSet controller gets the same answer for that node and creates the others.
    apps.create_namespaced_daemon_set(namespace, daemonset("partial"))
    wait_until("pods on the nodes with a PVC", lambda: len(
        core.list_namespaced_pod(namespace, label_selector="app=partial").items) == len(with_pvc))

    def failed_create_event():
        events = core.list_namespaced_event(namespace, field_selector="reason=FailedCreate").items
        return [e.message for e in events if without in e.message and "cache_distribute" in e.message]

    assert wait_until("a FailedCreate event naming the node", failed_create_event)


def test_pod_without_a_known_node_is_denied(kube, namespace, webhook):
    core = client.CoreV1Api(kube)
    create_node_pvcs(kube, namespace, CACHE, gpu_node_names(core))
    wait_view_has(webhook, 1)
    with pytest.raises(ApiException) as denied:
        core.create_namespaced_pod(namespace, labelled_pod("floating"))
    assert "run the workload as a DaemonSet" in json.loads(denied.value.body)["message"]


def test_server_down_with_failure_policy_fail(kube, namespace, webhook):
    core = client.CoreV1Api(kube)
    node = gpu_node_names(core)[0]
    create_node_pvcs(kube, namespace, CACHE, [node])
    webhook.server.stop()
    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(namespace, labelled_pod("labelled", node=node))
    message = json.loads(rejected.value.body)["message"]
    assert "failed calling webhook" in message and "pvc-mutation.gkm.io" in message
    assert "connection refused" in message
    core.create_namespaced_pod(namespace, labelled_pod("unlabelled", node=node, labelled=False))
    assert core.read_namespaced_pod("unlabelled", namespace).metadata.name == "unlabelled"


def post(webhook, body, content_type="application/json"):
    context = ssl.create_default_context(cadata=webhook.certs.ca)
    request = urllib.request.Request(webhook.server.url, data=body, method="POST",
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def review(obj, kind="Pod", uid="u-1"):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": kind}, "namespace": "apps",
        "operation": "CREATE", "object": obj}}


def test_malformed_and_huge_payloads_leave_the_server_serving(webhook):
    assert post(webhook, b"{not json")[0] == 400
    assert post(webhook, b"\xff\xfe\x00garbage")[0] == 400
    assert post(webhook, b"")[0] == 400
    assert post(webhook, json.dumps({"kind": "Something"}).encode())[0] == 400
    assert post(webhook, json.dumps([1, 2, 3]).encode())[0] == 400
    status, answer = post(webhook, json.dumps(review({"metadata": {}}, kind="ConfigMap")).encode())
    assert status == 200 and answer["response"] == {"uid": "u-1", "allowed": True}
    status, answer = post(webhook, json.dumps(review({"spec": "nonsense", "metadata": 7})).encode())
    assert status == 200 and answer["response"]["allowed"] is True
    # 3 MiB of annotations (about what the API server lets an object carry): answered normally.
    big = {"metadata": {"annotations": {"a%d" % i: "x" * 1000 for i in range(3000)},
                        "labels": {"gkm.io/pvc-mutation": "true"}}, "spec": {"containers": [PAUSE]}}
    status, answer = post(webhook, json.dumps(review(big, uid="big")).encode())
    assert status == 200 and answer["response"] == {"uid": "big", "allowed": True}
    # Over the limit (app.py MAX_BODY_BYTES): refused before it is parsed.
    assert post(webhook, b"[" + b"0," * (5 * 1024 * 1024) + b"0]")[0] == 413
    assert webhook.server.alive()
    assert webhook.server.get("/healthz", webhook.certs.ca) == (200, "ok\n")
    assert webhook.server.metric(webhook.certs.ca, 'gkm_webhook_requests_total{outcome="invalid"}') >= 6


def test_certificate_rotation_under_load_fails_no_admission(kube, namespace, webhook):
    core = client.CoreV1Api(kube)
    node = gpu_node_names(core)[0]
    expected = create_node_pvcs(kube, namespace, CACHE, [node])[node]
    wait_view_has(webhook, 1)
    failures, admitted = [], []
    stop = threading.Event()

    def load(worker):
        index = 0
        while not stop.is_set():
            name = "load-%d-%d" % (worker, index)
            index += 1
            try:
                pod = core.create_namespaced_pod(namespace, labelled_pod(name, node=node))
                admitted.append(pod.spec.volumes[0].persistent_volume_claim.claim_name)
            except ApiException as error:
                failures.append(error.body)

    workers = [threading.Thread(target=load, args=(worker,)) for worker in range(2)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(2)
        # 1. A new certificate from the same CA.
        same_ca = webhook.certs.issue()
        wait_until("the new certificate served", lambda: webhook.server.served_certificate() == same_ca)
        time.sleep(2)
        # 2. A new CA: trust old and new, switch the certificate, then drop the old CA.
        old_ca = webhook.certs.ca
        new_ca, new_key = tls.new_ca("rotated CA")
        webhook.register(ca_bundle=new_ca + old_ca)
        time.sleep(2)
        webhook.certs.ca, webhook.certs.ca_key = new_ca, new_key
        new_cert = webhook.certs.issue()
        wait_until("the new CA's certificate served", lambda: webhook.server.served_certificate() == new_cert)
        time.sleep(2)
        webhook.register(ca_bundle=new_ca)
        time.sleep(3)
    finally:
        stop.set()
        for worker in workers:
            worker.join()
    assert failures == []
    # Each pod by the claim it was admitted with: one CI run saw a pod without the rewrite, and said no more.
    assert len(admitted) >= 20 and set(admitted) == {expected}, collections.Counter(admitted)
    assert webhook.server.metric(new_ca, "gkm_webhook_certificate_reloads_total") >= 2


@pytest.mark.registry
def test_a_node_the_cache_excludes_is_denied_with_the_reason_not_yet(sim, kube, crds, registry, namespace, webhook):
    """The reason in the node's per-node object (GKMCacheNode) reaches the denial: the gpu taint keeps the cache off
    every GPU node."""
    from tests.helpers import kcache_images
    from tests.helpers.modules import NODE_DISK, run_module

    image = kcache_images.build_image(registry.host, "webhook/excluded", "v1", kcache_images.CacheSpec(backend="hip"))
    crds.create_namespaced_custom_object("gkm.io", "v1alpha1", namespace, "gkmcaches", {
        "apiVersion": "gkm.io/v1alpha1", "kind": "GKMCache", "metadata": {"name": CACHE, "namespace": namespace},
        "spec": {"image": image.ref}})
    result = run_module("cache_reconcile", sim.kubeconfig, kind="GKMCache", name=CACHE, namespace=namespace,
                        registry_plain_http=True, extract_image="gkm-cluster-tools:test", host_path_root=NODE_DISK)
    assert not result.get("failed") and result["resource"]["status"]["phase"] == "Pending", result.get("msg")
    node = gpu_node_names(client.CoreV1Api(kube))[0]

    def denial():
        try:
            client.CoreV1Api(kube).create_namespaced_pod(namespace, labelled_pod("excluded", node=node))
        except ApiException as error:
            message = json.loads(error.body)["message"]
            return message if "is not for node" in message else None
        raise AssertionError("the pod was admitted")

    message = wait_until("the denial to give the reason", denial)
    assert ('GKMCache "%s/%s" is not for node "%s": untolerated taint gpu=true:NoSchedule (add a toleration to '
            "spec.podTemplate.spec.tolerations)" % (namespace, CACHE, node)) in message
    assert "yet" not in message
