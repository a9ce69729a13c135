"""Triton's cache layout read without Triton (tools/triton_kernels/layout.py, targets.py, scan.py): group files, their
state from where they are, the rewrite a relocated cache needs, the facts an image's labels carry, and a scan that
leaves no trace."""

import json
import os

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.capture.check import hash_directory_name
from ansible_collections.gkm.cluster.plugins.module_utils.kernels import image as mcv
from tools.triton_kernels import layout, scan
from tools.triton_kernels.targets import parse_target, target_name

KERNEL_DIR = "/cache/35BR572SZ7SAVG5BH4IOTJKMPIZWE4QAKW3THXIREOQ3T6KO5ALQ"
CHILDREN = {name: "%s/%s" % (KERNEL_DIR, name)
            for name in ("row_softmax.ttir", "row_softmax.ptx", "row_softmax.cubin", "row_softmax.json")}


def test_targets_parse_with_each_backends_default_warp_size():
    assert parse_target("cuda:90") == ("cuda", 90, 32)
    assert parse_target("hip:gfx90a") == ("hip", "gfx90a", 64)
    assert parse_target("hip:gfx1100:32") == ("hip", "gfx1100", 32)
    assert target_name("hip", "gfx1100", 32) == "hip:gfx1100:32" and target_name("cuda", 90, 32) == "cuda:90"
    for bad in ("cuda", "cuda:sm90", "metal:1", "hip:", "cuda:90:32:1"):
        with pytest.raises(ValueError):
            parse_target(bad)


def test_a_kernels_directory_is_its_hash_in_unpadded_base32():
    # A pair Triton 3.9.0 wrote: row_softmax for cuda:90.
    digest = "df431eff52cfe40a9ba13f10e9a54c7a3362720055b733dd1123a1b9f94ee817"
    assert layout.hash_directory_name(digest) == "35BR572SZ7SAVG5BH4IOTJKMPIZWE4QAKW3THXIREOQ3T6KO5ALQ"
    assert hash_directory_name(digest) == layout.hash_directory_name(digest)  # capture's check, the same name


def test_group_files_are_named_after_the_metadata_file():
    assert layout.is_group_file("__grp__matmul.json") and not layout.is_group_file("matmul.json")
    assert layout.group_member("__grp__matmul.json") == "matmul.json"
    with pytest.raises(layout.LayoutError):
        layout.group_member("matmul.json")


def test_a_group_triton_would_not_read_is_refused():
    assert layout.parse_group(layout.group_text(CHILDREN)) == CHILDREN
    for text in ("not json", "[]", '{"paths": {}}', '{"child_paths": ["a"]}', '{"child_paths": {"a": 1}}'):
        with pytest.raises(layout.LayoutError):
            layout.parse_group(text)


def test_a_group_resolves_only_where_its_paths_exist_inside_its_own_directory():
    everything = set(CHILDREN.values())
    assert layout.group_state(CHILDREN, KERNEL_DIR, everything.__contains__) == layout.RESOLVES
    assert layout.group_state(CHILDREN, KERNEL_DIR + "/", everything.__contains__) == layout.RESOLVES
    # Moved: the recorded paths are gone, so Triton compiles again.
    assert layout.group_state(CHILDREN, "/mnt/" + KERNEL_DIR[7:], lambda path: False) == layout.DANGLING
    # Copied while the compiled one is still there: Triton hits, reading the other directory's files.
    assert layout.group_state(CHILDREN, "/mnt/" + KERNEL_DIR[7:], everything.__contains__) == layout.FOREIGN
    missing_one = everything - {CHILDREN["row_softmax.cubin"]}
    assert layout.group_state(CHILDREN, KERNEL_DIR, missing_one.__contains__) == layout.DANGLING


def test_a_rewritten_group_points_each_file_at_the_new_directory():
    rewritten = layout.rewrite_group(CHILDREN, "/pod/triton/35BR")
    assert rewritten == {name: "/pod/triton/35BR/" + name for name in CHILDREN}
    assert json.loads(layout.group_text(rewritten)) == {"child_paths": rewritten}


