#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: cache_info
short_description: Report the distribution status of GPU kernel caches, changing nothing
version_added: "0.1.0"
description:
  - Reads the PVCs and extraction Jobs that M(gkm.cluster.cache_distribute) manages (one label-selected LIST per
    kind, plus the pods of their namespaces) and returns, per cache, the same status as cache_distribute.
  - The entries of a cache reconciled from a C(GKMCache) or C(ClusterGKMCache) come from its per-node objects
    (C(GKMCacheNode), C(ClusterGKMCacheNode); paged LISTs), and include one entry per GPU node that does not get
    the cache, with phase C(Excluded) or C(Incompatible), the C(reason) and the message.
  - Without the cache's options this module cannot know which nodes are eligible, so C(nodes) counts the nodes
    holding a per-node PVC of the newest digest (0 for ReadOnlyMany caches), and PVCs of older digests are
    reported C(Outdated).
  - A cache in C(mountMode=imageVolume) leaves no PVC or Job; its entry comes from its resource's status, which
    its reconcile wrote - the phase, the counts, and C(image_volume) with the pinned C(reference), the nodes that
    pulled it (C(pulled_nodes), C(pulled_node_count)) and the pods mounting it or an older digest (C(pods),
    C(pod_count)), at most 10 of each as the status keeps them.
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.cluster_access
options:
  name:
    description: Report only this cache. All caches when omitted.
    type: str
  namespace:
    description: Namespace of a namespaced cache given in O(name); omit it for a cluster cache.
    type: str
seealso:
  - module: gkm.cluster.cache_distribute
"""

EXAMPLES = r"""
- name: Status of every distributed cache
  gkm.cluster.cache_info:
  register: caches

- name: Status of one namespaced cache
  gkm.cluster.cache_info:
    name: vector-add
    namespace: team-a
"""

RETURN = r"""
caches:
  description: One entry per cache.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: Cache name.
      type: str
    namespace:
      description: Namespace of a namespaced cache, empty for a cluster cache.
      type: str
    scope:
      description: namespaced or cluster.
      type: str
    status:
      description: phase, counts (GKM's columns), entries per namespace and node (and per excluded GPU node),
        unschedulable Jobs, serving PVCs; for an imageVolume cache C(image_volume) (the pulled nodes and the pods
        its last reconcile found). C(mounted_by) lists the unfinished pods (C(namespace/name)) that mount the cache
        now, read from the live pods - any of its PVCs (per-node, serving, ReadOnlyMany) or, in imageVolume mode, an
        image volume of its repository in its namespaces.
        C(kernel_use), for a cache whose pods get the kernel overlay, is the resource's C(status.kernelUse) as its
        last reconcile read it from the pods' kernel-use sidecars (see RV(caches.status.kernel_use)).
      type: dict
      contains:
        kernel_use:
          description:
            - What the pods given the cache's kernel overlay found in it and compiled, read by the cache's last
              reconcile from the newest 20 pods with the kernel-use sidecar in the cache's namespaces.
            - C(podCnt), C(hits) (kernels Triton found in the cache), C(misses) (kernels compiled in the pods), and
              C(compileSecondsSaved) when the image records its kernels' cold compile seconds (hits times their
              mean).
            - C(nodes) has the same figures per node and pod namespace (at most 50 rows).
            - C(pods) lists the newest 10 pods with C(namespace), C(name), C(node), C(hits), C(misses) and
              C(missed) (at most 10 kernels, each C(kernel) and C(reason) - C(tritonVersion), C(target), C(leftOut),
              C(cachedName) or C(notCached) - with the pod's C(tritonVersion) or C(target) when that is why), and a
              C(reason) when no kernel hit and each one compiled has a cached kernel's name (another Triton build).
          returned: when the cache's status has it
          type: dict
api_requests:
  description: API requests made.
  returned: always
  type: int
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.tasks import cache_info  # noqa: E402

ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    namespace=dict(type="str"),
)


def main():
    run_module(ARGUMENT_SPEC, cache_info, required_by={"namespace": "name"})


if __name__ == "__main__":
    main()
