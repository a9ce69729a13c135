# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""cache_info's report (I/O): each cache's status read back from the cluster, without its spec.

A PVC-mode cache's counts come from its live PVCs and Jobs, and its per-node entries from its per-node objects. An
imageVolume cache leaves no PVC or Job: its resource's status says what its reconcile found (the nodes that pulled
the image, the pods mounting it). Who mounts a cache now (mounted_by, which undeploy's refusal reads) comes from the
live pods, never from what the last reconcile recorded.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.contract.cache_resource import read_cache
from ansible_collections.gkm.cluster.plugins.module_utils.contract.naming import cache_selector, managed_selector
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    CACHE_KINDS,
    GROUP,
    KERNEL_USE_STATUS,
    VERSION,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.errors import DistributeError
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.cluster import list_pods
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.facts.node_objects import (
    node_objects_by_cache,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.inputs import resource as cache_cr
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.planner import pod_mounts
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.cache_status import (
    cache_status,
    group_by_cache,
    slots_from_live,
)
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.image_volume import image_users
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.node_entries import cache_entries
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.status.resource_status import (
    image_volume_report,
)


def describe(kube, name=None, namespace=None):
    """Status of one cache (name, and namespace for a namespaced one) or of every managed cache."""
    selector = cache_selector(name, namespace or "") if name else managed_selector()
    results = kube.map_all(lambda kind: kube.list(kind, label_selector=selector), ("PersistentVolumeClaim", "Job"),
                           "reading the cluster", DistributeError)
    live = {"PersistentVolumeClaim": results[0], "Job": results[1]}
    resources = cache_resources(kube, name, namespace)
    image_volumes = {key: resource for key, resource in resources.items()
                     if (resource.get("status") or {}).get("imageVolume")}
    pods = list_pods(kube, {ns for resource in image_volumes.values() for ns in _workload_namespaces(resource)}, live)
    mounts = pod_mounts(pods)
    # A resource-backed cache's entries come from its per-node objects, which also say why GPU nodes lack it.
    node_objects = node_objects_by_cache(kube, name, namespace)
    groups = group_by_cache(live)
    caches = []
    for key in sorted(set(groups) | set(node_objects) | set(image_volumes)):
        objects = groups.get(key, {})
        if key in image_volumes:
            status = image_volume_report(image_volumes[key]["status"])
            status["mounted_by"] = _image_volume_users(image_volumes[key], pods)
        else:
            slots, nodes = slots_from_live(objects)
            status = cache_status(slots, nodes, [], {}, objects, pods)
            status["mounted_by"] = _claim_users(objects.get("PersistentVolumeClaim", []), mounts)
        if key in node_objects:
            status["entries"] = cache_entries(node_objects[key], key[0])
        kernel_use = ((resources.get(key) or {}).get("status") or {}).get(KERNEL_USE_STATUS)
        if isinstance(kernel_use, dict):
            # As the cache's last reconcile read it from its pods' kernel-use sidecars.
            status["kernel_use"] = kernel_use
        caches.append({"name": key[0], "namespace": key[1], "scope": "namespaced" if key[1] else "cluster",
                       "status": status})
    return {"changed": False, "caches": caches, "api_requests": kube.requests}


def _claim_users(pvcs, mounts):
    """'namespace/name' of the live pods that mount any of the PVCs (mounts: plan.pod_mounts)."""
    return sorted({"%s/%s" % (user["namespace"], user["name"]) for pvc in pvcs
                   for user in mounts.get((pvc["metadata"]["namespace"], pvc["metadata"]["name"]), [])})


def _workload_namespaces(resource):
    """Where the webhook mounts an imageVolume cache: a GKMCache's namespace, a ClusterGKMCache's workloadNamespaces."""
    cache = read_cache(resource)
    return [cache.namespace] if cache.namespace else list(cache.workload_namespaces)


def _image_volume_users(resource, pods):
    """'namespace/name' of the live pods of the cache's namespaces whose image volumes mount its image."""
    reference = ((resource.get("status") or {}).get("imageVolume") or {}).get("reference")
    namespaces = set(_workload_namespaces(resource))
    users = image_users(reference, [pod for pod in pods if pod["metadata"].get("namespace") in namespaces],
                        [])[1] if reference else []
    return sorted({"%s/%s" % (user["namespace"], user["name"]) for user in users})


def cache_resources(kube, name=None, namespace=None):
    """{(cache, cache namespace or ''): resource} of the cache resources: one cache's (name, and namespace for a
    GKMCache) or every cache's. A cluster without the CRDs has none."""
    kinds = [("GKMCache" if namespace else "ClusterGKMCache", namespace)] if name else [
        ("GKMCache", None), ("ClusterGKMCache", None)]
    resources = {}
    for kind, kind_namespace in kinds:
        plural, namespaced = CACHE_KINDS[kind]
        path = ("%s/%s" % (cache_cr.resource_path(kind, None, kind_namespace), name) if name
                else "/apis/%s/%s/%s" % (GROUP, VERSION, plural))
        status_code, body = kube.request("GET", path, what="%s %s" % (kind, name or "list"))
        if status_code == 404:
            continue
        for resource in (body.get("items") if not name else [body]) or []:
            metadata = resource["metadata"]
            resources[(metadata["name"], (metadata.get("namespace") or "") if namespaced else "")] = resource
    return resources
