# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: cache_foreign
short_description: The objects labelled as a cache resource's that the collection did not make
version_added: 0.1.0
description:
  - Returns one line per object labelled with a GKMCache or ClusterGKMCache (C(gkm.io/cache-kind),
    C(gkm.io/cache), C(gkm.io/cache-namespace)) that is not the collection's, and why, for a report.
  - An object is the collection's when its labels name valid resource names and it is a PersistentVolume, an
    object of the system namespace with the resource's uid in C(gkm.io/owner-uid) (no tenant writes there), or it
    has an owner reference to the resource its labels name (a GKMCache's only in that GKMCache's namespace).
    Anyone who may create an object may label it, so labels alone are not ownership.
  - The C(gkm.cluster.cache_orphans) filter never returns the caches that only such objects name.
options:
  _input:
    description: Live objects labelled C(gkm.io/cache-kind), of any kind (for example C(k8s_info) results).
    type: list
    elements: dict
    required: true
  system_namespace:
    description: The collection's own namespace, where the extraction Jobs, their Secret and PVCs run.
    type: str
    default: gkm-system
"""

EXAMPLES = r"""
- name: Report objects labelled as a cache's that the collection did not make
  ansible.builtin.debug:
    msg: "{{ labelled_objects | gkm.cluster.cache_foreign }}"
"""

RETURN = r"""
_value:
  description: One line per foreign object, its kind, namespace and name, the resource its labels name and why.
  type: list
  elements: str
"""

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import SYSTEM_NAMESPACE  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.lifecycle import foreign_objects  # noqa: E402


def cache_foreign(objects, system_namespace=SYSTEM_NAMESPACE):
    return foreign_objects(objects or [], system_namespace)


class FilterModule(object):
    def filters(self):
        return {"cache_foreign": cache_foreign}
