# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The PVC-mutation admission webhook server (aiohttp over TLS).

    python -m ansible_collections.gkm.cluster.plugins.module_utils.webhook.server \\
        --cert-file tls.crt --key-file tls.key [--listen 0.0.0.0:8443] [--kubeconfig PATH [--context NAME]]

Endpoints: POST /mutate (AdmissionReview v1), GET /readyz (200 once the view is synced),
GET /healthz, GET /metrics (Prometheus text).

Decisions come from an in-memory CacheView kept current by list+watch of the managed PVCs and of
GKMCache/ClusterGKMCache objects; an admission request never calls the API server. Watches run in
threads (the kubernetes client is synchronous) and hand their events to the event loop, so the view
is only ever touched by the loop thread. The certificate and key are re-read when their files
change, and new TLS connections get the new pair while open ones finish on the old one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import asyncio
import gc
import json
import logging
import os
import ssl
import sys
import threading
import time
import traceback

try:
    from aiohttp import web

    HAS_AIOHTTP = True
    AIOHTTP_IMPORT_ERROR = None
except ImportError:
    HAS_AIOHTTP = False
    AIOHTTP_IMPORT_ERROR = traceback.format_exc()

try:
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config
    from kubernetes import watch as kube_watch
    from kubernetes.client.exceptions import ApiException

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()

from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission import admit
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.metrics import CONTENT_TYPE, Metrics
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.view import (
    CLUSTER_KIND,
    GKM_GROUP,
    GKM_VERSION,
    MANAGED_PVC_SELECTOR,
    NAMESPACED_KIND,
    CacheView,
)

LOG = logging.getLogger("gkm.webhook")

# The API server caps objects at about 3 MiB; a review carries the object once (twice for updates).
MAX_BODY_BYTES = 8 * 1024 * 1024
WATCH_TIMEOUT_SECONDS = 300
# How often a missing CRD is looked for again, and the back-off bounds after a failed LIST or watch.
ABSENT_RETRY_SECONDS = 15
ERROR_RETRY_SECONDS = (1, 30)


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


# ----------------------------------------------------------------------------- view sync


class _Source:
    """One list+watch of a resource, feeding the view through the event loop."""

    def __init__(self, name, list_call, apply_event, replace, optional):
        self.name = name
        self.list_call = list_call
        self.apply_event = apply_event
        self.replace = replace
        self.optional = optional  # a 404 (CRD not installed) means "none of these yet"


class ViewSync:
    """Keeps a CacheView current with one thread per watched source."""

    def __init__(self, api_client, view, metrics, loop):
        self.view = view
        self.metrics = metrics
        self.loop = loop
        self.synced = {}
        self._stop = threading.Event()
        core = kube_client.CoreV1Api(api_client)
        custom = kube_client.CustomObjectsApi(api_client)

        def custom_lister(plural):
            def call(**kwargs):
                return custom.list_cluster_custom_object(GKM_GROUP, GKM_VERSION, plural, **kwargs)
            return call

        def pvc_list(**kwargs):
            return core.list_persistent_volume_claim_for_all_namespaces(label_selector=MANAGED_PVC_SELECTOR, **kwargs)

        def cache_source(kind, plural):
            return _Source(
                plural,
                custom_lister(plural),
                lambda event_type, obj: view.apply_cache_event(kind, event_type, obj),
                lambda items: view.replace_caches(kind, items),
                optional=True,
            )

        self.sources = [
            _Source("persistentvolumeclaims", pvc_list, view.apply_pvc_event, view.replace_pvcs, optional=False),
            cache_source(NAMESPACED_KIND, "gkmcaches"),
            cache_source(CLUSTER_KIND, "clustergkmcaches"),
        ]
        for source in self.sources:
            self.synced[source.name] = False

    def start(self):
        for source in self.sources:
            threading.Thread(target=self._run, args=(source,), name="watch-" + source.name, daemon=True).start()

    def stop(self):
        self._stop.set()

    def is_synced(self):
        return all(self.synced.values())

    def _on_loop(self, function, *args):
        self.loop.call_soon_threadsafe(function, *args)

    def _mark_synced(self, source):
        if not self.synced[source.name]:
            self.synced[source.name] = True
            LOG.info("view synced: %s", source.name)

    def _run(self, source):
        delay = ERROR_RETRY_SECONDS[0]
        while not self._stop.is_set():
            try:
                resource_version = self._list(source)
                delay = ERROR_RETRY_SECONDS[0]
                if resource_version is None:
                    self._stop.wait(ABSENT_RETRY_SECONDS)
                    continue
                self._watch(source, resource_version)
            except ApiException as error:
                if error.status != 410:  # 410 Gone: the resource version expired, re-LIST at once
                    LOG.warning("watch of %s failed (%s %s); re-listing in %ss",
                                source.name, error.status, error.reason, delay)
                    self._stop.wait(delay)
                    delay = min(delay * 2, ERROR_RETRY_SECONDS[1])
            except Exception as error:  # connection errors of any kind: re-list and go on
                LOG.warning("watch of %s failed (%s); re-listing in %ss", source.name, error, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, ERROR_RETRY_SECONDS[1])
            self._on_loop(self.metrics.count_watch_restart, source.name)

    def _list(self, source):
        """LIST into the view; returns the resource version to watch from, None when the CRD is absent."""
        try:
            response = source.list_call(_preload_content=False, _request_timeout=30)
        except ApiException as error:
            if error.status == 404 and source.optional:
                self._on_loop(source.replace, [])
                self._on_loop(self._mark_synced, source)
                return None
            raise
        listed = json.loads(response.data)
        self._on_loop(source.replace, listed.get("items") or [])
        self._on_loop(self._mark_synced, source)
        return listed["metadata"]["resourceVersion"]

    def _watch(self, source, resource_version):
        watcher = kube_watch.Watch()
        stream = watcher.stream(
            source.list_call,
            resource_version=resource_version,
            timeout_seconds=WATCH_TIMEOUT_SECONDS,
            allow_watch_bookmarks=True,
            deserialize=False,  # the view wants plain dicts; models would cost time for nothing
            _request_timeout=WATCH_TIMEOUT_SECONDS + 30,
        )
        for event in stream:
            if self._stop.is_set():
                watcher.stop()
                return
            event_type = event.get("type")
            if event_type not in ("ADDED", "MODIFIED", "DELETED"):
                continue
            self._on_loop(source.apply_event, event_type, event["object"])
            self._on_loop(self.metrics.count_watch_event, source.name)
        # The watch ended on its timeout: the caller re-lists, which also repairs any missed event.


