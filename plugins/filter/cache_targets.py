# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: cache_targets
short_description: The caches to reconcile - those found in the cluster and those declared
version_added: 0.1.0
description:
  - Returns one item per cache, keyed by kind, namespace and name, for a loop over M(gkm.cluster.cache_reconcile).
  - A declared cache carries its manifest as C(definition), so it is planned from what is declared even before
    it is applied (check mode of a day-2 run); a cache found only in the cluster has no C(definition) and is
    planned from its live spec.
  - Caches are returned in kind, namespace, name order.
options:
  _input:
    description: GKMCache and ClusterGKMCache resources found in the cluster (for example C(k8s_info) results).
    type: list
    elements: dict
    required: true
  declared:
    description: GKMCache and ClusterGKMCache manifests declared in the inventory.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Reconcile every cache, declared or found
  gkm.cluster.cache_reconcile:
    kind: "{{ item.kind }}"
    name: "{{ item.name }}"
    namespace: "{{ item.namespace | default(omit, true) }}"
    definition: "{{ item.definition | default(omit) }}"
  loop: "{{ found | gkm.cluster.cache_targets(gkm_caches) }}"
"""

RETURN = r"""
_value:
  description: Items with C(kind), C(name), C(namespace) (empty for a ClusterGKMCache) and, for declared caches,
    C(definition).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError  # noqa: E402

KINDS = ("GKMCache", "ClusterGKMCache")


def _key(resource, where):
    kind = resource.get("kind")
    metadata = resource.get("metadata") or {}
    if kind not in KINDS or not metadata.get("name"):
        raise AnsibleFilterError("cache_targets: every %s cache needs kind (one of %s) and metadata.name, got %r"
                                 % (where, ", ".join(KINDS), {"kind": kind, "metadata": metadata}))
    namespace = (metadata.get("namespace") or "") if kind == "GKMCache" else ""
    if kind == "GKMCache" and not namespace:
        raise AnsibleFilterError("cache_targets: %s GKMCache %s needs metadata.namespace"
                                 % (where, metadata["name"]))
    return kind, namespace, metadata["name"]


def cache_targets(found, declared=None):
    targets = {}
    for resource in found or []:
        kind, namespace, name = _key(resource, "found")
        targets[(kind, namespace, name)] = {"kind": kind, "namespace": namespace, "name": name}
    for resource in declared or []:
        kind, namespace, name = _key(resource, "declared")
        targets[(kind, namespace, name)] = {"kind": kind, "namespace": namespace, "name": name,
                                            "definition": resource}
    return [targets[key] for key in sorted(targets)]


class FilterModule(object):
    def filters(self):
        return {"cache_targets": cache_targets}
