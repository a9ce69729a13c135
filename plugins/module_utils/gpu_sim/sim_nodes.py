# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make a cluster's simulated GPU nodes match a declarative list of node groups (gpu_nodes.py renders them).

Two modes:

- ``create`` (kwok): nodes are whole objects we own. Missing nodes are created, nodes no longer in the
  list are deleted, nodes whose labels or taints drifted are re-applied, and a node whose GPU capacity
  changed is replaced (a simulated node swap: capacity lives in the status, which we only set at creation).
- ``patch`` (kind, or any cluster whose nodes exist already): each group names its nodes in ``node_names``;
  only their labels and taints (server-side apply on the Node) and their GPU capacity (server-side apply on
  the status subresource, as a device plugin would report it) are set. Nodes are never created or deleted.

Writes go through kube.Kube (field manager gkm.cluster), so a run with nothing to do writes nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ansible_collections.gkm.cluster.plugins.module_utils.common import kube as kube_access
from ansible_collections.gkm.cluster.plugins.module_utils.common.errors import GkmError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    SIM_NODE_LABEL,
    SIM_SCOPE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

# Patch mode applies as its own field manager: nodes it patches may carry fields that another apply as
# "gkm.cluster" owns (sim_nodes' create mode, for one), and applying under that name would drop them.
PATCH_FIELD_MANAGER = "gkm.cluster-node-patch"
# With a scope, only the nodes carrying this label with the scope's value are listed, compared and pruned.
# Labels the kubelet (or kwok) owns; patch mode never sets them.
KUBELET_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", "type")
# Taints the node lifecycle controller adds and removes by itself; never compared, always kept.
CONTROLLER_TAINT_PREFIX = "node.kubernetes.io/"
POLL_SECONDS = 0.5


class SimNodesError(GkmError, ValueError):
    """The node list cannot be reconciled; the message names the group or node and the fix."""


def _gpu_capacity(node):
    capacity = (node.get("status") or {}).get("capacity") or {}
    return {key: str(value) for key, value in capacity.items() if key.endswith("/gpu")}


def _our_taints(node):
    return [taint for taint in (node.get("spec") or {}).get("taints") or []
            if not taint["key"].startswith(CONTROLLER_TAINT_PREFIX)]


def _taint_key(taint):
    return taint["key"], taint.get("value") or "", taint["effect"]


def _owned_labels(node, manager):
    """Label keys a field manager set on the node (from managedFields), so dropped labels can be removed."""
    owned = set()
    for entry in node["metadata"].get("managedFields") or []:
        if entry.get("manager") != manager or entry.get("subresource"):
            continue
        labels = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        owned.update(key[2:] for key in labels if key.startswith("f:"))
    return owned


def desired_patch_node(name, group):
    """The Node as patch mode wants it: gpu_nodes' rendering without kubelet- and kwok-owned fields."""
    rendered = gpu_nodes.render_node(name, group)
    labels = {key: value for key, value in rendered["metadata"]["labels"].items() if key not in KUBELET_LABELS}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": rendered.get("spec", {}).get("taints") or []},
        "status": {"capacity": _gpu_capacity(rendered)},
    }


def desired_nodes(groups, mode, scope=None):
    """name -> desired Node, in list order; raises SimNodesError naming what is wrong."""
    if scope:
        groups = [dict(group, labels=dict(group.get("labels") or {}, **{SIM_SCOPE_LABEL: scope})) for group in groups]
    try:
        if mode == "create":
            return dict((node["metadata"]["name"], node) for node in gpu_nodes.render_nodes(groups))
        desired = {}
        for index, group in enumerate(groups):
            gpu_nodes.render_node("probe", group)  # validates vendor and counts with gpu_nodes' messages
            names = group.get("node_names")
            if not names:
                raise SimNodesError("node group %r (index %d): patch mode needs 'node_names', the existing nodes "
                                    "this group describes" % (group.get("name"), index))
            for name in names:
                if name in desired:
                    raise SimNodesError("node %r is named by two node groups" % name)
                desired[name] = desired_patch_node(name, group)
        return desired
    except gpu_nodes.NodeSpecError as error:
        raise SimNodesError(str(error)) from error


def node_drift(desired, live, manager):
    """What differs between a desired and a live node: a set of 'labels', 'taints', 'capacity'."""
    drift = set()
    live_labels = live["metadata"].get("labels") or {}
    want_labels = desired["metadata"].get("labels") or {}
    if any(live_labels.get(key) != value for key, value in want_labels.items()):
        drift.add("labels")
    if _owned_labels(live, manager) - set(want_labels) - set(KUBELET_LABELS):
        drift.add("labels")
    want_taints = sorted(_taint_key(taint) for taint in (desired.get("spec") or {}).get("taints") or [])
    if want_taints != sorted(_taint_key(taint) for taint in _our_taints(live)):
        drift.add("taints")
    if _gpu_capacity(desired) != _gpu_capacity(live):
        drift.add("capacity")
    return drift


