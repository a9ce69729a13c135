# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which caches one Node event affects, pure: the operator's Node watch re-reconciles only those.

A cache is affected when what its placement says about the node disagrees with what the cache holds there:
- the node holds objects of the cache (PVCs or PVs labelled with the node) but the placement no longer selects it
  (labels, taints, cordon or its GPU labels changed): the reconcile removes them;
- the placement selects the node, the cache holds nothing there, and the cache's last status did not already
  exclude it (a node that joined, or became placeable): the reconcile distributes to it.
A GPU node the placement selects whose GPUs the image cannot run stays excluded in the status, so its
heartbeats reconcile nothing. GPU compatibility itself needs the image's targets (a registry read): the
reconcile judges it, not this filter.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.common.naming import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.scheduling import (
    required_affinity_matches,
    selector_mismatches,
    untolerated_taints,
)
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import (
    GPUSpecError,
    gpus_from_node_labels,
)


def _cache_key(resource):
    metadata = resource.get("metadata") or {}
    namespace = (metadata.get("namespace") or "") if resource.get("kind") == "GKMCache" else ""
    return metadata.get("name"), namespace


def _is_gpu_node(labels):
    try:
        return bool(gpus_from_node_labels(labels))
    except GPUSpecError:
        # Unusable GPU labels: the reconcile reports them on the node; treat it as a GPU node so it does.
        return True


def placement_selects(resource, node, compatibility="skip"):
    """Whether the cache's pod template lets its Job onto the node (and, unless compatibility is ignore, a GPU node)."""
    pod_spec = ((resource.get("spec") or {}).get("podTemplate") or {}).get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if selector_mismatches(labels, pod_spec.get("nodeSelector") or {}):
        return False
    if not required_affinity_matches(node, pod_spec.get("affinity")):
        return False
    if untolerated_taints(node, pod_spec.get("tolerations") or []):
        return False
    return compatibility == "ignore" or _is_gpu_node(labels)


def _excluded_in_status(resource, node_name):
    excluded = ((resource.get("status") or {}).get("excludedNodes")) or []
    return any(node_name in (entry.get("nodes") or []) for entry in excluded)


def holders(node_objects):
    """(cache, cache namespace) of every object labelled with the node."""
    keys = set()
    for item in node_objects:
        labels = (item.get("metadata") or {}).get("labels") or {}
        if labels.get(CACHE_LABEL):
            keys.add((labels[CACHE_LABEL], labels.get(CACHE_NAMESPACE_LABEL) or ""))
    return keys


def affected_caches(node, resources, node_objects, compatibility="skip"):
    """The resources (GKMCache / ClusterGKMCache) whose reconcile the node's event calls for, in input order."""
    name = node["metadata"]["name"]
    held = holders(node_objects)
    affected = []
    for resource in resources:
        selected = placement_selects(resource, node, compatibility)
        holds = _cache_key(resource) in held
        leaving = holds and not selected
        joining = selected and not holds and not _excluded_in_status(resource, name)
        if leaving or joining:
            affected.append(resource)
    return affected
