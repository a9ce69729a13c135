# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether a pod may be captured into a cache, pure: the pod's opt-in and the admin's setting.

A pod opts in with the annotation `gkm.io/capture: <cache>` (contract/vocabulary.py). The annotation only says
which cache its author would like its kernels to go to; it never widens what the admin allows: the admin's module
call names the cache and the caches and namespaces it allows, and a pod is captured only when all agree.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import CAPTURE_ANNOTATION


def cache_ref(kind, name, namespace):
    """How a cache is named in the admin's allow-list: namespace/name for a GKMCache, name for a ClusterGKMCache."""
    return "%s/%s" % (namespace, name) if kind == "GKMCache" else name


def check_allowed(pod, kind, cache, cache_namespace, allowed_caches, allowed_namespaces):
    """Raises CaptureError unless the pod opted in to this cache and the admin allows both the cache and the pod's
    namespace. A GKMCache takes kernels only from pods of its own namespace: its tenants are the ones it serves."""
    metadata = pod.get("metadata") or {}
    where = "%s/%s" % (metadata.get("namespace"), metadata.get("name"))
    wanted = (metadata.get("annotations") or {}).get(CAPTURE_ANNOTATION)
    if wanted != cache:
        raise CaptureError("pod %s has not opted in to capture into %s: its %s annotation is %r, not %r"
                           % (where, cache, CAPTURE_ANNOTATION, wanted, cache))
    ref = cache_ref(kind, cache, cache_namespace)
    if ref not in (allowed_caches or ()):
        raise CaptureError("the cache %s is not in allowed_caches (%s): the admin has not allowed captures into it"
                           % (ref, ", ".join(allowed_caches or ()) or "none"))
    if metadata.get("namespace") not in (allowed_namespaces or ()):
        raise CaptureError("pods of namespace %s may not be captured: it is not in allowed_namespaces (%s)"
                           % (metadata.get("namespace"), ", ".join(allowed_namespaces or ()) or "none"))
    if kind == "GKMCache" and metadata.get("namespace") != cache_namespace:
        raise CaptureError("pod %s is not in the namespace of the GKMCache %s" % (where, ref))


def opted_in_cache(pod, allowed_caches):
    """(kind, name, namespace) of the cache a pod's opt-in names among `allowed_caches` (the admin's references, as
    cache_ref gives them): the GKMCache of the pod's namespace when the admin allows it, else the ClusterGKMCache of
    that name; None when the pod did not opt in or names no cache the admin allows."""
    metadata = pod.get("metadata") or {}
    wanted = (metadata.get("annotations") or {}).get(CAPTURE_ANNOTATION)
    if not wanted:
        return None
    namespace = metadata.get("namespace")
    if cache_ref("GKMCache", wanted, namespace) in allowed_caches:
        return "GKMCache", wanted, namespace
    if cache_ref("ClusterGKMCache", wanted, None) in allowed_caches:
        return "ClusterGKMCache", wanted, None
    return None
