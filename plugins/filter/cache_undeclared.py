# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: cache_undeclared
short_description: The cache resources the inventory applied and no longer declares
version_added: 0.1.0
description:
  - Returns one item per GKMCache or ClusterGKMCache labelled C(gkm.io/declared-by=inventory) (the caches role
    sets it on what it applies from C(caches_declared)) that the declared list no longer holds.
  - Resources created otherwise (kubectl, other tools) lack the label and are never returned.
options:
  _input:
    description: Every GKMCache and ClusterGKMCache found in the cluster.
    type: list
    elements: dict
    required: true
  declared:
    description: The GKMCache and ClusterGKMCache manifests declared now.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Delete the caches no longer declared
  kubernetes.core.k8s:
    state: absent
    api_version: gkm.io/v1alpha1
    kind: "{{ item.kind }}"
    name: "{{ item.name }}"
    namespace: "{{ item.namespace | default(omit, true) }}"
  loop: "{{ found_caches | gkm.cluster.cache_undeclared(gkm_caches) }}"
"""

RETURN = r"""
_value:
  description: Items with C(kind), C(name) and C(namespace) (empty for a ClusterGKMCache), in that order.
  type: list
  elements: dict
"""

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan.lifecycle import undeclared_caches  # noqa: E402


def cache_undeclared(resources, declared):
    return undeclared_caches(resources or [], declared or [])


class FilterModule(object):
    def filters(self):
        return {"cache_undeclared": cache_undeclared}
