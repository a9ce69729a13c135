import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.gpu_sim import gpu_nodes


def test_default_layout_is_one_control_plane_and_three_amd_workers():
    nodes = gpu_nodes.render_nodes(gpu_nodes.DEFAULT_NODE_GROUPS)
    assert [n["metadata"]["name"] for n in nodes] == [
        "gkm-control-plane", "gkm-gpu-worker-1", "gkm-gpu-worker-2", "gkm-gpu-worker-3"]
    control_plane, worker = nodes[0], nodes[1]
    assert "hardware-type" not in control_plane["metadata"]["labels"]
    assert control_plane["spec"]["taints"] == [gpu_nodes.CONTROL_PLANE_TAINT]
    labels = worker["metadata"]["labels"]
    assert labels["hardware-type"] == "gpu" and labels["amd.com/gpu.present"] == "true"
    assert (labels["gkm.io/gpu-backend"], labels["gkm.io/gpu-arch"], labels["gkm.io/gpu-warp-size"]) == (
        "hip", "gfx90a", "64")
    assert worker["status"]["capacity"]["amd.com/gpu"] == "2" == worker["status"]["allocatable"]["amd.com/gpu"]
    assert worker["spec"]["taints"] == [gpu_nodes.GPU_TAINT]
    assert worker["metadata"]["annotations"][gpu_nodes.KWOK_ANNOTATION] == "fake"


def test_mixed_cluster_with_extra_labels_and_taints():
    nodes = gpu_nodes.render_nodes([
        {"name": "nv", "count": 2, "vendor": "nvidia", "gpus": 8, "labels": {"zone": "a"},
         "taints": [{"key": "dedicated", "value": "llm", "effect": "NoExecute"}]},
        {"name": "cpu", "count": 1, "vendor": "none"},
    ])
    nv = nodes[0]
    assert nv["metadata"]["labels"]["gkm.io/gpu-backend"] == "cuda"
    assert nv["metadata"]["labels"]["gkm.io/gpu-arch"] == "90"
    assert nv["metadata"]["labels"]["gkm.io/gpu-warp-size"] == "32"
    assert nv["metadata"]["labels"]["zone"] == "a"
    assert nv["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert [t["key"] for t in nv["spec"]["taints"]] == ["gpu", "dedicated"]
    cpu = nodes[2]
    assert cpu["metadata"]["name"] == "cpu-1"
    assert not any(key.endswith("/gpu") for key in cpu["status"]["capacity"])
    assert cpu["spec"] == {}


@pytest.mark.parametrize("groups, message", [
    ([{"count": 1}], "'name' is required"),
    ([{"name": "x", "count": -1}], "'count' must be an integer"),
    ([{"name": "x", "vendor": "intel"}], "'vendor' must be one of"),
    ([{"name": "x"}, {"name": "x"}], "two node groups"),
])
def test_invalid_groups_name_the_field(groups, message):
    with pytest.raises(gpu_nodes.NodeSpecError, match=message):
        gpu_nodes.render_nodes(groups)


def test_summary_row():
    row = gpu_nodes.node_summary(gpu_nodes.render_nodes(gpu_nodes.DEFAULT_NODE_GROUPS)[1])
    assert row == {"name": "gkm-gpu-worker-1", "gpus": "amd.com/gpu=2", "backend": "hip", "arch": "gfx90a",
                   "warp_size": "64", "taints": "gpu=true:NoSchedule"}
