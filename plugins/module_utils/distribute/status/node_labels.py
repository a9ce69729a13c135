# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write a cache's node labels after a reconcile (readiness, node_readiness.py; upgrade state, upgrade_waves.py):
one merge patch per node whose label differs, none when they all match."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import (
    readiness_label_key,
    upgrade_state_label_key,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import rollout
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status import node_readiness

MERGE_PATCH = "application/merge-patch+json"


def label_nodes(kube, spec, entries, nodes):
    """Label the nodes ready for the cache and unlabel the others; returns [{node, value}] written (value None:
    removed). `nodes` are the cluster's nodes when the cache is present."""
    key = readiness_label_key(spec.name, spec.cache_namespace)
    return sync_labels(kube, spec, key, node_readiness.ready_labels(spec, entries), nodes)


def sync_labels(kube, spec, key, desired, nodes):
    """Take the nodes' `key` label to `desired` ({node: value}; the others lose it); returns [{node, value}]
    written. For an absent cache the labelled nodes are listed here."""
    if spec.state != "present":
        nodes = kube.list("Node", label_selector=key, metadata_only=True)
    changes = node_readiness.label_changes(nodes, key, desired)
    kube.map_all(lambda change: _patch_label(kube, change[0], key, change[1]), changes, "labelling nodes")
    return [{"node": name, "value": value} for name, value in changes]


def _patch_label(kube, node, key, value):
    """One node's label; recorded as written, so a controller's next plan waits until its index shows it."""
    reply = kube.request("PATCH", "/api/v1/nodes/%s" % node, body={"metadata": {"labels": {key: value}}},
                         content_type=MERGE_PATCH, what="node %s label %s" % (node, key))[1]
    kube.record_write("Node", "", node, ((reply or {}).get("metadata") or {}).get("resourceVersion"))


def label_upgrade_states(kube, spec, waves, nodes):
    """Write the nodes' upgrade state labels, and keep `nodes` (the facts' copies) as written."""
    key = upgrade_state_label_key(spec.name, spec.cache_namespace)
    written = sync_labels(kube, spec, key, rollout.upgrade_states(waves), nodes)
    by_name = {node["metadata"]["name"]: node for node in nodes}
    for change in written:
        if change["node"] not in by_name:
            continue  # an absent cache's nodes are listed by sync_labels itself
        labels = by_name[change["node"]]["metadata"].setdefault("labels", {})
        if change["value"] is None:
            labels.pop(key, None)
        else:
            labels[key] = change["value"]
    return written
