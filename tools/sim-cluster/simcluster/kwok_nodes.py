"""kwok and the simulated nodes it keeps alive: its configuration and stages, and the kwok Node objects."""

import concurrent.futures
import os

import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SIM_NODE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes
from simcluster import api
from simcluster.state_dir import SIM_DIR, wait_for, write_file

# Simulated nodes report every 60-90 s instead of kwok's 20-45 s: with 500 nodes the heartbeats alone
# kept the API server a third busy and skewed every benchmark. The node lifecycle controller's grace
# period is raised to match, so no node is marked NotReady between two heartbeats. kwok starts a stage's delay
# again whenever the node changes, so a node whose labels a test writes every few seconds reports only when the
# controller marks it Unknown at the grace period, and is tainted unreachable for a moment: the planner does not
# count such condition taints (scheduling.py), as on a real cluster where a heartbeat can be late.
# $GKM_SIM_HEARTBEAT_SECONDS stretches the interval further for thousands of nodes (jitter and grace scale with it).
HEARTBEAT_SECONDS = int(os.environ.get("GKM_SIM_HEARTBEAT_SECONDS", "60"))
HEARTBEAT_DELAY = {"durationMilliseconds": HEARTBEAT_SECONDS * 1000,
                   "jitterDurationMilliseconds": HEARTBEAT_SECONDS * 1500}
NODE_MONITOR_GRACE_PERIOD = "%ds" % (HEARTBEAT_SECONDS * 3)


def write_config():
    """kwok reads its stages from Stage objects in the cluster, so tests can add their own."""
    path = os.path.join(SIM_DIR, "kwok.yaml")
    write_file(path, yaml.safe_dump({
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {"enableCRDs": ["Stage"]},
    }), 0o644)
    return path


def apply_stages(state, pki, binaries):
    """The Stage CRD and kwok's fast node and pod stages (Job pods Succeed, others Run)."""
    documents = api.yaml_documents(os.path.join(binaries, "kwok-stages"))
    crds = [doc for doc in documents if doc["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        api.create_if_missing(state, pki, api.CRDS_PATH, crd)
    wait_for("the kwok Stage CRD", lambda: api.crd_established(state, pki, crds[0]["metadata"]["name"]), 30)
    for stage in (doc for doc in documents if doc["kind"] == "Stage"):
        if stage["metadata"]["name"] == "node-heartbeat":
            stage["spec"]["delay"] = HEARTBEAT_DELAY
        api.create_if_missing(state, pki, "/apis/kwok.x-k8s.io/v1alpha1/stages", stage)


def list_nodes(state, pki):
    result = api.request(state, pki, "GET", "/api/v1/nodes?labelSelector=%s%%3Dtrue" % SIM_NODE_LABEL)
    return result["items"]


def apply_nodes(state, pki, groups):
    """Create missing simulated nodes and delete those no longer in the list; returns (added, removed)."""
    desired = {node["metadata"]["name"]: node for node in gpu_nodes.render_nodes(groups)}
    existing = {node["metadata"]["name"] for node in list_nodes(state, pki)}
    to_add = [node for name, node in desired.items() if name not in existing]
    to_remove = sorted(existing - set(desired))
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda node: api.create_if_missing(state, pki, "/api/v1/nodes", node), to_add))
        list(pool.map(lambda name: api.delete_if_present(state, pki, "/api/v1/nodes/%s" % name), to_remove))
    return [node["metadata"]["name"] for node in to_add], to_remove


def wait_ready(state, pki, groups, timeout, process_names):
    """Wait until every kwok node of groups is Ready (failing at once if one of process_names exits)."""
    names = {node["metadata"]["name"] for node in gpu_nodes.render_nodes(groups)}

    def ready():
        found = set()
        for node in list_nodes(state, pki):
            conditions = node.get("status", {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                found.add(node["metadata"]["name"])
        return names <= found

    wait_for("nodes Ready", ready, timeout, process_names, state)
