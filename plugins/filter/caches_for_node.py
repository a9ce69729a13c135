# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: caches_for_node
short_description: The caches one Node event affects (the operator's Node watch)
version_added: 0.1.0
description:
  - Returns the GKMCache and ClusterGKMCache resources whose reconcile a change of the node calls for - those that
    hold objects on the node (PVCs or PVs labelled C(gkm.io/node)) although their pod template's placement no
    longer selects it, and those whose placement selects it although they hold nothing there and the node's
    per-node status object does not say they left it out (a node that joined).
  - The placement is the pod template's C(nodeSelector), required node affinity and tolerations, and (unless
    O(compatibility=ignore)) GPU labels; GPU compatibility with the image is left to the reconcile.
options:
  _input:
    description: GKMCache and ClusterGKMCache resources (for example C(k8s_info) results), with their status.
    type: list
    elements: dict
    required: true
  node:
    description: The Node object of the event.
    type: dict
    required: true
  node_objects:
    description: The PVCs and PVs labelled C(gkm.io/node) with the node's name.
    type: list
    elements: dict
    default: []
  node_statuses:
    description: The node's per-node status objects (GKMCacheNode in any namespace, ClusterGKMCacheNode).
    type: list
    elements: dict
    default: []
  compatibility:
    description: The reconcile's compatibility option; C(ignore) lets non-GPU nodes hold caches.
    type: str
    default: skip
"""

EXAMPLES = r"""
- name: Reconcile the caches a node's change affects
  ansible.builtin.debug:
    msg: "{{ found_caches | gkm.cluster.caches_for_node(node, node_objects=node_pvcs) }}"
"""

RETURN = r"""
_value:
  description: The affected resources, in input order.
  type: list
  elements: dict
"""

from ansible_collections.gkm.cluster.plugins.module_utils.operator.node_events import affected_caches  # noqa: E402


def caches_for_node(resources, node, node_objects=None, compatibility="skip", node_statuses=None):
    return affected_caches(node, resources, node_objects or [], compatibility, node_statuses or [])


class FilterModule(object):
    def filters(self):
        return {"caches_for_node": caches_for_node}
