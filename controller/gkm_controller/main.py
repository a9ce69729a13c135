"""ENTRY POINT of the controller (docs/controller-design.md): `python -m gkm_controller.main` with controller/ on the
path (or `python -m controller.gkm_controller.main` from the checkout), the collection importable as
ansible_collections.gkm.cluster.

kopf's operator loop, cluster-wide and standalone (no peering), with this package's handlers and settings; a cache's
create, update, resume and delete run the collection's reconcile (distribute/reconcile.py) over the index, writing
through the deletion guard; the kinds that grow with the nodes and the pods are watched by the controller's own loops
(kind_watch.py, node_watch.py; feed.OWN_WATCHES), and a Node event that passes the filter has the caches it affects
reconciled whole, coalesced over 0.5 s, on an executor of its own; every
--resync-seconds each cache is reconciled again from the index (resync.py: no LIST, no write when nothing differs);
with --capture, each finished pod opted in to capture into a cache the admin allows is captured once (captures.py).
kopf (and with it the node watch and the resync) starts only once this replica holds the Lease gkm-cluster-operator
in the controller's namespace (lease_loop.py); every reconcile's write is checked against the Lease's deadline, a
lost Lease ends the process, and a clean stop (SIGTERM, SIGINT) releases it.

Settings by flag, or by the environment variable each flag names: the Kubernetes access (a kubeconfig and its
context, else the pod's service account, as the collection's programs), the tools image the extraction Jobs run,
and the distribution options the caches role passes to cache_reconcile (roles/caches/vars/main.yml,
caches_reconcile_options), as one JSON object; the probe port, where /healthz answers from the start: this module's
own answer while the replica waits for the Lease, kopf's liveness endpoint once it leads.
"""

import argparse
import copy
import functools
import http.server
import json
import logging
import os
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import kopf

from ansible_collections.gkm.cluster.plugins.module_utils.common.client import api_client_from_kubeconfig
from ansible_collections.gkm.cluster.plugins.module_utils.common.kube import DEFAULT_WORKERS, Kube
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CAPTURE_ANNOTATION
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.index import ClusterIndex
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import DISTRIBUTION_ARG_SPEC
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.render import registry_secrets_namespace

from . import handlers
from .captures import Captures, capture_settings
from .coalesce import Coalescer
from .deletion import deletion_requested
from .feed import OWN_WATCHES, own_watches
from .kind_watch import KindWatch
from .lease import LeaseDeadline, LeaseElector
from .lease_loop import LeaseLoop
from .node_reconciles import NodeReconciles
from .node_watch import NodeWatch
from .reconciles import Reconciler
from .resync import DEFAULT_PERIOD_SECONDS, Resync

LOG = logging.getLogger("gkm_controller")
# What the controller sets itself (the reconcile's state) or a resource's reconcile reports (not how it is done).
NOT_OPTIONS = ("state", "node_details")
# The caches role's defaults where they differ from the module's: a reconcile waits for its Jobs, so the status it
# writes says Extracted (no Job event starts a reconcile yet).
ROLE_DEFAULTS = {"wait": True}
PROBE_PATH = "/healthz"


