"""The webhook server's bounds (issue 31, class 11): every LIST it sends is paged, and a request body larger than
any AdmissionReview the API server sends is refused with 413 before it is read whole. The server runs as a local
process (tests/helpers/webhook.py), its log at debug level: the log records each LIST request the server sends."""

import http.client
import json
import re
import ssl

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import resource_path
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KINDS,
    GROUP,
    NODE_KINDS,
    VERSION,
)
from tests.helpers.webhook import CertificateFiles, LocalWebhookServer

pytestmark = pytest.mark.cluster

MIB = 1024 * 1024
# Every collection the server lists and watches (webhook/server/sync.py).
LISTED = {resource_path("PersistentVolumeClaim"), resource_path("Node")} | {
    "/apis/%s/%s/%s" % (GROUP, VERSION, plural) for plural in
    [CACHE_KINDS[kind][0] for kind in CACHE_KINDS] + [NODE_KINDS[kind][1] for kind in NODE_KINDS]}


@pytest.fixture
def server(sim, tmp_path):
    certs = CertificateFiles(str(tmp_path))
    local = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file,
                               extra_args=["--log-level", "DEBUG"]).start()
    try:
        local.wait_ready(certs.ca)
        yield local, certs
    finally:
        local.stop()


def list_requests(log_path):
    """(path, query) of each LIST the server's log records."""
    with open(log_path, encoding="utf-8", errors="replace") as log:
        return re.findall(r"gkm\.kube: GET (/\S+)\?(\S*)$", log.read(), re.MULTILINE)


def test_every_list_the_server_sends_is_paged(server):
    local, _certs = server
    requests = list_requests(local.log_path)
    paged = {path for path, query in requests if re.search(r"(^|&)limit=\d+(&|$)", query)}
    assert paged >= LISTED, "unpaged or missing LISTs: %s (log %s)" % (sorted(LISTED - paged), local.log_path)
    assert all(path in paged for path, _query in requests)


def post_body(port, ca, body):
    """The HTTP status the server answers a POST of body to /mutate with (None when it closed the connection
    without an answer while the body was still being sent)."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(cadata=ca),
                                             timeout=30)
    try:
        connection.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        return connection.getresponse().status
    except (BrokenPipeError, ConnectionResetError):
        return None
    finally:
        connection.close()


def review_of_size(size):
    """A syntactically valid AdmissionReview of a pod CREATE, padded by an annotation to `size` bytes."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "bounds", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "default",
        "operation": "CREATE", "object": {"metadata": {"name": "big", "annotations": {"pad": ""}},
                                          "spec": {"containers": [{"name": "main", "image": "pause"}]}}}}
    padding = size - len(json.dumps(review).encode())
    review["request"]["object"]["metadata"]["annotations"]["pad"] = "x" * padding
    body = json.dumps(review).encode()
    assert len(body) == size
    return body


def test_a_4_mib_body_is_refused_with_413(server):
    local, certs = server
    assert post_body(local.port, certs.ca, review_of_size(4 * MIB)) == 413
    # The server goes on answering.
    assert post_body(local.port, certs.ca, review_of_size(64 * 1024)) == 200
