# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Write the node readiness labels (node_readiness.py) after a reconcile: one merge patch per node whose label
differs, none when they all match."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.distribute import node_readiness

MERGE_PATCH = "application/merge-patch+json"


def label_nodes(kube, spec, entries, nodes):
    """Label the nodes ready for the cache and unlabel the others; returns [{node, value}] written (value None:
    removed). `nodes` are the cluster's nodes when the cache is present; for an absent cache the labelled nodes
    are listed here."""
    key = node_readiness.label_key(spec.name, spec.cache_namespace)
    if spec.state != "present":
        nodes = kube.list("Node", label_selector=key, metadata_only=True)
    changes = node_readiness.label_changes(nodes, key, node_readiness.ready_labels(spec, entries))
    results = kube.map(lambda change: kube.request(
        "PATCH", "/api/v1/nodes/%s" % change[0], body={"metadata": {"labels": {key: change[1]}}},
        content_type=MERGE_PATCH, what="node %s label %s" % (change[0], key)), changes)
    failures = [result for result in results if isinstance(result, Exception)]
    if failures:
        raise failures[0]
    return [{"node": name, "value": value} for name, value in changes]
