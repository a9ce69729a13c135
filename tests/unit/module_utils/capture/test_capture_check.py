"""capture/check.py: a kernel directory checked as Triton writes it, its group made canonical."""

import json

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.capture.check import check_kernel, hash_directory_name
from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.image import GROUP_ROOT
from tests.helpers.kernel_dirs import kernel


def test_a_kernel_as_triton_writes_it_passes_and_its_group_names_the_image_root():
    directory, files = kernel(1)
    checked, facts = check_kernel(directory, files)
    group = json.loads(checked["__grp__vector_add.json"])["child_paths"]
    assert group == {name: "%s/%s/%s" % (GROUP_ROOT, directory, name)
                     for name in ("vector_add.hsaco", "vector_add.json", "vector_add.llir")}
    assert {k: v for k, v in checked.items() if not k.startswith("__grp__")} == \
        {k: v for k, v in files.items() if not k.startswith("__grp__")}
    assert (facts["name"], facts["backend"], facts["arch"], facts["warp_size"]) == ("vector_add", "hip", "gfx90a", 64)
    assert hash_directory_name(facts["hash"]) == directory


def test_the_same_kernel_compiled_at_another_path_is_the_same_bytes_once_canonical():
    directory, here = kernel(1, built_at="/var/run/gkm/kernels")
    there = kernel(1, built_at="/tmp/cold")[1]
    assert check_kernel(directory, here)[0] == check_kernel(directory, there)[0]


def _refused(directory, files, fragment):
    with pytest.raises(CaptureError) as refused:
        check_kernel(directory, files)
    assert fragment in str(refused.value), str(refused.value)


def test_a_directory_not_named_by_its_hash_is_refused():
    directory, files = kernel(1)
    other = kernel(2)[0]
    _refused(other, files, "which Triton stores under %s" % directory)


def test_a_file_the_group_does_not_list_is_refused():
    directory, files = kernel(1)
    _refused(directory, dict(files, **{"payload.sh": b"#!/bin/sh"}), "holds payload.sh")


def test_a_file_the_group_lists_but_the_directory_lacks_is_refused():
    directory, files = kernel(1)
    del files["vector_add.hsaco"]
    _refused(directory, files, "its group lists")


@pytest.mark.parametrize("child", ["../../etc/passwd", "sub/x.llir", "__grp__other.json"])
def test_a_group_naming_anything_but_a_plain_file_name_is_refused(child):
    directory, files = kernel(1)
    files["__grp__vector_add.json"] = json.dumps({"child_paths": {child: "/x/" + child}}).encode()
    _refused(directory, files, "is not Triton's")


def test_two_groups_or_none_are_refused():
    directory, files = kernel(1)
    _refused(directory, dict(files, **{"__grp__b.json": b"{}"}), "has 2 group files")
    del files["__grp__vector_add.json"]
    _refused(directory, files, "has 0 group files")


def test_metadata_without_a_target_is_refused():
    directory, files = kernel(1)
    metadata = json.loads(files["vector_add.json"])
    del metadata["target"]
    _refused(directory, dict(files, **{"vector_add.json": json.dumps(metadata).encode()}), "no target")
