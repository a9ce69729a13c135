# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plan a kind cluster with simulated GPUs: the kind config, which node is which GPU group, and the commands.

kind names its nodes ``<cluster>-control-plane`` and ``<cluster>-worker``, ``<cluster>-worker2``, ... in
config order, so the node groups (gpu_nodes.py's format) are laid out as workers in list order and each
group learns its node names. Labels in the kind config go through the kubelet's ``--node-labels``, which
refuses the kubernetes.io and k8s.io namespaces (NodeRestriction), so those - node-role labels included -
are left to the API patches that sim_nodes' patch mode makes afterwards, with the taints and the GPU
capacity (status subresource), as kind-gpu-sim does.

The local registry follows kind's documented pattern: containerd reads per-registry ``hosts.toml`` files
from ``/etc/containerd/certs.d`` (set by a containerd config patch), each node gets one that maps
``localhost:<port>`` to the registry container on the kind network, and a ``local-registry-hosting``
ConfigMap in kube-public tells tools where to push (KEP-1755).

Pure functions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes

KIND_API_VERSION = "kind.x-k8s.io/v1alpha4"
CERTS_DIR = "/etc/containerd/certs.d"
CONTAINERD_REGISTRY_PATCH = (
    '[plugins."io.containerd.grpc.v1.cri".registry]\n'
    '  config_path = "%s"' % CERTS_DIR
)
# Label namespaces the kubelet may not set on itself (NodeRestriction), except the ones it is allowed.
_RESTRICTED_SUFFIXES = ("kubernetes.io", "k8s.io")
_KUBELET_ALLOWED_PREFIXES = ("kubelet.kubernetes.io/", "node.kubernetes.io/")


class KindPlanError(ValueError):
    """The kind settings are unusable; the message names the setting and the fix."""


def _kubelet_may_set(label):
    if "/" not in label:
        return True
    domain = label.split("/", 1)[0]
    restricted = any(domain == suffix or domain.endswith("." + suffix) for suffix in _RESTRICTED_SUFFIXES)
    return not restricted or label.startswith(_KUBELET_ALLOWED_PREFIXES)


def _kind_node_name(cluster, role, index):
    base = "%s-%s" % (cluster, "control-plane" if role == "control-plane" else "worker")
    return base if index == 1 else "%s%d" % (base, index)


def layout(cluster, groups):
    """[(node name, role, group)] in kind's order: control planes first, then workers in list order."""
    control_planes = [group for group in groups if group.get("role") == "control-plane"]
    if len(control_planes) > 1 or (control_planes and control_planes[0].get("count", 1) not in (1, 3)):
        raise KindPlanError("kind supports one control-plane node group with count 1 or 3; got %d group(s)%s"
                            % (len(control_planes), "" if len(control_planes) != 1
                               else " with count %r" % control_planes[0].get("count")))
    if not control_planes:
        control_planes = [{"name": "control-plane", "count": 1, "vendor": "none", "role": "control-plane"}]
    nodes = []
    for group in control_planes:
        nodes.extend((_kind_node_name(cluster, "control-plane", index), "control-plane", group)
                     for index in range(1, group.get("count", 1) + 1))
    workers = 0
    for group in groups:
        if group.get("role") == "control-plane":
            continue
        count = group.get("count", 1)
        if not isinstance(count, int) or count < 0:
            raise KindPlanError("node group %r: 'count' must be an integer >= 0, got %r" % (group.get("name"), count))
        for _index in range(count):
            workers += 1
            nodes.append((_kind_node_name(cluster, "worker", workers), "worker", group))
    return nodes


def kind_config(cluster, groups, node_image=None, registry=None):
    """The kind Cluster config: nodes with their kubelet-settable labels, and the registry containerd patch."""
    nodes = []
    for name, role, group in layout(cluster, groups):
        try:
            rendered = gpu_nodes.render_node(name, group)
        except gpu_nodes.NodeSpecError as error:
            raise KindPlanError(str(error)) from error
        labels = {key: value for key, value in rendered["metadata"]["labels"].items()
                  if _kubelet_may_set(key) and key != "type"}
        node = {"role": role}
        if node_image:
            node["image"] = node_image
        if labels:
            node["labels"] = labels
        nodes.append(node)
    config = {"kind": "Cluster", "apiVersion": KIND_API_VERSION, "name": cluster, "nodes": nodes}
    if registry:
        config["containerdConfigPatches"] = [CONTAINERD_REGISTRY_PATCH]
    return config


def node_groups_for_patch(cluster, groups):
    """The groups for sim_nodes' patch mode: each with the kind node names it describes (control plane included)."""
    by_group = []
    for name, _role, group in layout(cluster, groups):
        for entry in by_group:
            if entry["source"] is group:
                entry["group"]["node_names"].append(name)
                break
        else:
            patched = copy.deepcopy(group)
            patched["node_names"] = [name]
            by_group.append({"source": group, "group": patched})
    return [entry["group"] for entry in by_group]


def registry_settings(registry):
    """Normalised registry settings: container name, host port, port inside the container, image."""
    registry = dict(registry or {})
    name = registry.get("name") or "kind-registry"
    host_port = int(registry.get("host_port") or 5001)
    if not 1 <= host_port <= 65535:
        raise KindPlanError("gpu_sim_kind_registry.host_port must be a TCP port, got %r" % host_port)
    return {"name": name, "host_port": host_port, "container_port": int(registry.get("container_port") or 5000),
            "image": registry.get("image") or "registry:2", "host": "localhost:%d" % host_port}


def registry_hosts_toml(settings):
    """The hosts.toml that sends pulls of localhost:<port>/... to the registry container on the kind network."""
    return '[host."http://%s:%d"]\n' % (settings["name"], settings["container_port"])


def registry_configmap(settings):
    """KEP-1755's local-registry-hosting ConfigMap."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "local-registry-hosting", "namespace": "kube-public"},
        "data": {"localRegistryHosting.v1": 'host: "%s"\nhelp: "https://kind.sigs.k8s.io/docs/user/local-registry/"\n'
                 % settings["host"]},
    }


def commands(cluster, config_path, kubeconfig, kind="kind", engine="docker", registry=None, wait="120s"):
    """The argv of every command the role may run (tested here; run only where a container engine exists)."""
    planned = {
        "list_clusters": [kind, "get", "clusters"],
        "create": [kind, "create", "cluster", "--name", cluster, "--config", config_path,
                   "--kubeconfig", kubeconfig, "--wait", wait],
        "delete": [kind, "delete", "cluster", "--name", cluster, "--kubeconfig", kubeconfig],
        "list_nodes": [kind, "get", "nodes", "--name", cluster],
    }
    if registry:
        planned.update({
            "registry_inspect": [engine, "inspect", "--format", "{{.State.Running}}", registry["name"]],
            "registry_run": [engine, "run", "--detach", "--restart=always", "--name", registry["name"],
                             "--publish", "127.0.0.1:%d:%d" % (registry["host_port"], registry["container_port"]),
                             registry["image"]],
            "registry_networks": [engine, "inspect", "--format", "{{json .NetworkSettings.Networks}}",
                                  registry["name"]],
            "registry_connect": [engine, "network", "connect", "kind", registry["name"]],
            "registry_remove": [engine, "rm", "--force", registry["name"]],
        })
    return planned


def node_registry_commands(node, settings, engine="docker"):
    """Per node: read the current hosts.toml, and write it (the content goes on stdin)."""
    directory = "%s/%s" % (CERTS_DIR, settings["host"])
    return {
        "read": [engine, "exec", node, "cat", directory + "/hosts.toml"],
        "write": [engine, "exec", "--interactive", node, "sh", "-c",
                  'mkdir -p "%s" && cat > "%s/hosts.toml"' % (directory, directory)],
    }


def plan(cluster, groups, config_path, kubeconfig, kind="kind", engine="docker", node_image=None, registry=None,
         wait="120s"):
    """Everything the gpu_sim role's kind backend needs, in one dict."""
    if not cluster or len(cluster) > 40 or not cluster.replace("-", "").isalnum() or cluster != cluster.lower():
        raise KindPlanError("gpu_sim_kind_cluster_name must be lower-case letters, digits and '-', at most 40 "
                            "characters; got %r" % cluster)
    settings = registry_settings(registry) if registry is not None else None
    nodes = [name for name, _role, _group in layout(cluster, groups)]
    return {
        "config": kind_config(cluster, groups, node_image, settings),
        "node_groups": node_groups_for_patch(cluster, groups),
        "nodes": nodes,
        "commands": commands(cluster, config_path, kubeconfig, kind, engine, settings, wait),
        "registry": settings,
        "registry_hosts_toml": registry_hosts_toml(settings) if settings else None,
        "registry_node_commands": dict((node, node_registry_commands(node, settings, engine)) for node in nodes)
        if settings else {},
        "registry_configmap": registry_configmap(settings) if settings else None,
    }
