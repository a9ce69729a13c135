"""gkm.cluster.webhook_install against the real API server: install order, TLS, idempotence, removal."""

import base64
import json
import os
import subprocess
import threading
import time
import uuid

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install.installer import InstallError
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install.tls import subject_alt_names
from tests.helpers.webhook import (
    COLLECTIONS,
    GPU_TOLERATION,
    KWOK_NODES,
    NO_NODE,
    ROOT,
    LocalWebhookServer,
    free_port,
    install,
    install_with_diffs,
    service_endpoints,
    wait_until,
    write_atomically,
)

pytestmark = pytest.mark.cluster

PAUSE = {"name": "main", "image": "registry.k8s.io/pause:3.10"}


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:6])


def secret_text(core, name, namespace, key):
    return base64.b64decode(core.read_namespaced_secret(name, namespace).data[key]).decode()


class SecretToFiles(threading.Thread):
    """Does what the kubelet does for a Secret volume: writes tls.crt/tls.key when the Secret changes."""

    def __init__(self, core, name, namespace, directory):
        super().__init__(daemon=True)
        self.core, self.name, self.namespace, self.directory = core, name, namespace, directory
        self.stop = threading.Event()
        self.written = threading.Event()

    def run(self):
        last = None
        while not self.stop.is_set():
            try:
                data = self.core.read_namespaced_secret(self.name, self.namespace).data
            except ApiException:
                data = None
            if data and data != last:
                write_atomically(os.path.join(self.directory, "tls.key"), base64.b64decode(data["tls.key"]).decode())
                write_atomically(os.path.join(self.directory, "tls.crt"), base64.b64decode(data["tls.crt"]).decode())
                last = data
                self.written.set()
            self.stop.wait(0.2)


class PodChurn(threading.Thread):
    """Creates labelled (no cache claim) and unlabelled pods in a namespace, recording every failure."""

    def __init__(self, core, namespace):
        super().__init__(daemon=True)
        self.core, self.namespace = core, namespace
        self.stop = threading.Event()
        self.created = 0
        self.failures = []

    def run(self):
        index = 0
        while not self.stop.is_set():
            labels = {"gkm.io/pvc-mutation": "true"} if index % 2 else {}
            body = {"metadata": {"name": "churn-%d" % index, "labels": labels},
                    "spec": {"containers": [PAUSE], "tolerations": [GPU_TOLERATION], "nodeSelector": KWOK_NODES}}
            try:
                self.core.create_namespaced_pod(self.namespace, body)
                self.created += 1
            except ApiException as error:
                self.failures.append(error.body)
            index += 1
            self.stop.wait(0.05)


def test_install_and_uninstall_never_break_pods_elsewhere(sim, kube, namespace, tmp_path):
    core = client.CoreV1Api(kube)
    name, webhook_namespace = unique("wh"), unique("gkm-wh")
    port = free_port()
    url = "https://127.0.0.1:%d/mutate" % port
    churn = PodChurn(core, namespace)
    syncer = SecretToFiles(core, name + "-tls", webhook_namespace, str(tmp_path))
    server = LocalWebhookServer(sim.kubeconfig, str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), port=port)

    def start_server_when_certificate_is_there():
        syncer.written.wait(60)
        server.start()

    churn.start()
    syncer.start()
    starter = threading.Thread(target=start_server_when_certificate_is_there, daemon=True)
    starter.start()
    try:
        time.sleep(1)
        result = install(sim.kubeconfig, name=name, namespace=webhook_namespace, url=url, tls_mode="self_signed")
        kinds = [entry["kind"] for entry in result["objects"]]
        assert kinds == ["Namespace", "Secret", "Secret", "MutatingWebhookConfiguration"]
        assert result["changed"] and result["tls"]["certificate_renewed"]
        ca = secret_text(core, name + "-ca", webhook_namespace, "ca.crt")
        assert subject_alt_names(server.served_certificate()) == ([], ["127.0.0.1"])

        # The configuration is live: labelled pods in the unrelated namespace (the probe and the
        # churn's) go through the server.
        before = server.metric(ca, "gkm_webhook_requests_total")
        core.create_namespaced_pod(namespace, {"metadata": {"name": "probe", "labels": {"gkm.io/pvc-mutation": "true"}},
                                               "spec": {"containers": [PAUSE], "nodeSelector": KWOK_NODES}})
        assert server.metric(ca, "gkm_webhook_requests_total") >= before + 1

        again = install(sim.kubeconfig, name=name, namespace=webhook_namespace, url=url, tls_mode="self_signed")
        assert not again["changed"] and again["api_writes"] == 0

        removed = install(sim.kubeconfig, name=name, namespace=webhook_namespace, state="absent")
        assert removed["objects"][0] == {"kind": "MutatingWebhookConfiguration", "namespace": None,
                                         "name": "%s-%s" % (name, webhook_namespace), "action": "deleted"}
        server.stop()
        time.sleep(1)
    finally:
        churn.stop.set()
        syncer.stop.set()
        churn.join()
        try:
            install(sim.kubeconfig, name=name, namespace=webhook_namespace, state="absent")
        finally:
            server.stop()
    assert churn.failures == []
    assert churn.created >= 20


