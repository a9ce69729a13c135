import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.oci import gpu_compat

HIP = {"backend": "hip", "arch": "gfx90a", "warp_size": 64}
CUDA = {"backend": "cuda", "arch": "90", "warp_size": 32}


def test_cuda_arch_matches_with_or_without_sm_prefix():
    assert gpu_compat.gpu_matches(CUDA, {"backend": "CUDA", "arch": "sm_90", "warp_size": "32"})


def test_sm_prefix_is_not_stripped_for_hip():
    assert gpu_compat.normalize_gpu({"backend": "hip", "arch": "sm_90", "warp_size": 64})["arch"] == "sm_90"


@pytest.mark.parametrize("gpu", [
    {"backend": "hip", "arch": "gfx942", "warp_size": 64},
    {"backend": "hip", "arch": "gfx90a", "warp_size": 32},
    {"backend": "cuda", "arch": "gfx90a", "warp_size": 64},
])
def test_any_differing_field_is_incompatible(gpu):
    assert not gpu_compat.gpu_matches(HIP, gpu)


def test_gpus_are_split_into_compatible_and_incompatible():
    compatible, incompatible = gpu_compat.gpus_compatible([HIP, CUDA], [
        {"backend": "cuda", "arch": "sm_90", "warp_size": 32}, {"backend": "cuda", "arch": "80", "warp_size": 32}])
    assert compatible == [CUDA]
    assert incompatible == [{"backend": "cuda", "arch": "80", "warp_size": 32}]


def test_missing_field_names_the_field():
    with pytest.raises(gpu_compat.GPUSpecError, match="warp_size"):
        gpu_compat.normalize_gpu({"backend": "hip", "arch": "gfx90a"})


def test_node_labels_give_the_gpu():
    labels = {"gkm.io/gpu-backend": "hip", "gkm.io/gpu-arch": "gfx90a", "gkm.io/gpu-warp-size": "64",
              "kubernetes.io/hostname": "n1"}
    assert gpu_compat.gpus_from_node_labels(labels) == [HIP]


def test_node_without_gpu_labels_has_no_gpu():
    assert gpu_compat.gpus_from_node_labels({"kubernetes.io/hostname": "n1"}) == []


def test_incomplete_node_labels_name_the_missing_label():
    with pytest.raises(gpu_compat.GPUSpecError, match=r"gkm\.io/gpu-warp-size"):
        gpu_compat.gpus_from_node_labels({"gkm.io/gpu-backend": "hip", "gkm.io/gpu-arch": "gfx90a"})
