# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Simulated GPU nodes: turn a declarative node list into kwok-managed Node objects.

Pure functions, shared by the local simulated cluster (tools/sim-cluster/sim.py) and the gpu_sim role.
A node group looks like::

    {"name": "gkm-gpu-amd", "count": 3, "vendor": "amd", "arch": "gfx90a", "gpus": 2,
     "labels": {...}, "taints": [{"key": ..., "value": ..., "effect": ...}]}

``vendor: none`` gives nodes without GPUs; ``role: control-plane`` gives the control-plane look
(label and NoSchedule taint) that kind's first node has.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.contract.vocabulary import (
    GPU_ARCH_LABEL,
    GPU_BACKEND_LABEL,
    GPU_WARP_SIZE_LABEL,
    HOSTNAME_LABEL,
    SIM_NODE_LABEL,
)

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_ANNOTATION_VALUE = "fake"
# Nodes with a real kubelet and containerd (tools/sim-cluster/real_nodes.py): pods that must really run pin here.


# Per vendor: extended resource, backend, default architecture and warp size (design notes, section 1).
VENDORS = {
    "amd": {"resource": "amd.com/gpu", "backend": "hip", "arch": "gfx90a", "warp_size": 64},
    "nvidia": {"resource": "nvidia.com/gpu", "backend": "cuda", "arch": "90", "warp_size": 32},
}

GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
CONTROL_PLANE_TAINT = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}

DEFAULT_NODE_GROUPS = [
    {"name": "gkm-control-plane", "count": 1, "vendor": "none", "role": "control-plane"},
    {"name": "gkm-gpu-worker", "count": 3, "vendor": "amd", "arch": "gfx90a", "gpus": 2},
]

# What every simulated node reports: enough CPU, memory and pods for benchmarks with many pods per node.
_BASE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"}


class NodeSpecError(ValueError):
    """A node group in the declarative list is invalid; the message names the field."""


def _group_names(group, index):
    name = group.get("name")
    if not name:
        raise NodeSpecError("node group %d: 'name' is required (a DNS-1123 prefix such as 'gpu-amd')" % index)
    count = group.get("count", 1)
    if not isinstance(count, int) or count < 0:
        raise NodeSpecError("node group %r: 'count' must be an integer >= 0, got %r" % (name, count))
    if count == 1 and group.get("role") == "control-plane":
        return [name]
    return ["%s-%d" % (name, number) for number in range(1, count + 1)]


def _gpu_facts(group):
    vendor = group.get("vendor", "none")
    if vendor in (None, "none"):
        return None
    if vendor not in VENDORS:
        raise NodeSpecError(
            "node group %r: 'vendor' must be one of amd, nvidia, none; got %r" % (group.get("name"), vendor)
        )
    facts = dict(VENDORS[vendor])
    facts["vendor"] = vendor
    facts["arch"] = str(group.get("arch", facts["arch"]))
    facts["warp_size"] = int(group.get("warp_size", facts["warp_size"]))
    facts["count"] = int(group.get("gpus", 2))
    return facts


def render_node(name, group):
    """Return the Node object for one node of a group."""
    gpu = _gpu_facts(group)
    labels = {
        HOSTNAME_LABEL: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        SIM_NODE_LABEL: "true",
    }
    taints = []
    capacity = dict(_BASE_CAPACITY)
    if group.get("role") == "control-plane":
        labels["node-role.kubernetes.io/control-plane"] = ""
        taints.append(dict(CONTROL_PLANE_TAINT))
    else:
        labels["node-role.kubernetes.io/worker"] = ""
    if gpu:
        labels.update({
            "hardware-type": "gpu",
            "%s.com/gpu.present" % gpu["vendor"]: "true",
            GPU_BACKEND_LABEL: gpu["backend"],
            GPU_ARCH_LABEL: gpu["arch"],
            GPU_WARP_SIZE_LABEL: str(gpu["warp_size"]),
        })
        capacity[gpu["resource"]] = str(gpu["count"])
        taints.append(dict(GPU_TAINT))
    labels.update(group.get("labels") or {})
    taints.extend(copy.deepcopy(group.get("taints") or []))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": taints} if taints else {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            # Every field the API's NodeSystemInfo requires, so typed clients accept these objects too.
            "nodeInfo": {
                "architecture": "amd64", "operatingSystem": "linux", "osImage": "kwok", "kernelVersion": "kwok",
                "kubeletVersion": "fake", "kubeProxyVersion": "fake", "containerRuntimeVersion": "kwok://fake",
                "bootID": name, "machineID": name, "systemUUID": name,
            },
        },
    }


def render_nodes(groups):
    """Return the Node objects of a declarative list, in order; names must be unique."""
    nodes = []
    seen = set()
    for index, group in enumerate(groups):
        for name in _group_names(group, index):
            if name in seen:
                raise NodeSpecError("node %r is produced by two node groups; give the groups distinct names" % name)
            seen.add(name)
            nodes.append(render_node(name, group))
    return nodes


def node_summary(node):
    """One row for humans: name, GPU resource and count, the gkm.io GPU labels and taints."""
    labels = node["metadata"].get("labels", {})
    capacity = node.get("status", {}).get("capacity", {})
    gpus = {key: value for key, value in capacity.items() if key.endswith("/gpu")}
    taints = [
        "%s=%s:%s" % (taint["key"], taint.get("value", ""), taint["effect"]) if taint.get("value")
        else "%s:%s" % (taint["key"], taint["effect"])
        for taint in node.get("spec", {}).get("taints") or []
    ]
    return {
        "name": node["metadata"]["name"],
        "gpus": ",".join("%s=%s" % item for item in sorted(gpus.items())) or "-",
        "backend": labels.get(GPU_BACKEND_LABEL, "-"),
        "arch": labels.get(GPU_ARCH_LABEL, "-"),
        "warp_size": labels.get(GPU_WARP_SIZE_LABEL, "-"),
        "taints": ",".join(taints) or "-",
    }
