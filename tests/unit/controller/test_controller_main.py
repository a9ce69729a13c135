"""The controller's entry point (controller/gkm_controller/main.py): its settings from flags and the environment,
the distribution options every reconcile gets, kopf's credentials from the client's configuration, and the wiring.

kopf 1.45.2 is pinned in requirements/dev.txt for Python 3.11 and later; without it this file skips."""

import json
import os
import socket
import urllib.error
import urllib.request

import pytest

kopf = pytest.importorskip("kopf")

from kubernetes import client  # noqa: E402

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs.args import (  # noqa: E402
    DISTRIBUTION_ARG_SPEC,
)
from controller.gkm_controller import main  # noqa: E402
from controller.gkm_controller.feed import MANAGED_SELECTOR, OWN_WATCHES  # noqa: E402
from controller.gkm_controller.lease import LeaseDeadline  # noqa: E402
from controller.gkm_controller.reconciles import Reconciler  # noqa: E402


def test_options_are_the_modules_defaults_with_the_roles_wait_then_the_given_ones_then_the_tools_image():
    options = main.distribution_options({"registry_plain_http": True, "wait_timeout": 120}, "reg/tools:1")
    assert set(options) == set(DISTRIBUTION_ARG_SPEC) - {"state", "node_details"}
    assert options["wait"] is True and options["wait_timeout"] == 120 and options["registry_plain_http"] is True
    assert options["extract_image"] == "reg/tools:1" and options["compatibility"] == "skip"
    assert options["registry_auth_hosts"] == [] and options["registry_auth_hosts"] is not (
        DISTRIBUTION_ARG_SPEC["registry_auth_hosts"]["default"])  # a copy: no reconcile edits the spec
    with pytest.raises(ValueError, match="node_details, nope, state"):
        main.distribution_options({"nope": 1, "state": "absent", "node_details": True})


def test_flags_fall_back_to_the_environment():
    environ = {"KUBECONFIG": "/k", "GKM_TOOLS_IMAGE": "reg/tools:2", "GKM_WORKERS": "3",
               "GKM_CACHES_OPTIONS": '{"serving_pvc": false}'}
    args = main.parse_args([], environ)
    assert (args.kubeconfig, args.context, args.workers, args.namespace) == ("/k", None, 3, "gkm-system")
    assert args.probe_port is None and main.parse_args([], dict(environ, GKM_PROBE_PORT="6789")).probe_port == 6789
    assert args.identity.endswith("-%d" % os.getpid())  # out of a pod: host name and pid, unique on the machine
    assert main.parse_args([], dict(environ, POD_NAME="gkm-operator-x", GKM_NAMESPACE="ops")).identity == (
        "gkm-operator-x")
    assert args.options["extract_image"] == "reg/tools:2" and args.options["serving_pvc"] is False
    args = main.parse_args(["--kubeconfig", "/other", "--tools-image", "t:3", "--workers", "2"], environ)
    assert (args.kubeconfig, args.options["extract_image"], args.workers) == ("/other", "t:3", 2)
    with pytest.raises(SystemExit):
        main.parse_args(["--options", '{"state": "absent"}'], {})
    with pytest.raises(SystemExit):
        main.parse_args(["--options", "not json"], {})


def test_a_waiting_replica_answers_its_probes_and_frees_the_port_for_kopf():
    assert main.follower_probe(None) is None
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = main.follower_probe(port)
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=5) as answer:
            assert answer.status == 200
        with pytest.raises(urllib.error.HTTPError) as other:
            urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5)
        assert other.value.code == 404
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as again:  # what kopf's liveness endpoint does once the replica leads
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("0.0.0.0", port))


def test_kopf_reaches_the_api_server_as_the_client_does():
    configuration = client.Configuration(host="https://127.0.0.1:6443")
    configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file = "/ca", "/crt", "/key"
    info = main.connection_info(configuration)
    assert (info.server, info.ca_path, info.certificate_path, info.private_key_path, info.token, info.insecure) == (
        "https://127.0.0.1:6443", "/ca", "/crt", "/key", None, False)
    configuration.api_key = {"authorization": "Bearer abc"}
    info = main.connection_info(configuration)
    assert (info.scheme, info.token) == ("Bearer", "abc")


def test_build_wires_the_reconciler_the_node_path_and_kopfs_settings():
    args = main.parse_args(["--tools-image", "t:1", "--workers", "4"], {})
    deadline = LeaseDeadline()
    registry, settings, controller, watches, resync = main.build(args, client.ApiClient(), lease=deadline)
    nodes = watches["Node"]
    assert isinstance(controller.reconcile, Reconciler) and controller.reconcile.options == args.options
    assert controller.reconcile.lease is deadline  # every reconcile's write is checked against the Lease
    assert nodes.node_changed.submit.__self__.run is controller.reconcile  # the coalescer runs the reconciler
    assert nodes.relister.submit.__self__.run is controller.reconcile  # and the caches of vanished nodes
    assert nodes.index is controller.index
    # one retry path: kopf's handlers, the node path and the resync all hand an unsettled cache to the coalescer
    assert controller.recheck == resync.follow == nodes.node_changed.submit.__self__.follow
    assert resync.reconcile is controller.reconcile and resync.ready is controller.ready
    assert resync.period == 300 and main.parse_args(["--resync-seconds", "2"], {}).resync_seconds == 2
    assert main.parse_args([], {"GKM_RESYNC_SECONDS": "30"}).resync_seconds == 30
    assert settings.execution.max_workers == 4 and settings.persistence.finalizer == "gkm.io/cache-cleanup"
    # the login, and the own watches started and stopped with kopf (which starts once this replica leads)
    assert len(registry._activities.get_all_handlers()) == 3
    assert list(watches) == list(OWN_WATCHES) and all(watch.index is controller.index for watch in watches.values())
    assert watches["Job"].label_selector == MANAGED_SELECTOR and watches["PersistentVolumeClaim"].label_selector is None
    assert watches["Pod"].on_event == controller.pod_event and watches["Job"].on_event is None
    assert watches["Secret"].path == "/api/v1/secrets"  # Secrets may live in any cache's namespace
    narrowed = main.parse_args(["--options", json.dumps({"system_namespace_jobs": True, "create_pvs": "always",
                                                         "system_namespace": "gkm-ops"})], {})
    assert main.build(narrowed, client.ApiClient())[3]["Secret"].path == "/api/v1/namespaces/gkm-ops/secrets"
    controller.watched("Namespace", {"type": None, "object": {"metadata": {"name": "default"}}})
    for kind, watch in watches.items():
        assert not controller.ready.is_set(), kind  # every own watch's first listing is waited for
        watch.on_listed()
    assert controller.ready.is_set()
