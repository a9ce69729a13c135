"""Test-side helpers for the PVC-mutation webhook: a local server process, its certificates, installs.

The simulated cluster runs no containers, so the server runs here as a plain process
(`python -m ...webhook_server`) and the API server calls it through `clientConfig.url`.
"""

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

from kubernetes import client

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_auth
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract import naming
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    EXTRACTED_DIGEST_ANNOTATION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.install import installer as webhook_install
from ansible_collections.gkm.cluster.plugins.modules.webhook_install import ARGUMENT_SPEC as WEBHOOK_INSTALL_SPEC
from tests.helpers.paths import ROOT
from tests.helpers.sim import sim_control

# A port for a local server, outside the kernel's ephemeral range (simcluster/state_dir.py says why).
free_port = sim_control.free_port

COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
SERVER_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.main"
GPU_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
# kwok's nodes (their pods run nothing): a server Deployment of an image no node has stays off the real nodes.
KWOK_NODES = {"type": "kwok"}
# No node has this label: pods placed by it never schedule, so a webhook Service in front of them has no endpoints.
NO_NODE = {"gkm.io/test-no-such-node": "true"}
DIGEST = "sha256:" + "c0ffee" * 10 + "abcd"


def write_atomically(path, text):
    """Replace a file in one rename, as the kubelet swaps a Secret volume's files."""
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


class CertificateFiles:
    """A CA and a serving certificate for 127.0.0.1, written where the server reads them."""

    def __init__(self, directory):
        self.directory = directory
        self.cert_file = os.path.join(directory, "tls.crt")
        self.key_file = os.path.join(directory, "tls.key")
        self.ca, self.ca_key = tls.new_ca("gkm webhook test CA")
        self.issue()

    def issue(self, new_ca=False):
        """Write a new serving certificate (from a new CA when asked); returns the certificate PEM."""
        if new_ca:
            self.ca, self.ca_key = tls.new_ca("gkm webhook test CA")
        cert, key = tls.new_signed_cert(self.ca, self.ca_key, "127.0.0.1", ip_addresses=["127.0.0.1"])
        # The key goes first: the server keeps its current pair until cert and key match again.
        write_atomically(self.key_file, key)
        write_atomically(self.cert_file, cert)
        return cert


class LocalWebhookServer:
    """The webhook server as a child process of the test, on a free loopback port."""

    def __init__(self, kubeconfig, cert_file, key_file, port=None, log_path=None, extra_args=()):
        self.kubeconfig = kubeconfig
        self.extra_args = list(extra_args)
        self.cert_file = cert_file
        self.key_file = key_file
        self.port = port or free_port()
        self.log_path = log_path or os.path.join(os.path.dirname(cert_file), "server.log")
        self.process = None

    @property
    def url(self):
        return "https://127.0.0.1:%d/mutate" % self.port

    def start(self):
        env = dict(os.environ, PYTHONPATH=COLLECTIONS)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", SERVER_MODULE, "--cert-file", self.cert_file, "--key-file", self.key_file,
                 "--listen", "127.0.0.1:%d" % self.port, "--kubeconfig", self.kubeconfig,
                 "--cert-check-seconds", "0.2", *self.extra_args],
                stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def get(self, path, ca):
        context = ssl.create_default_context(cadata=ca)
        try:
            with urllib.request.urlopen("https://127.0.0.1:%d%s" % (self.port, path), context=context,
                                        timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def admit_pod(self, pod, namespace, ca):
        """The server's AdmissionReview response to a pod's CREATE, asked directly (no API server in between)."""
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "direct", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": namespace,
            "operation": "CREATE", "object": pod}}
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=ssl.create_default_context(cadata=ca), timeout=30) as response:
            return json.loads(response.read())["response"]

    def wait_ready(self, ca, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.alive(), "webhook server exited; log: %s" % self.log_path
            try:
                if self.get("/readyz", ca)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("webhook server not ready after %ss; log: %s" % (timeout, self.log_path))

    def metric(self, ca, name):
        return metric_value(self.get("/metrics", ca)[1], name)

    def served_certificate(self):
        """The PEM certificate a new TLS connection gets."""
        return ssl.get_server_certificate(("127.0.0.1", self.port))


def metric_value(text, name):
    """Sum of the samples of a Prometheus text page whose line starts with name (labels included in name if given)."""
    return sum(float(m.group(1)) for m in re.finditer(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), text,
                                                      re.MULTILINE))


def service_endpoints(kube, name, namespace):
    """The addresses behind Service namespace/name, from its EndpointSlices: the ones the API server would dial."""
    slices = client.DiscoveryV1Api(kube).list_namespaced_endpoint_slice(
        namespace, label_selector="kubernetes.io/service-name=%s" % name).items
    return [address for piece in slices for endpoint in piece.endpoints or [] for address in endpoint.addresses]


def install_params(kubeconfig, **overrides):
    """webhook_install's options as the module gives them (its argument spec's defaults), for a loopback server."""
    params = {name: option.get("default") for name, option in WEBHOOK_INSTALL_SPEC.items()}
    params.update(endpoint="url", tls_mode="provided", wait_timeout=60, kubeconfig=kubeconfig)
    params.update(overrides)
    return params


def install_with_diffs(kubeconfig, check_mode=False, **overrides):
    """Run webhook_install in-process (as the module does) and return (result, diffs)."""
    params = install_params(kubeconfig, **overrides)
    return webhook_install.run(params, check_mode, lambda: Kube(api_client_from_auth({"kubeconfig": kubeconfig}),
                                                                dry_run=check_mode))


def install(kubeconfig, **overrides):
    """Run webhook_install in-process and return its result."""
    return install_with_diffs(kubeconfig, **overrides)[0]


def node_pvc(namespace, cache, node, digest=DIGEST, cluster=False, extracted=True):
    """A PVC named and labelled as cache_distribute writes it for one node, marked extracted unless told otherwise
    (the webhook hands out only extracted PVCs).

    It asks for a volume that does not exist, so it stays Pending without the PV controller emitting
    an event every resync (500 of those kept the API server busy during benchmarks).
    """
    slot = naming.Slot(cache, "" if cluster else namespace, namespace, node, digest)
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": slot.pvc_name(), "namespace": namespace, "labels": slot.labels(),
                     "annotations": {EXTRACTED_DIGEST_ANNOTATION: digest} if extracted else {}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "volumeName": "gkm-test-absent-pv",
                 "resources": {"requests": {"storage": "1Mi"}}},
    }


def create_node_pvcs(kube, namespace, cache, nodes, **kwargs):
    core = client.CoreV1Api(kube)
    names = {}
    for node in nodes:
        body = node_pvc(namespace, cache, node, **kwargs)
        core.create_namespaced_persistent_volume_claim(namespace, body)
        names[node] = body["metadata"]["name"]
    return names


def wait_until(what, check, timeout=60, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError("timed out after %ss waiting for %s" % (timeout, what))