def plan(desired, live_nodes, mode, prune, manager):
    """Actions per node name: create, replace, update (labels/taints), status (capacity), delete."""
    live = dict((node["metadata"]["name"], node) for node in live_nodes)
    actions = {"create": [], "replace": [], "update": [], "status": [], "delete": [], "unchanged": []}
    for name, node in desired.items():
        if name not in live:
            if mode == "patch":
                raise SimNodesError("node %r does not exist; patch mode only changes existing nodes (for kind: "
                                    "check gpu_sim_kind_workers against the node groups)" % name)
            actions["create"].append(name)
            continue
        drift = node_drift(node, live[name], manager)
        if mode == "create" and "capacity" in drift:
            actions["replace"].append(name)
            continue
        if drift & {"labels", "taints"}:
            actions["update"].append(name)
        if mode == "patch" and "capacity" in drift:
            actions["status"].append(name)
        if not drift:
            actions["unchanged"].append(name)
    if mode == "create" and prune:
        actions["delete"] = sorted(name for name in live if name not in desired)
    return actions


def _metadata_and_spec(desired, live):
    """The apply body for labels and taints, keeping the lifecycle controller's own taints."""
    taints = list((desired.get("spec") or {}).get("taints") or [])
    if live is not None:
        taints += [taint for taint in (live.get("spec") or {}).get("taints") or []
                   if taint["key"].startswith(CONTROLLER_TAINT_PREFIX)]
    metadata = {"name": desired["metadata"]["name"], "labels": desired["metadata"].get("labels") or {}}
    if desired["metadata"].get("annotations"):
        metadata["annotations"] = desired["metadata"]["annotations"]
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {"taints": taints}}


def _status_body(desired):
    capacity = _gpu_capacity(desired)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": desired["metadata"]["name"]},
            "status": {"capacity": capacity, "allocatable": dict(capacity)}}


def _apply_as(kube, body, field_manager, subresource=None):
    """Server-side apply of a Node (or its status) as field_manager."""
    name = body["metadata"]["name"]
    path = "/api/v1/nodes/%s%s" % (name, "/" + subresource if subresource else "")
    kube.request("PATCH", path, [("fieldManager", field_manager), ("force", "true")], body,
                 "application/apply-patch+yaml", what="Node %s%s" % (name, " " + subresource if subresource else ""))


def ready_names(kube, label_selector):
    names = set()
    for node in kube.list("Node", label_selector=label_selector):
        conditions = (node.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
            names.add(node["metadata"]["name"])
    return names


def reconcile(kube, groups, mode="create", prune=True, wait=True, timeout=300, scope=None):
    """Make the cluster match groups; returns the module result (without 'diff')."""
    field_manager = kube_access.FIELD_MANAGER if mode == "create" else PATCH_FIELD_MANAGER
    desired = desired_nodes(groups, mode, scope)
    selector = "%s=true" % SIM_NODE_LABEL + (",%s=%s" % (SIM_SCOPE_LABEL, scope) if scope else "")
    if mode == "create":
        live_nodes = kube.list("Node", label_selector=selector)
    else:
        live_nodes = [node for node in kube.list("Node") if node["metadata"]["name"] in desired]
    live = dict((node["metadata"]["name"], node) for node in live_nodes)
    actions = plan(desired, live_nodes, mode, prune, field_manager)

    started = time.monotonic()
    # Check mode rehearses creations and updates as server-side dry runs, but only reports deletions and
    # replacements: a replacement's create would meet the node it replaces, and kube.Kube's DELETE is not
    # reliably a dry run.
    if not kube.dry_run:
        kube.map_all(lambda name: kube.delete("Node", name), actions["delete"] + actions["replace"], "node deletions",
                     SimNodesError)
        leftover = kube.wait_gone([("Node", None, name) for name in actions["replace"]], timeout)
        if leftover:
            raise SimNodesError("nodes still present %ss after deletion: %s" % (timeout, [ref[2] for ref in leftover]))
    recreated = [] if kube.dry_run else actions["replace"]
    kube.map_all(lambda name: kube.apply(desired[name]), actions["create"] + recreated, "node creations",
                 SimNodesError)
    kube.map_all(lambda name: _apply_as(kube, _metadata_and_spec(desired[name], live.get(name)), field_manager),
                 actions["update"], "node label and taint updates", SimNodesError)
    kube.map_all(lambda name: _apply_as(kube, _status_body(desired[name]), field_manager, "status"),
                 actions["status"], "node status updates", SimNodesError)
    if kube.dry_run:
        return _result(actions, desired, kube, None)

    ready_seconds = None
    if wait and mode == "create":
        deadline = started + timeout
        while True:
            missing = set(desired) - ready_names(kube, selector)
            if not missing:
                break
            if time.monotonic() > deadline:
                raise SimNodesError("%d simulated nodes not Ready after %ss (first: %s); is kwok running with "
                                    "--manage-nodes-with-annotation-selector %s=%s?" % (
                                        len(missing), timeout, sorted(missing)[0],
                                        gpu_nodes.KWOK_ANNOTATION, gpu_nodes.KWOK_ANNOTATION_VALUE))
            time.sleep(POLL_SECONDS)
        ready_seconds = round(time.monotonic() - started, 2)
    return _result(actions, desired, kube, ready_seconds)


def _result(actions, desired, kube, ready_seconds):
    return {
        "changed": any(actions[key] for key in ("create", "replace", "update", "status", "delete")),
        "created": actions["create"],
        "replaced": actions["replace"],
        "updated": sorted(set(actions["update"]) | set(actions["status"])),
        "deleted": actions["delete"],
        "unchanged": len(actions["unchanged"]),
        "nodes": [gpu_nodes.node_summary(node) for node in desired.values()],
        "ready_seconds": ready_seconds,
        "api_writes": kube.writes,
    }
