"""The collection's webhook server as a local process (url endpoint mode: kwok pods run no containers)."""

import json
import os
import ssl
import sys

from ansible_collections.gkm.cluster.plugins.module_utils.common import tls
from simcluster import api
from simcluster.state_dir import (
    KUBECONFIG,
    ROOT,
    SIM_DIR,
    is_recorded_running,
    load_state,
    port,
    start_process,
    stop_process,
    stop_recorded,
    wait_for,
    write_file,
)

SERVER_MODULE = "ansible_collections.gkm.cluster.plugins.module_utils.webhook.server.main"


def _certificates(directory):
    """The server's CA and serving pair for 127.0.0.1, made once per state directory."""
    paths = {name: os.path.join(directory, name) for name in ("ca.crt", "tls.crt", "tls.key")}
    if not all(os.path.exists(path) for path in paths.values()):
        ca_cert, ca_key = tls.new_ca("gkm-sim-webhook-ca")
        cert, key = tls.new_signed_cert(ca_cert, ca_key, "127.0.0.1", ip_addresses=["127.0.0.1"])
        for name, content in (("ca.crt", ca_cert), ("tls.crt", cert), ("tls.key", key)):
            write_file(paths[name], content)
    return paths


def up(dry_run, default_mount_mode):
    """Run the webhook server here; print its url and CA as JSON (dry_run: start nothing). default_mount_mode: the
    mount mode of a cache without spec.mountMode, the reconcile's own (caches_mount_mode).

    The API server reaches it through clientConfig.url, so its certificate names 127.0.0.1.
    """
    state = load_state()
    directory = os.path.join(SIM_DIR, "webhook")
    os.makedirs(directory, exist_ok=True)
    paths = _certificates(directory)
    with open(paths["ca.crt"]) as handle:
        ca_bundle = handle.read()
    listen = "127.0.0.1:%d" % port(state, "webhook")
    argv = [sys.executable, "-m", SERVER_MODULE, "--cert-file", paths["tls.crt"], "--key-file", paths["tls.key"],
            "--listen", listen, "--kubeconfig", KUBECONFIG, "--default-mount-mode", default_mount_mode]
    running = is_recorded_running(state, "webhook")
    # A server started with other options (another default mount mode) is replaced, not reused as it is.
    current = running and state["processes"]["webhook"].get("argv") == argv
    if not dry_run:
        if running and not current:
            stop_process("webhook", state["processes"].pop("webhook"))
        if not current:
            environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".cache", "collections"))
            start_process(state, "webhook", argv, environment)
        context = ssl.create_default_context(cafile=paths["ca.crt"])
        wait_for("the webhook server", lambda: api.http_ok("https://%s/readyz" % listen, context), 30, ["webhook"],
                 state)
    print(json.dumps({"changed": not current, "url": "https://%s/mutate" % listen, "ca_bundle": ca_bundle}))


def down():
    print(json.dumps({"changed": stop_recorded("webhook")[1]}))
