"""Fixtures of the real-node tests that give pods a cache's kernel overlay."""

import uuid

import pytest

from tests.helpers.webhook import CertificateFiles, LocalWebhookServer, install


@pytest.fixture(scope="module")
def overlay_webhook(sim, tools_image, tmp_path_factory):
    """The webhook server as a local process told the tools image (so it adds the kernel overlay), registered for
    the module's tests; yields the server and its CA (a test reads the server's /metrics)."""
    suffix = uuid.uuid4().hex[:6]
    certs = CertificateFiles(str(tmp_path_factory.mktemp("real-overlay")))
    server = LocalWebhookServer(sim.kubeconfig, certs.cert_file, certs.key_file,
                                extra_args=["--tools-image", tools_image])
    hook = {"name": "ro-" + suffix, "namespace": "gkm-ro-" + suffix}
    try:
        server.start().wait_ready(certs.ca)
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], url=server.url, ca_bundle=certs.ca)
        yield server, certs.ca
    finally:
        install(sim.kubeconfig, name=hook["name"], namespace=hook["namespace"], state="absent")
        server.stop()
