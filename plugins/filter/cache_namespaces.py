# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: cache_namespaces
short_description: Namespace manifests for the namespaced caches in a list of cache resources
version_added: 0.1.0
description:
  - Returns one unlabelled C(Namespace) manifest per distinct namespace of the C(GKMCache) resources in the list,
    in first-seen order, so the namespaces can be applied before the caches in the same call.
options:
  _input:
    description: GKMCache and ClusterGKMCache manifests.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Apply caches and their namespaces in one call
  kubernetes.core.k8s:
    definition: "{{ (gkm_caches | gkm.cluster.cache_namespaces) + gkm_caches }}"
"""

RETURN = r"""
_value:
  description: Namespace manifests.
  type: list
  elements: dict
"""


def cache_namespaces(resources):
    names = []
    for resource in resources:
        namespace = (resource.get("metadata") or {}).get("namespace")
        if resource.get("kind") == "GKMCache" and namespace and namespace not in names:
            names.append(namespace)
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}} for name in names]


class FilterModule(object):
    def filters(self):
        return {"cache_namespaces": cache_namespaces}