def test_service_mode_install_is_ordered_idempotent_and_renews(sim, kube):
    core = client.CoreV1Api(kube)
    admission = client.AdmissionregistrationV1Api(kube)
    name, namespace = unique("wh"), unique("gkm-wh")
    # A webhook nobody answers: the server's pods never schedule (NO_NODE) and the install does not wait for them,
    # so its Service has no endpoints. On kwok nodes they would get fake pod IPs, which the API server dials itself
    # (aggregator routing): those packets must not leave this machine. Ignore: labelled pods elsewhere must not fail.
    options = dict(name=name, namespace=namespace, endpoint="service", image="gkm/tools:test",
                   tls_mode="self_signed", tolerations=[GPU_TOLERATION], node_selector=NO_NODE,
                   failure_policy="Ignore", wait=False)
    try:
        first = install(sim.kubeconfig, **options)
        assert [(entry["kind"], entry["action"]) for entry in first["objects"]] == [
            ("Namespace", "created"), ("ServiceAccount", "created"), ("ClusterRole", "created"),
            ("ClusterRoleBinding", "created"), ("Secret", "created"), ("Secret", "created"),
            ("Deployment", "created"), ("PodDisruptionBudget", "created"), ("Service", "created"),
            ("MutatingWebhookConfiguration", "created")]
        deployment = client.AppsV1Api(kube).read_namespaced_deployment(name, namespace)
        assert deployment.spec.replicas == 2 and deployment.spec.template.spec.node_selector == NO_NODE
        assert service_endpoints(kube, name, namespace) == []
        config = admission.read_mutating_webhook_configuration("%s-%s" % (name, namespace))
        hook = config.webhooks[0]
        assert hook.client_config.service.name == name and hook.client_config.service.namespace == namespace
        ca = secret_text(core, name + "-ca", namespace, "ca.crt")
        assert base64.b64decode(hook.client_config.ca_bundle).decode() == ca
        serving = secret_text(core, name + "-tls", namespace, "tls.crt")
        assert tls.issued_by(serving, ca)
        assert "%s.%s.svc" % (name, namespace) in subject_alt_names(serving)[0]
        rules = client.RbacAuthorizationV1Api(kube).read_cluster_role("gkm.cluster:%s:%s" % (namespace, name)).rules
        assert sorted(verb for rule in rules for verb in rule.verbs) == ["list"] * 3 + ["watch"] * 3

        again = install(sim.kubeconfig, **options)
        assert not again["changed"] and again["api_writes"] == 0
        assert {entry["action"] for entry in again["objects"]} == {"unchanged"}

        checked, diffs = install_with_diffs(sim.kubeconfig, check_mode=True, **dict(options, failure_policy="Fail"))
        assert checked["changed"] and checked["api_writes"] == 0
        assert [d["after_header"] for d in diffs] == ["MutatingWebhookConfiguration %s-%s" % (name, namespace)]
        assert diffs[0]["after"]["webhooks"][0]["failurePolicy"] == "Fail"
        assert admission.read_mutating_webhook_configuration(
            "%s-%s" % (name, namespace)).webhooks[0].failure_policy == "Ignore"

        # A serving certificate within renew_before is renewed from the same CA; the caBundle stays.
        renewed = install(sim.kubeconfig, **dict(options, cert_valid_days=400, renew_before_days=370))
        assert renewed["changed"] and renewed["tls"]["certificate_renewed"] and not renewed["tls"]["ca_renewed"]
        assert [(e["kind"], e["name"]) for e in renewed["objects"] if e["action"] == "updated"] == [
            ("Secret", name + "-tls")]
        assert secret_text(core, name + "-tls", namespace, "tls.crt") != serving

        # api_server_cidrs: a NetworkPolicy admitting only them, selecting the server pods; without them again, it goes.
        guarded = install(sim.kubeconfig, **dict(options, api_server_cidrs=["127.0.0.0/8"]))
        assert [e["action"] for e in guarded["objects"] if e["kind"] == "NetworkPolicy"] == ["created"]
        policy = client.NetworkingV1Api(kube).read_namespaced_network_policy(name, namespace)
        assert policy.spec.pod_selector.match_labels.items() <= deployment.spec.template.metadata.labels.items()
        assert [(peer.ip_block.cidr, port.port) for rule in policy.spec.ingress
                for peer in rule._from for port in rule.ports] == [("127.0.0.0/8", 8443)]
        opened = install(sim.kubeconfig, **options)
        assert [e["action"] for e in opened["objects"] if e["kind"] == "NetworkPolicy"] == ["deleted"]
        assert client.NetworkingV1Api(kube).list_namespaced_network_policy(namespace).items == []
    finally:
        removed = install(sim.kubeconfig, name=name, namespace=namespace, endpoint="service", state="absent")
    assert removed["objects"][0]["kind"] == "MutatingWebhookConfiguration"
    assert {entry["action"] for entry in removed["objects"]} == {"deleted"}
    with pytest.raises(ApiException) as gone:
        admission.read_mutating_webhook_configuration("%s-%s" % (name, namespace))
    assert gone.value.status == 404


