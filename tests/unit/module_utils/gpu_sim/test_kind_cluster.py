"""The kind backend's plan: config, node layout, label rules, registry wiring and commands."""

import pytest
import yaml

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import kind_cluster as kc

MIXED = [
    {"name": "cp", "vendor": "none", "role": "control-plane"},
    {"name": "amd", "count": 2, "vendor": "amd", "arch": "gfx942", "gpus": 8, "labels": {"rack": "a"}},
    {"name": "nvidia", "count": 1, "vendor": "nvidia", "arch": "90", "gpus": 4},
    {"name": "cpu", "count": 1, "vendor": "none", "taints": [{"key": "pool", "value": "cpu", "effect": "NoSchedule"}]},
]


def plan(groups=None, registry=None, **extra):
    return kc.plan("gkm-gpu-sim", MIXED if groups is None else groups, "/tmp/kind.yaml", "/tmp/kind.kubeconfig",
                   registry=registry, **extra)


def test_nodes_are_laid_out_as_kind_names_them():
    assert plan()["nodes"] == ["gkm-gpu-sim-control-plane", "gkm-gpu-sim-worker", "gkm-gpu-sim-worker2",
                               "gkm-gpu-sim-worker3", "gkm-gpu-sim-worker4"]
    groups = {group["name"]: group["node_names"] for group in plan()["node_groups"]}
    assert groups == {"cp": ["gkm-gpu-sim-control-plane"], "amd": ["gkm-gpu-sim-worker", "gkm-gpu-sim-worker2"],
                      "nvidia": ["gkm-gpu-sim-worker3"], "cpu": ["gkm-gpu-sim-worker4"]}


def test_a_control_plane_is_added_when_the_list_has_none():
    result = plan([{"name": "amd", "count": 1, "vendor": "amd"}])
    assert result["nodes"] == ["gkm-gpu-sim-control-plane", "gkm-gpu-sim-worker"]
    assert [node["role"] for node in result["config"]["nodes"]] == ["control-plane", "worker"]


def test_config_labels_are_only_those_the_kubelet_may_set():
    config = plan(node_image="kindest/node:v1.34.0")["config"]
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4" and config["name"] == "gkm-gpu-sim"
    amd = config["nodes"][1]
    assert amd["image"] == "kindest/node:v1.34.0"
    assert amd["labels"] == {"gkm.io/sim-node": "true", "hardware-type": "gpu", "amd.com/gpu.present": "true",
                             "gkm.io/gpu-backend": "hip", "gkm.io/gpu-arch": "gfx942", "gkm.io/gpu-warp-size": "64",
                             "rack": "a"}
    for node in config["nodes"]:
        for label in node.get("labels", {}):
            assert not label.startswith(("node-role.kubernetes.io/", "kubernetes.io/")), label
    assert config["nodes"][3]["labels"]["gkm.io/gpu-arch"] == "90"
    assert "containerdConfigPatches" not in config


def test_kubelet_label_rule():
    assert kc._kubelet_may_set("gkm.io/gpu-arch")
    assert kc._kubelet_may_set("node.kubernetes.io/instance-type")
    assert not kc._kubelet_may_set("node-role.kubernetes.io/worker")
    assert not kc._kubelet_may_set("example.k8s.io/x")
    assert kc._kubelet_may_set("plain")


def test_patch_groups_carry_gpu_facts_for_the_status_subresource():
    from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import sim_nodes

    desired = sim_nodes.desired_nodes(plan()["node_groups"], "patch")
    worker = desired["gkm-gpu-sim-worker2"]
    assert worker["status"]["capacity"] == {"amd.com/gpu": "8"}
    assert {"key": "gpu", "value": "true", "effect": "NoSchedule"} in worker["spec"]["taints"]
    assert worker["metadata"]["labels"]["node-role.kubernetes.io/worker"] == ""
    assert "kubernetes.io/hostname" not in worker["metadata"]["labels"]
    control_plane = desired["gkm-gpu-sim-control-plane"]
    assert control_plane["status"]["capacity"] == {}
    assert control_plane["spec"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert desired["gkm-gpu-sim-worker4"]["spec"]["taints"] == [{"key": "pool", "value": "cpu", "effect": "NoSchedule"}]


def test_registry_is_wired_into_containerd_on_every_node():
    result = plan(registry={"host_port": 5001})
    assert result["config"]["containerdConfigPatches"] == [
        '[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"']
    assert result["registry"] == {"name": "kind-registry", "host_port": 5001, "container_port": 5000,
                                  "image": "registry:2", "host": "localhost:5001"}
    assert result["registry_hosts_toml"] == '[host."http://kind-registry:5000"]\n'
    write = result["registry_node_commands"]["gkm-gpu-sim-worker"]["write"]
    assert write[:4] == ["docker", "exec", "--interactive", "gkm-gpu-sim-worker"]
    assert "/etc/containerd/certs.d/localhost:5001/hosts.toml" in write[-1]
    assert set(result["registry_node_commands"]) == set(result["nodes"])
    data = yaml.safe_load(result["registry_configmap"]["data"]["localRegistryHosting.v1"])
    assert data["host"] == "localhost:5001"
    assert result["registry_configmap"]["metadata"] == {"name": "local-registry-hosting", "namespace": "kube-public"}


def test_commands():
    commands = plan(registry={}, engine="podman", kind="/usr/local/bin/kind")["commands"]
    assert commands["create"] == ["/usr/local/bin/kind", "create", "cluster", "--name", "gkm-gpu-sim", "--config",
                                  "/tmp/kind.yaml", "--kubeconfig", "/tmp/kind.kubeconfig", "--wait", "120s"]
    assert commands["delete"] == ["/usr/local/bin/kind", "delete", "cluster", "--name", "gkm-gpu-sim",
                                  "--kubeconfig", "/tmp/kind.kubeconfig"]
    assert commands["registry_run"] == ["podman", "run", "--detach", "--restart=always", "--name", "kind-registry",
                                        "--publish", "127.0.0.1:5001:5000", "registry:2"]
    assert commands["registry_connect"] == ["podman", "network", "connect", "kind", "kind-registry"]
    assert "registry_run" not in plan()["commands"]


@pytest.mark.parametrize("cluster, groups, message", [
    ("Bad_Name", MIXED, "gpu_sim_kind_cluster_name"),
    ("ok", [{"name": "a", "role": "control-plane"}, {"name": "b", "role": "control-plane"}], "one control-plane"),
    ("ok", [{"name": "a", "role": "control-plane", "count": 2}], "count 1 or 3"),
    ("ok", [{"name": "a", "count": -1}], "'count' must be an integer >= 0"),
    ("ok", [{"name": "a", "vendor": "intel"}], "'vendor' must be one of amd, nvidia, none"),
])
def test_bad_settings_are_refused_with_the_setting_named(cluster, groups, message):
    with pytest.raises(kc.KindPlanError) as error:
        kc.plan(cluster, groups, "/c", "/k", registry={"host_port": 5001})
    assert message in str(error.value)


def test_three_control_planes_are_named_like_kind_does():
    result = plan([{"name": "cp", "role": "control-plane", "count": 3}])
    assert result["nodes"] == ["gkm-gpu-sim-control-plane", "gkm-gpu-sim-control-plane2", "gkm-gpu-sim-control-plane3"]
