# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The admission webhook's aiohttp application over TLS (webhook/server/main.py runs it): the PVC mutation and
steering, one answer per request (webhook/admission/decide.py).

Decisions come from an in-memory CacheView and SteeringView that server/sync.py keeps current by list+watch of the
managed PVCs, the GKMCache/ClusterGKMCache objects and their per-node objects, and the Nodes; an admission request
never calls the API server. The certificate and key are re-read when their files change, and new TLS connections get
the new pair while open ones finish on the old one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import gc
import json
import logging
import os
import ssl
import time
import traceback

try:
    from aiohttp import web

    AIOHTTP_IMPORT_ERROR = None
except ImportError:
    AIOHTTP_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_kubeconfig
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import PVC
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.decide import decide
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.metrics import CONTENT_TYPE, Metrics
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.sync import ViewSync
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.watched import WatchedCluster

LOG = logging.getLogger("gkm.webhook")

# Above the largest AdmissionReview the API server sent for an object it stores (measured: 3,580,204 bytes, a
# Deployment of 40,000 env entries, whose managedFields repeat each; docs/webhook.md, "Bounds"); any pod may POST.
MAX_BODY_BYTES = 3840 * 1024


# ------------------------------------------------------------------------------------ TLS


def _file_signature(*paths):
    signature = []
    for path in paths:
        stat = os.stat(path)
        signature.append((stat.st_ino, stat.st_mtime_ns, stat.st_size))
    return tuple(signature)


class CertificateReloader:
    """Serves new TLS handshakes with the newest certificate/key pair that loaded cleanly.

    The listening socket keeps one SSLContext whose SNI callback (OpenSSL calls it for every
    ClientHello, with or without SNI) switches the connection to the current context. A pair that
    fails to load, e.g. a certificate written before its key, is retried on the next check and the
    previous pair stays in service meanwhile.
    """

    def __init__(self, cert_file, key_file, metrics):
        self.cert_file = cert_file
        self.key_file = key_file
        self.metrics = metrics
        self._signature = _file_signature(cert_file, key_file)
        self._current = self._load()
        self.listener_context = self._load()
        self.listener_context.sni_callback = self._select_context

    def _load(self):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def _select_context(self, ssl_object, _server_name, _context):
        ssl_object.context = self._current

    def check(self):
        """Reload when the files changed; True when a new pair went into service."""
        try:
            signature = _file_signature(self.cert_file, self.key_file)
        except OSError as error:
            LOG.warning("certificate files unreadable, keeping the current pair: %s", error)
            return False
        if signature == self._signature:
            return False
        try:
            context = self._load()
        except (OSError, ssl.SSLError, ValueError) as error:
            self.metrics.cert_reload_failures += 1
            LOG.warning("changed certificate files did not load (%s); keeping the current pair", error)
            return False
        self._current = context
        self._signature = signature
        self.metrics.cert_reloads += 1
        LOG.info("serving certificate reloaded from %s", self.cert_file)
        return True


# ---------------------------------------------------------------------------------- HTTP


def _json_response(status, body):
    return web.Response(status=status, body=json.dumps(body, separators=(",", ":")).encode(),
                        content_type="application/json")


class WebhookApp:
    """The aiohttp handlers around one CacheView and one SteeringView.

    sync_state() returns {source: synced} ({} before the watches start); /readyz answers 200 only
    when every source has been listed once.
    """

    def __init__(self, view, steering_view, metrics, sync_state, kernel_use=None):
        self.view = view
        self.steering_view = steering_view
        self.metrics = metrics
        self.sync_state = sync_state
        # WatchedCluster.kernel_use, the caches' status.kernelUse rows that /metrics exports.
        self.kernel_use = {} if kernel_use is None else kernel_use

    async def mutate(self, request):
        started = time.perf_counter()
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            self.metrics.observe_request("invalid", time.perf_counter() - started)
            return _json_response(413, {"error": "request body over {0} bytes".format(MAX_BODY_BYTES)})
        try:
            review = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            self.metrics.observe_request("invalid", time.perf_counter() - started)
            return _json_response(400, {"error": "request body is not JSON: {0}".format(error)})
        try:
            decision = decide(review, self.view, self.steering_view)
        except Exception:  # a bug must cost one request, not the server
            LOG.exception("admission failed")
            self.metrics.observe_request("error", time.perf_counter() - started)
            return _json_response(500, {"error": "internal error deciding the admission request"})
        # Denials need an operator's attention; patches are routine and only logged at debug level.
        if decision.outcome == "denied":
            LOG.info("denied: %s", decision.message)
        elif decision.outcome == "patched" and LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("patched: %s", decision.message)
        response = _json_response(decision.http_status, decision.body)
        self.metrics.observe_request(decision.outcome, time.perf_counter() - started)
        return response

    async def readyz(self, _request):
        state = self.sync_state()
        waiting = sorted(name for name, synced in state.items() if not synced)
        if not state or waiting:
            return web.Response(status=503, text="not ready, waiting for: {0}\n".format(
                ", ".join(waiting) or "watches to start"))
        return web.Response(text="ok\n")

    async def healthz(self, _request):
        return web.Response(text="ok\n")

    async def metrics_page(self, _request):
        text = self.metrics.render(self.sync_state(), dict(self.view.counts(), nodes=self.steering_view.node_count()),
                                   self.kernel_use)
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    def application(self):
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/mutate", self.mutate)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics_page)
        return app


def build_app(cert_file, key_file, kubeconfig=None, context=None, cert_check_seconds=1.0, default_mount_mode=PVC,
              tools_image=None):
    """The aiohttp application and the SSLContext to listen with.

    Watches start with the application and stop with it; the certificate files are checked every
    cert_check_seconds. default_mount_mode is the mount mode of a cache without spec.mountMode; tools_image the image
    a pod's kernel overlay runs (the server's own), None for no overlay.
    """
    metrics = Metrics()
    cluster = WatchedCluster(default_mount_mode, tools_image)
    reloader = CertificateReloader(cert_file, key_file, metrics)
    kube = Kube(api_client_from_kubeconfig(kubeconfig, context))
    syncs = []
    handlers = WebhookApp(cluster.claims, cluster.steering, metrics, lambda: dict(syncs[0].synced) if syncs else {},
                          cluster.kernel_use)
    app = handlers.application()

    async def lifecycle(_app):
        # The kubernetes client brings hundreds of thousands of long-lived objects; a full garbage
        # collection walking them all stalls every request in flight for a few hundred ms. Freezing
        # what exists at start-up keeps them out of every later collection.
        gc.collect()
        gc.freeze()
        sync = ViewSync(kube, cluster, metrics, asyncio.get_running_loop())
        syncs.append(sync)
        sync.start()

        async def watch_certificates():
            while True:
                await asyncio.sleep(cert_check_seconds)
                reloader.check()

        checker = asyncio.ensure_future(watch_certificates())
        yield
        checker.cancel()
        sync.stop()

    app.cleanup_ctx.append(lifecycle)
    return app, reloader.listener_context
