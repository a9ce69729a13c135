# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which caches one Node event affects, pure: the operator's Node watch re-reconciles only those.

A cache is affected when what its placement says about the node disagrees with what the cache holds there:
- the node holds objects of the cache (PVCs or PVs labelled with the node) but the placement no longer selects it
  (labels, taints, cordon or its GPU labels changed): the reconcile removes them;
- the placement selects the node, the cache holds nothing there, and the node's per-node status object
  (GKMCacheNode / ClusterGKMCacheNode) does not already say the cache left it out (a node that joined, or
  became placeable): the reconcile distributes to it.
- the node's GPUs (its gkm.io/gpu-* labels, as GKM's status.gpus) differ from those its per-node status object
  recorded at the cache's last reconcile, and the placement selects the node or the cache holds objects there: the
  reconcile judges the new GPUs against the image (a node now compatible gets the cache, one no longer compatible
  loses it).
A GPU node the placement selects whose GPUs the image cannot run stays excluded in its per-node object, so
its heartbeats reconcile nothing. GPU compatibility itself needs the image's targets (a registry read): the
reconcile judges it, not this filter.
Every cache is judged on its own: one whose placement fields cannot be read (a resource written before the CRDs typed
them) is reconciled, so its own run reports the field, and the others are judged as if it were not there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import read_cache
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_LABEL,
    CACHE_NAMESPACE_LABEL,
    INCOMPATIBLE,
    NODE_KINDS,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.scheduling import (
    PlanError,
    placement_problems,
    spec_problems,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_status import EXCLUDED, node_gpus
from ansible_collections.gkm.cluster.plugins.module_utils.oci.gpu_compat import (
    GPUSpecError,
    gpus_from_node_labels,
)

# States of a cache on a node that its reconcile chose; a heartbeat does not change them.
LEFT_OUT = (EXCLUDED, INCOMPATIBLE)


def _cache_key(resource):
    cache = read_cache(resource)
    return cache.name, cache.namespace or ""


def _is_gpu_node(labels):
    try:
        return bool(gpus_from_node_labels(labels))
    except GPUSpecError:
        # Unusable GPU labels: the reconcile reports them on the node; treat it as a GPU node so it does.
        return True


def placement_selects(resource, node, compatibility="skip"):
    """Whether the cache's pod template lets its Job onto the node (and, unless compatibility is ignore, a GPU node)."""
    pod_spec = (read_cache(resource).pod_template or {}).get("spec") or {}
    problems = spec_problems(pod_spec.get("affinity"), pod_spec.get("tolerations"))
    if problems:
        raise PlanError("; ".join(problems), reason="InvalidSpec")
    reasons, _taints = placement_problems(node, pod_spec.get("nodeSelector") or {}, pod_spec.get("affinity"),
                                          pod_spec.get("tolerations") or [])
    return not reasons and (compatibility == "ignore" or _is_gpu_node(node["metadata"].get("labels") or {}))


def _node_status_of(resource, node_statuses):
    """The status of the node's per-node object the cache's reconcile writes (its kind and namespace), or None."""
    namespace = _cache_key(resource)[1]
    node_kind = NODE_KINDS[resource.get("kind")][0]
    for status_object in node_statuses:
        metadata = status_object.get("metadata") or {}
        if status_object.get("kind") == node_kind and (metadata.get("namespace") or "") == namespace:
            return status_object.get("status") or {}
    return None


def _left_out_on_node(resource, status):
    """Whether the node's per-node status says the cache's last reconcile left the node out."""
    digests = ((status or {}).get("caches") or {}).get(_cache_key(resource)[0]) or {}
    return any(state.get("state") in LEFT_OUT for state in digests.values())


def _gpus_changed(resource, node, status):
    """Whether the node's GPUs differ from those recorded when the cache's last reconcile judged the node (a record
    without GPUs compares with nothing)."""
    if status is None or "gpus" not in status or _cache_key(resource)[0] not in (status.get("caches") or {}):
        return False
    return status["gpus"] != node_gpus(node)


def holders(node_objects):
    """(cache, cache namespace) of every object labelled with the node."""
    keys = set()
    for item in node_objects:
        labels = (item.get("metadata") or {}).get("labels") or {}
        if labels.get(CACHE_LABEL):
            keys.add((labels[CACHE_LABEL], labels.get(CACHE_NAMESPACE_LABEL) or ""))
    return keys


def affected_caches(node, resources, node_objects, compatibility="skip", node_statuses=()):
    """The resources (GKMCache / ClusterGKMCache) whose reconcile the node's event calls for, in input order.

    node_objects: the PVCs and PVs labelled with the node; node_statuses: its per-node status objects.
    """
    held = holders(node_objects)
    affected = []
    for resource in resources:
        try:
            touched = _affected(resource, node, held, compatibility, node_statuses)
        except (PlanError, AttributeError, TypeError, ValueError):
            # Its spec cannot be judged here: its own reconcile says why, in its status.
            touched = True
        if touched:
            affected.append(resource)
    return affected


def _affected(resource, node, held, compatibility, node_statuses):
    selected = placement_selects(resource, node, compatibility)
    holds = _cache_key(resource) in held
    status = _node_status_of(resource, node_statuses)
    leaving = holds and not selected
    joining = selected and not holds and not _left_out_on_node(resource, status)
    regpu = (selected or holds) and _gpus_changed(resource, node, status)
    return leaving or joining or regpu