# ---------------------------------------------------------------------------------- HTTP


def _json_response(status, body):
    return web.Response(status=status, body=json.dumps(body, separators=(",", ":")).encode(),
                        content_type="application/json")


class WebhookApp:
    """The aiohttp handlers around one CacheView.

    sync_state() returns {source: synced} ({} before the watches start); /readyz answers 200 only
    when every source has been listed once.
    """

    def __init__(self, view, metrics, sync_state):
        self.view = view
        self.metrics = metrics
        self.sync_state = sync_state

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
            decision = admit(review, self.view)
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
        text = self.metrics.render(self.sync_state(), self.view.counts())
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    def application(self):
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post("/mutate", self.mutate)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.metrics_page)
        return app


def _api_client(kubeconfig, context):
    if kubeconfig:
        return kube_config.new_client_from_config(config_file=kubeconfig, context=context)
    configuration = kube_client.Configuration()
    kube_config.load_incluster_config(client_configuration=configuration)
    return kube_client.ApiClient(configuration)


def build_app(cert_file, key_file, kubeconfig=None, context=None, cert_check_seconds=1.0):
    """The aiohttp application and the SSLContext to listen with.

    Watches start with the application and stop with it; the certificate files are checked every
    cert_check_seconds.
    """
    metrics = Metrics()
    view = CacheView()
    reloader = CertificateReloader(cert_file, key_file, metrics)
    api_client = _api_client(kubeconfig, context)
    syncs = []
    handlers = WebhookApp(view, metrics, lambda: dict(syncs[0].synced) if syncs else {})
    app = handlers.application()

    async def lifecycle(_app):
        # The kubernetes client brings hundreds of thousands of long-lived objects; a full garbage
        # collection walking them all stalls every request in flight for a few hundred ms. Freezing
        # what exists at start-up keeps them out of every later collection.
        gc.collect()
        gc.freeze()
        sync = ViewSync(api_client, view, metrics, asyncio.get_running_loop())
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


def _parse_listen(value):
    host, _colon, port = value.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="gkm-webhook", description="PVC-mutation admission webhook for gkm.cluster")
    parser.add_argument("--cert-file", required=True, help="PEM serving certificate (reloaded when it changes)")
    parser.add_argument("--key-file", required=True, help="PEM private key of the serving certificate")
    parser.add_argument("--listen", default="0.0.0.0:8443", help="address:port to listen on (default 0.0.0.0:8443)")
    parser.add_argument("--kubeconfig", help="kubeconfig to use; without it the in-cluster service account is used")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--cert-check-seconds", type=float, default=1.0, help="how often to look for new cert files")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # urllib3 logs every connection retry; the watch loop already reports each failure once.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    for missing, error in ((not HAS_AIOHTTP, AIOHTTP_IMPORT_ERROR), (not HAS_KUBERNETES, KUBERNETES_IMPORT_ERROR)):
        if missing:
            sys.stderr.write(error)
            return 2
    host, port = _parse_listen(args.listen)
    app, ssl_context = build_app(args.cert_file, args.key_file, args.kubeconfig, args.context, args.cert_check_seconds)
    LOG.info("listening on https://%s:%d", host, port)
    web.run_app(app, host=host, port=port, ssl_context=ssl_context, access_log=None, print=None,
                shutdown_timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