def distribution_options(given=None, tools_image=None):
    """The options every reconcile gets: DISTRIBUTION_ARG_SPEC's defaults, the caches role's, then `given` (a dict
    of those options), then the tools image as extract_image. Unknown names are refused."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(DISTRIBUTION_ARG_SPEC) | set(given) & set(NOT_OPTIONS))
    if unknown:
        raise ValueError("not a distribution option of the controller: %s" % ", ".join(unknown))
    options = {key: copy.deepcopy(spec.get("default")) for key, spec in DISTRIBUTION_ARG_SPEC.items()
               if key not in NOT_OPTIONS}
    options.update(ROLE_DEFAULTS)
    options.update(given)
    if tools_image:
        options["extract_image"] = tools_image
    return options


def parse_args(argv=None, environ=None):
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog="gkm_controller", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", default=environ.get("KUBECONFIG") or None,
                        help="kubeconfig file (env KUBECONFIG); none: the pod's service account")
    parser.add_argument("--context", default=environ.get("GKM_CONTEXT") or None, help="its context (env GKM_CONTEXT)")
    parser.add_argument("--namespace", default=environ.get("GKM_NAMESPACE") or "gkm-system",
                        help="the controller's namespace, where its Lease is (env GKM_NAMESPACE)")
    parser.add_argument("--identity", default=environ.get("POD_NAME") or "%s-%d" % (socket.gethostname(), os.getpid()),
                        help="this replica's name in the Lease (env POD_NAME; default host name and pid)")
    parser.add_argument("--tools-image", default=environ.get("GKM_TOOLS_IMAGE") or None,
                        help="the image the extraction Jobs run (env GKM_TOOLS_IMAGE)")
    parser.add_argument("--options", default=environ.get("GKM_CACHES_OPTIONS") or "{}",
                        help="distribution options as a JSON object, as the caches role passes them to "
                             "cache_reconcile (env GKM_CACHES_OPTIONS)")
    parser.add_argument("--workers", type=int, default=int(environ.get("GKM_WORKERS") or 8),
                        help="reconciles at once, for kopf's handlers and for the node path each (env GKM_WORKERS)")
    parser.add_argument("--resync-seconds", type=float,
                        default=float(environ.get("GKM_RESYNC_SECONDS") or DEFAULT_PERIOD_SECONDS),
                        help="period of the resync of every cache from the index (env GKM_RESYNC_SECONDS; default "
                             "%d)" % DEFAULT_PERIOD_SECONDS)
    parser.add_argument("--probe-port", type=int, default=int(environ.get("GKM_PROBE_PORT") or 0) or None,
                        help="serve /healthz on this port, for the pod's probes (env GKM_PROBE_PORT; default none)")
    parser.add_argument("--capture", default=environ.get("GKM_CAPTURE") or "",
                        help="capture finished pods opted in with the %s annotation, as a JSON object: repositories "
                             "(cache -> repository), allowed_namespaces, signing_key_file, tag (env GKM_CAPTURE; "
                             "default none; the key's password from env GKM_CAPTURE_KEY_PASSWORD)" % CAPTURE_ANNOTATION)
    parser.add_argument("--verbose", action="store_true", help="log every Node event's decision")
    args = parser.parse_args(argv)
    try:
        args.options = distribution_options(json.loads(args.options), args.tools_image)
    except ValueError as error:  # json.JSONDecodeError is one
        parser.error("--options: %s" % error)
    args.capture_key_password = environ.get("GKM_CAPTURE_KEY_PASSWORD") or None
    try:
        args.capture = capture_settings(args.capture, args.capture_key_password)
    except ValueError as error:
        parser.error("--capture: %s" % error)
    return args


def connection_info(configuration):
    """kopf's credentials from the kubernetes client's Configuration, so kopf and the reconciles reach the API server
    the same way (kopf's own login reads only the default kubeconfig context)."""
    header = (configuration.get_api_key_with_prefix("BearerToken")
              or configuration.get_api_key_with_prefix("authorization"))
    parts = header.split(" ", 1) if header else []
    scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0] if parts else None)
    return kopf.ConnectionInfo(server=configuration.host, ca_path=configuration.ssl_ca_cert,
                               insecure=not configuration.verify_ssl, scheme=scheme, token=token,
                               certificate_path=configuration.cert_file, private_key_path=configuration.key_file)


def build(args, api_client, started=None, lease=None, watch_client=None):
    """(registry, settings, controller, own watches {kind: watch}, resync) for kopf.run, every part wired; lease: the
    LeaseDeadline every reconcile's write is checked against; watch_client: the ApiClient of the own watches (each
    holds a connection open), else api_client. kopf's startup starts the own watches and the resync (once this
    replica leads), its cleanup stops them."""
    started = time.monotonic() if started is None else started
    index = ClusterIndex()
    reconciler = Reconciler(api_client, index, args.options, lease=lease)

    # What the coalescer runs again for a reconcile that ended before its cache settled: the index's copy, unless the
    # cache is gone or being deleted (then only the finalizer writes).
    def held(kind, resource):
        metadata = resource["metadata"]
        current = index.get(kind, metadata["name"], metadata.get("namespace"))
        return None if current is None or deletion_requested(current) else current

    coalescer = Coalescer(reconciler, ThreadPoolExecutor(args.workers, thread_name_prefix="gkm-node"), held=held)

    def ready():
        LOG.info("ready: every watched kind listed into the index, %.1f s after start", time.monotonic() - started)

    captures = Captures(api_client, index, args.capture, args.options, args.capture_key_password,
                        lease) if args.capture else None
    controller = handlers.Controller(index, reconciler, on_ready=ready, recheck=coalescer.follow,
                                     on_pod=captures.pod_changed if captures else None, released=coalescer.submit)
    resync = Resync(index, reconciler, args.resync_seconds, controller.ready, coalescer.follow)
    compatibility = args.options["compatibility"]
    watch_kube = Kube(watch_client or api_client)
    watches = {}
    # Secrets in the system namespace alone when every registry Secret of ours is there (the operator's RBAC then
    # grants no other).
    for kind, (path, selector) in own_watches(registry_secrets_namespace(args.options)).items():
        on_listed = functools.partial(controller.kind_listed, kind)
        if kind == "Node":
            watches[kind] = NodeWatch(watch_kube, index, path, NodeReconciles(index, coalescer.submit, compatibility),
                                      coalescer.submit, compatibility, on_listed=on_listed)
        else:
            watches[kind] = KindWatch(watch_kube, index, kind, path, coalescer.submit, selector, compatibility,
                                      on_event=controller.pod_event if kind == "Pod" else None, on_listed=on_listed)
    registry = handlers.register(kopf.OperatorRegistry(), controller)

    def login(**_):
        return connection_info(api_client.configuration)

    def start_loops(**_):
        for watch in watches.values():
            watch.start()
        resync.start()

    def stop_loops(**_):
        for watch in watches.values():
            watch.stop()
        resync.stop()
        coalescer.stop()
        if captures:
            captures.stop()

    kopf.on.login(registry=registry)(login)
    kopf.on.startup(registry=registry)(start_loops)
    kopf.on.cleanup(registry=registry)(stop_loops)
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    settings.execution.max_workers = args.workers
    return registry, settings, controller, watches, resync


