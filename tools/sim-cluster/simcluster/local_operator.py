"""The collection's operator as a local process: the kopf controller against the kubeconfig (out of cluster; its
command line in operator_plan.py), for the simulated cluster without real nodes, where no pod runs a container."""

import json
import os
import re
import sys

from simcluster import api, operator_plan
from simcluster.pki import ensure_pki
from simcluster.state_dir import (
    KUBECONFIG,
    LOG_DIR,
    ROOT,
    is_recorded_running,
    load_state,
    start_process,
    stop_recorded,
    wait_for,
)

# The controller's line once it holds the Lease and every watched kind is listed (controller/gkm_controller/main.py).
READY_LINE = re.compile(r"gkm_controller: ready: ")
READY_TIMEOUT_SECONDS = 120


def _ready_since(log_path, offset):
    with open(log_path, encoding="utf-8", errors="replace") as handle:
        handle.seek(offset)
        return bool(READY_LINE.search(handle.read()))


def up(tools_image, given_options):
    """Run the controller here, after applying the GKM CRDs and creating its namespace; print whether it started as
    JSON once it is ready. tools_image: the extraction Jobs' image (default: the recorded tools image);
    given_options: its distribution options, JSON (the gkm role passes the in-cluster operator's)."""
    state = load_state()
    pki = ensure_pki(state)
    running = is_recorded_running(state, "operator")
    if not running:
        api.apply_crds(state, pki, os.path.join(ROOT, "roles", "gkm", "files", "crds"))
        api.create_if_missing(state, pki, "/api/v1/namespaces",
                              {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": operator_plan.NAMESPACE}})
        tools_image = tools_image or state.get("tools_image") or "%s/gkm-cluster/tools:sim" % state["registry"]
        log_path = os.path.join(LOG_DIR, "operator.log")
        offset = os.path.getsize(log_path) if os.path.exists(log_path) else 0
        start_process(state, "operator", operator_plan.argv(
            sys.executable, KUBECONFIG, operator_plan.NAMESPACE, tools_image,
            operator_plan.options(json.loads(given_options or "{}"))), operator_plan.environment(os.environ, ROOT))
        wait_for("the operator", lambda: _ready_since(log_path, offset), READY_TIMEOUT_SECONDS, ["operator"], state)
    print(json.dumps({"changed": not running}))


def down():
    print(json.dumps({"changed": stop_recorded("operator")[1]}))
