# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: cache_orphans
short_description: The caches whose objects are still in the cluster although their resource is gone
version_added: 0.1.0
description:
  - Returns one item per GKMCache or ClusterGKMCache that objects (PVCs, PVs, Jobs, Secrets) are labelled with
    (C(gkm.io/cache-kind), C(gkm.io/cache), C(gkm.io/cache-namespace)) and that the cluster no longer holds, for a
    loop over M(gkm.cluster.cache_reconcile) with O(gkm.cluster.cache_reconcile#module:state=absent).
  - Objects of caches distributed without a resource (M(gkm.cluster.cache_distribute)) carry no kind label and
    are never returned.
  - Only objects the collection made count (the C(gkm.cluster.cache_foreign) filter lists the others), that is a
    PersistentVolume, an object of the system namespace with the resource's uid in C(gkm.io/owner-uid), or an object
    with an owner reference to the resource its labels name.
options:
  _input:
    description: Live objects labelled C(gkm.io/cache-kind), of any kind (for example C(k8s_info) results).
    type: list
    elements: dict
    required: true
  resources:
    description: Every GKMCache and ClusterGKMCache found in the cluster.
    type: list
    elements: dict
    required: true
  system_namespace:
    description: The collection's own namespace, where the extraction Jobs, their Secret and PVCs run.
    type: str
    default: gkm-system
"""

EXAMPLES = r"""
- name: Remove the objects of deleted caches
  gkm.cluster.cache_reconcile:
    kind: "{{ item.kind }}"
    name: "{{ item.name }}"
    namespace: "{{ item.namespace | default(omit, true) }}"
    state: absent
  loop: "{{ labelled_objects | gkm.cluster.cache_orphans(found_caches) }}"
"""

RETURN = r"""
_value:
  description: Items with C(kind), C(name) and C(namespace) (empty for a ClusterGKMCache), in that order.
  type: list
  elements: dict
"""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SYSTEM_NAMESPACE  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.lifecycle import orphaned_caches  # noqa: E402


def cache_orphans(objects, resources, system_namespace=SYSTEM_NAMESPACE):
    return orphaned_caches(objects or [], resources or [], system_namespace)


class FilterModule(object):
    def filters(self):
        return {"cache_orphans": cache_orphans}