class _Alive(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # the name http.server calls
        self.send_response(200 if self.path == PROBE_PATH else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_args):  # a probe every few seconds is not worth a log line
        pass


def follower_probe(port):
    """/healthz on `port` while this replica waits for the Lease (kopf, which serves it once the replica leads, is not
    started before): a waiting replica is alive, and ready to take over. The server, to shut down, or None."""
    if not port:
        return None
    server = http.server.ThreadingHTTPServer(("", port), _Alive)
    threading.Thread(target=server.serve_forever, name="gkm-probe", daemon=True).start()
    return server


def lead(args, api_client, exit=os._exit):
    """Wait until this replica holds the Lease (the loop goes on in a thread of its own); the LeaseLoop."""
    leading = threading.Event()
    probe = follower_probe(args.probe_port)

    def lost(reason):
        LOG.error("stopping at once: %s", reason)
        logging.shutdown()
        exit(1)

    loop = LeaseLoop(Kube(api_client), LeaseElector(args.identity, args.namespace, LeaseDeadline()), leading.set, lost)
    threading.Thread(target=loop.run, name="gkm-lease", daemon=True).start()
    LOG.info("%s waits for the Lease in %s", args.identity, args.namespace)
    leading.wait()
    if probe:
        # kopf's liveness endpoint takes the port: the probes' failure threshold covers the moment between.
        probe.shutdown()
        probe.server_close()
    return loop


def main(argv=None):
    started = time.monotonic()
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # kopf logs every event handler's success: a line per event of its kinds. Its warnings and errors stay.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    # And the probes' requests to kopf's liveness endpoint, one every few seconds.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if args.verbose:
        logging.getLogger("kopf.objects").setLevel(logging.INFO)
        logging.getLogger("controller").setLevel(logging.DEBUG)
        logging.getLogger("gkm_controller").setLevel(logging.DEBUG)
    # Up to `workers` reconciles at once, each sending up to DEFAULT_WORKERS requests at once.
    api_client = api_client_from_kubeconfig(args.kubeconfig, args.context, workers=args.workers * DEFAULT_WORKERS)
    loop = lead(args, api_client)
    # Each own watch holds a connection open: a pool of their own, so none takes the reconciles'.
    watch_client = api_client_from_kubeconfig(args.kubeconfig, args.context, workers=len(OWN_WATCHES))
    registry, settings, _controller, _watches, _resync = build(args, api_client, started, lease=loop.elector.deadline,
                                                               watch_client=watch_client)
    LOG.info("starting: tools image %s, %d workers", args.options.get("extract_image") or "(none)", args.workers)
    liveness = "http://0.0.0.0:%d%s" % (args.probe_port, PROBE_PATH) if args.probe_port else None
    # identity: kopf's own default asks the passwd database, where the image's uid 1000 has no entry.
    kopf.run(registry=registry, settings=settings, standalone=True, clusterwide=True, liveness_endpoint=liveness,
             identity=args.identity)
    loop.release()


if __name__ == "__main__":
    main()
