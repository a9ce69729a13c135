"""Shared pieces of the platform-role integration tests: stand-in manifests, cleanup, ownership records."""

import contextlib
import functools
import http.server
import json
import os
import threading
import time
import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube as kube_access
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import sim_nodes

STANDINS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "standins")


def standin(tmp_path, name, version):
    """The stand-in's objects with the version filled in, written as a multi-document manifest the role reads."""
    with open(os.path.join(STANDINS, name)) as handle:
        objects = yaml.safe_load(handle.read().replace("__VERSION__", version))["items"]
    path = tmp_path / ("%s-%s" % (version, name))
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return str(path), objects


@pytest.fixture(scope="module")
def plain_node(kube):
    """One untainted worker, so the stand-in Deployments' pods have a node (the default nodes are tainted)."""
    kube_raw = kube_access.Kube(kube)
    sim_nodes.reconcile(kube_raw, [{"name": "gkmt-platform-cpu", "count": 1, "vendor": "none"}],
                        scope="roles-platform")
    yield
    sim_nodes.reconcile(kube_raw, [], scope="roles-platform")


def delete_objects(kube, objects):
    """Remove whatever a test left of a stand-in, and wait until the CRDs and namespace are gone."""
    raw = kube_access.Kube(kube)
    for obj in reversed(objects):
        kind, metadata = obj["kind"], obj["metadata"]
        prefix = "/api/v1" if obj["apiVersion"] == "v1" else "/apis/%s" % obj["apiVersion"]
        plural = {"Namespace": "namespaces", "CustomResourceDefinition": "customresourcedefinitions",
                  "Deployment": "deployments",
                  "ValidatingWebhookConfiguration": "validatingwebhookconfigurations"}[kind]
        path = "%s/%s%s/%s" % (prefix, "namespaces/%s/" % metadata["namespace"] if metadata.get("namespace") else "",
                               plural, metadata["name"])
        raw.request("DELETE", path)
    # A CRD goes only after the API server's finalizer has torn down its storage, which took over 120 s once in a
    # full suite run on 2 cores; polling costs nothing when it is quick.
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        left = [obj for obj in objects if obj["kind"] in ("Namespace", "CustomResourceDefinition")
                and raw.request("GET", "/api/v1/namespaces/%s" % obj["metadata"]["name"] if obj["kind"] == "Namespace"
                                else "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/%s"
                                % obj["metadata"]["name"])[0] != 404]
        if not left:
            return
        time.sleep(0.5)
    raise AssertionError("stand-in objects not gone: %s" % [obj["metadata"]["name"] for obj in left])


@pytest.fixture
def ownership_namespace(kube):
    name = "gkmt-own-%s" % uuid.uuid4().hex[:6]
    yield name
    try:
        client.CoreV1Api(kube).delete_namespace(name)
    except ApiException as error:
        assert error.status == 404


def record(kube, namespace, component="cert-manager"):
    try:
        configmap = client.CoreV1Api(kube).read_namespaced_config_map("gkm-cluster-ownership", namespace)
    except ApiException as error:
        assert error.status == 404
        return None
    text = (configmap.data or {}).get(component)
    return json.loads(text) if text else None


def crd_exists(kube, name):
    try:
        client.ApiextensionsV1Api(kube).read_custom_resource_definition(name)
        return True
    except ApiException as error:
        assert error.status == 404
        return False


def create_objects(kube, objects):
    """Create a stand-in's objects directly, as another tool would have installed them."""
    raw = kube_access.Kube(kube)
    for obj in objects:
        if obj["kind"] == "Namespace":
            path = "/api/v1/namespaces"
        elif obj["kind"] == "CustomResourceDefinition":
            path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        else:
            path = "/apis/apps/v1/namespaces/%s/deployments" % obj["metadata"]["namespace"]
        raw.request("POST", path, body=obj)


class _QuietFileHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # a test's output stays readable
        pass


@contextlib.contextmanager
def serve_directory(directory):
    """An HTTP server on loopback serving directory, as a release download site; yields its base URL."""
    handler = functools.partial(_QuietFileHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