@pytest.mark.parametrize("children", [
    {"../escape.json": "/cache/x/../escape.json"},
    {"a/b.json": "/cache/x/a/b.json"},
    {"matmul.json": "/cache/x/other.json"},
    {"__grp__matmul.json": "/cache/x/__grp__matmul.json"},
    {"": "/cache/x/"},
])
def test_a_group_not_written_by_tritons_file_cache_is_not_rewritten(children):
    with pytest.raises(layout.LayoutError):
        layout.rewrite_group(children, "/pod/x")


def test_file_kinds_of_a_kernel_directory():
    kinds = {name: layout.file_kind(name, "cuda") for name in (
        "__grp__matmul.json", "matmul.json", "matmul.source", "matmul.ttir", "matmul.ttgir", "matmul.llir",
        "matmul.ptx", "matmul.cubin", "cuda_utils.so", "README")}
    assert kinds == {"__grp__matmul.json": "group", "matmul.json": "metadata", "matmul.source": "ir:source",
                     "matmul.ttir": "ir:ttir", "matmul.ttgir": "ir:ttgir", "matmul.llir": "ir:llir",
                     "matmul.ptx": "asm:ptx", "matmul.cubin": "binary:cubin", "cuda_utils.so": "launcher",
                     "README": "other"}
    assert layout.file_kind("matmul.hsaco", "hip") == "binary:hsaco"
    assert layout.file_kind("matmul.amdgcn") == "asm:amdgcn"
    assert layout.file_kind("matmul.hsaco", "cuda") == "other"


def test_metadata_gives_the_facts_of_an_images_labels_and_manifest():
    metadata = {"hash": "ab" * 32, "name": "matmul", "target": {"backend": "hip", "arch": "gfx90a", "warp_size": 64},
                "num_warps": 4, "num_stages": 2, "shared": 16384, "triton_version": "3.9.0", "debug": False}
    facts = layout.kernel_facts(layout.parse_metadata(json.dumps(metadata)))
    assert facts == {"name": "matmul", "hash": "ab" * 32, "backend": "hip", "arch": "gfx90a", "warp_size": 64,
                     "triton_version": "3.9.0", "num_warps": 4, "num_stages": 2, "shared": 16384}
    cuda = dict(facts, backend="cuda", arch=90, warp_size=32, ptx_version=84, triton_version="3.8.0")
    # The collection's side of the image boundary reads the same facts from the same metadata.
    assert {key: value for key, value in mcv.kernel_facts(metadata).items() if key != "debug"} == {
        key: value for key, value in facts.items() if key != "shared"}
    assert layout.triton_versions([facts, cuda]) == ["3.8.0", "3.9.0"]


@pytest.mark.parametrize("text", ["[]", "{}", '{"hash": "x", "name": "k", "target": {"backend": "cuda"}}',
                                  '{"name": "k", "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}'])
def test_metadata_without_hash_name_or_target_is_refused(text):
    with pytest.raises(layout.LayoutError):
        layout.parse_metadata(text)


def test_a_scan_leaves_the_access_times_that_the_kernel_use_sidecar_counts_as_hits(tmp_path):
    """inspect (scan) reads each group file; the pod's kernel-use sidecar takes a group's moved access time for
    Triton's read of it, so a scan reads with O_NOATIME and moves none."""
    kernel = tmp_path / "ABCDEF"
    kernel.mkdir()
    (kernel / "k.json").write_text("{}")
    group = kernel / "__grp__k.json"
    group.write_text(json.dumps({"child_paths": {"k.json": str(kernel / "k.json")}}))
    os.utime(group, ns=(1_000_000_000, 2_000_000_000))  # written, never read since
    [kernel_report] = scan.scan(str(tmp_path))
    assert kernel_report["name"] == "k"
    assert os.stat(group).st_atime_ns == 1_000_000_000