def test_cert_manager_mode_without_cert_manager_changes_nothing(sim, kube):
    groups = [group.name for group in client.ApisApi(kube).get_api_versions().groups]
    if "cert-manager.io" in groups:
        pytest.skip("cert-manager's API is served on the shared cluster right now (another test installed it)")
    namespace = unique("gkm-wh")
    with pytest.raises(InstallError) as error:
        install(sim.kubeconfig, namespace=namespace, endpoint="service", image="gkm/tools:test",
                tls_mode="cert_manager")
    assert "install cert-manager first" in str(error.value)
    with pytest.raises(ApiException) as missing:
        client.CoreV1Api(kube).read_namespace(namespace)
    assert missing.value.status == 404


def run_module(kubeconfig, check=False, **args):
    command = [os.path.join(ROOT, ".venv", "bin", "ansible"), "localhost", "-m", "gkm.cluster.webhook_install",
               "-a", json.dumps(dict(args, kubeconfig=kubeconfig)), "--diff"] + (["--check"] if check else [])
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_STDOUT_CALLBACK="json",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=False).stdout
    return json.loads(output)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_check_mode_diff_and_idempotence(sim, kube, tmp_path):
    name, namespace = unique("wh"), unique("gkm-wh")
    ca = tls.new_ca("external CA")[0]
    args = dict(name=name, namespace=namespace, endpoint="url", url="https://127.0.0.1:%d/mutate" % free_port(),
                tls_mode="provided", ca_bundle=ca, failure_policy="Ignore", wait=False)
    admission = client.AdmissionregistrationV1Api(kube)
    try:
        checked = run_module(sim.kubeconfig, check=True, **args)
        assert checked["changed"] is True and checked["api_writes"] == 0
        assert "MutatingWebhookConfiguration" in json.dumps(checked["diff"])
        with pytest.raises(ApiException):
            admission.read_mutating_webhook_configuration("%s-%s" % (name, namespace))

        created = run_module(sim.kubeconfig, **args)
        assert created["changed"] is True, created
        assert admission.read_mutating_webhook_configuration("%s-%s" % (name, namespace)).webhooks[0].client_config.url
        assert run_module(sim.kubeconfig, **args)["changed"] is False
        bad = run_module(sim.kubeconfig, **dict(args, timeout_seconds=60))
        assert bad["failed"] and "timeout_seconds must be between 1 and 30" in bad["msg"]
    finally:
        removed = run_module(sim.kubeconfig, name=name, namespace=namespace, endpoint="url", state="absent")
    assert removed["changed"] is True
    wait_until("namespace gone or terminating", lambda: _namespace_gone(kube, namespace))


def _namespace_gone(kube, namespace):
    try:
        return client.CoreV1Api(kube).read_namespace(namespace).status.phase == "Terminating"
    except ApiException as error:
        return error.status == 404


def test_removal_keeps_a_namespace_that_still_holds_records_of_others(sim, kube):
    """undeploy removes the webhook before cert-manager and Kyverno, whose ownership ConfigMaps live in the
    same namespace: deleting the namespace then would make their removal forget that we installed them."""
    name, namespace = unique("wh"), unique("gkm-wh")
    core = client.CoreV1Api(kube)
    args = dict(name=name, namespace=namespace, endpoint="url", url="https://127.0.0.1:%d/mutate" % free_port(),
                tls_mode="provided", ca_bundle=tls.new_ca("external CA")[0], wait=False)
    install(sim.kubeconfig, **args)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "ownership-record"}, "data": {"a": "b"}})

    kept = install(sim.kubeconfig, name=name, namespace=namespace, endpoint="url", state="absent")
    assert kept["kept"] == ["Namespace %s: holds ConfigMap ownership-record" % namespace]
    assert core.read_namespace(namespace).status.phase == "Active"
    assert ("Namespace", "absent") not in {(e["kind"], e["action"]) for e in kept["objects"]}

    core.delete_namespaced_config_map("ownership-record", namespace)
    removed = install(sim.kubeconfig, name=name, namespace=namespace, endpoint="url", state="absent")
    assert removed["changed"] and "kept" not in removed
    assert ("Namespace", namespace, "deleted") in {(e["kind"], e["name"], e["action"]) for e in removed["objects"]}
    wait_until("namespace gone or terminating", lambda: _namespace_gone(kube, namespace))
