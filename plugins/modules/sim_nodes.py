#!/usr/bin/python
# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sim_nodes
short_description: Make a cluster's simulated GPU nodes match a declarative list of node groups
description:
  - Each node group gives a name prefix, a count, a GPU vendor (V(amd), V(nvidia) or V(none)), an architecture,
    a GPU count, extra labels and taints, and optionally C(role=control-plane). Nodes get the labels,
    extended-resource capacity and C(gpu=true:NoSchedule) taint that kind-gpu-sim sets, plus
    C(gkm.io/gpu-backend), C(gkm.io/gpu-arch) and C(gkm.io/gpu-warp-size).
  - O(mode=create) (kwok) creates missing nodes, deletes simulated nodes no longer in the list (O(prune)),
    re-applies drifted labels and taints, and replaces a node whose GPU capacity changed; it then waits until
    every node is Ready. Changing the list on a re-run therefore adds and removes nodes.
  - O(mode=patch) (kind, or any cluster whose nodes exist) sets labels and taints on the nodes each group names
    in C(node_names), and their GPU capacity through the status subresource. It never creates or deletes nodes.
  - Writes are server-side apply (field manager C(gkm.cluster)), made only where something differs, so a re-run
    with nothing to do writes nothing. Check mode sends every write as a server-side dry run and does not wait.
version_added: "0.1.0"
author:
  - gkm.cluster contributors (@gkm-cluster)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gkm.cluster.cluster_access
options:
  groups:
    description:
      - The node groups, each a dict with C(name) (required), C(count) (default 1), C(vendor) (V(amd), V(nvidia)
        or V(none); default V(none)), C(arch) (default C(gfx90a) for AMD and C(90) for NVIDIA), C(gpus)
        (default 2), C(warp_size), C(labels), C(taints) and C(role) (V(control-plane) for the control-plane look).
      - With O(mode=patch), each group also has C(node_names), the existing nodes it describes.
    type: list
    elements: dict
    required: true
  mode:
    description: V(create) for kwok nodes that this module owns, V(patch) for nodes that exist already.
    type: str
    choices: [create, patch]
    default: create
  prune:
    description: With O(mode=create), delete simulated nodes (in O(scope)) that are not in O(groups).
    type: bool
    default: true
  scope:
    description:
      - Limit the module to nodes labelled C(gkm.io/sim-scope=<scope>) (and label the nodes it creates so), so
        several node sets can share a cluster without pruning each other. Unset means every simulated node
        (label C(gkm.io/sim-node=true)).
    type: str
  wait:
    description: With O(mode=create), wait until every node of the list is Ready.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to wait for nodes to be Ready or deleted.
    type: int
    default: 300
"""

EXAMPLES = r"""
- name: A mixed simulated cluster
  gkm.cluster.sim_nodes:
    kubeconfig: .sim/kubeconfig
    groups:
      - {name: gkm-control-plane, vendor: none, role: control-plane}
      - {name: gpu-amd, count: 2, vendor: amd, arch: gfx90a, gpus: 8}
      - {name: gpu-nvidia, count: 2, vendor: nvidia, arch: "90", gpus: 4}
      - {name: cpu, count: 1, vendor: none}

- name: Give two kind workers simulated AMD GPUs
  gkm.cluster.sim_nodes:
    mode: patch
    groups:
      - {name: gpu-amd, vendor: amd, node_names: [gkm-worker, gkm-worker2]}
"""

RETURN = r"""
created:
  description: Nodes created.
  returned: always
  type: list
  elements: str
replaced:
  description: Nodes deleted and created again because their GPU capacity changed.
  returned: always
  type: list
  elements: str
updated:
  description: Nodes whose labels, taints or (patch mode) GPU capacity were set.
  returned: always
  type: list
  elements: str
deleted:
  description: Nodes deleted because they are no longer in the list.
  returned: always
  type: list
  elements: str
unchanged:
  description: Number of nodes that already matched.
  returned: always
  type: int
nodes:
  description: One row per node of the list - name, GPUs, backend, arch, warp size, taints.
  returned: always
  type: list
  elements: dict
  sample: [{name: gpu-amd-1, gpus: amd.com/gpu=8, backend: hip, arch: gfx90a, warp_size: "64",
            taints: "gpu=true:NoSchedule"}]
ready_seconds:
  description: Seconds from the first write until every node was Ready (O(mode=create) with O(wait)), else null.
  returned: always
  type: float
api_writes:
  description: Write requests sent (0 on a run with nothing to do; dry runs do not count).
  returned: always
  type: int
"""

from ansible_collections.gkm.cluster.plugins.module_utils.common.module import run_module  # noqa: E402
from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim.tasks import sim_nodes  # noqa: E402

ARGUMENT_SPEC = dict(
    groups=dict(type="list", elements="dict", required=True),
    mode=dict(type="str", choices=["create", "patch"], default="create"),
    prune=dict(type="bool", default=True),
    scope=dict(type="str"),
    wait=dict(type="bool", default=True),
    wait_timeout=dict(type="int", default=300),
)


def main():
    run_module(ARGUMENT_SPEC, sim_nodes)


if __name__ == "__main__":
    main()
