"""The tar-safety rules, entry by entry, without any archive."""

import json
import tarfile

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.extract import rules


@pytest.mark.parametrize(("name", "expected"), [
    ("io.triton.cache/K/a.json", "io.triton.cache/K/a.json"),
    ("./io.triton.cache//K/./a.json", "io.triton.cache/K/a.json"),
    (".", ""),
])
def test_safe_names_are_normalized(name, expected):
    assert rules.safe_member_path(name) == expected


@pytest.mark.parametrize(("name", "fragment"), [
    ("/etc/passwd", "absolute"),
    ("io.triton.cache/../../x", "'..'"),
    ("..", "'..'"),
    ("a\x00b", "NUL"),
])
def test_unsafe_names_are_refused(name, fragment):
    with pytest.raises(rules.ExtractError, match=fragment):
        rules.safe_member_path(name)


def test_cache_scope_is_io_kind_cache_and_manifest():
    assert rules.in_cache_scope("io.triton.cache/K/a.json")
    assert rules.in_cache_scope("io.vllm.manifest/manifest.json")
    assert not rules.in_cache_scope("etc/passwd")
    assert not rules.in_cache_scope("io.triton.cachex/a")


@pytest.mark.parametrize(("kind", "fragment"), [
    (tarfile.CHRTYPE, "device"), (tarfile.BLKTYPE, "device"), (tarfile.FIFOTYPE, "FIFO"),
    (tarfile.GNUTYPE_SPARSE, "unsupported"),
])
def test_special_entry_types_are_refused(kind, fragment):
    member = tarfile.TarInfo("io.triton.cache/x")
    member.type = kind
    with pytest.raises(rules.ExtractError, match=fragment):
        rules.entry_kind(member)


@pytest.mark.parametrize(("mode", "expected"), [
    (0o4755, 0o555), (0o2644, 0o444), (0o1777, 0o555), (0o666, 0o444), (0o700, 0o555)])
def test_setid_sticky_and_every_write_bit_are_dropped(mode, expected):
    assert rules.file_mode(mode) == expected


@pytest.mark.parametrize(("path", "target"), [
    ("io.triton.cache/K/l", "a.json"),
    ("io.triton.cache/K/l", "../K2/a.json"),
    ("io.triton.cache/l", "K/l2"),  # the last step may itself be a link (checked on its own)
])
def test_symlinks_inside_the_tree_are_accepted(path, target):
    rules.check_symlink_target(path, target, {"io.triton.cache/K/l2", path})


@pytest.mark.parametrize(("path", "target", "fragment"), [
    ("io.triton.cache/l", "/etc/passwd", "absolute"),
    ("io.triton.cache/l", "../../x", "leaves dest"),
    ("io.triton.cache/l", "", "empty"),
    ("io.triton.cache/out", "hop/../../..", "passes through another symlink"),
])
def test_symlinks_leaving_the_tree_are_refused(path, target, fragment):
    with pytest.raises(rules.ExtractError, match=fragment):
        rules.check_symlink_target(path, target, {"io.triton.cache/hop", path})


def test_group_file_child_paths_point_at_the_extracted_directory():
    data = json.dumps({"child_paths": {"k.ptx": "/home/builder/.triton/cache/K/k.ptx"}}).encode()
    rewritten = json.loads(rules.rewrite_group_file(data, "/cache/io.triton.cache/K", "g"))
    assert rewritten == {"child_paths": {"k.ptx": "/cache/io.triton.cache/K/k.ptx"}}


@pytest.mark.parametrize("data", [b"{", b"[]", b'{"child_paths": [1]}', b'{"child_paths": {"a": 3}}'])
def test_malformed_group_files_are_refused(data):
    with pytest.raises(rules.ExtractError, match="malformed"):
        rules.rewrite_group_file(data, "/d", "io.triton.cache/K/__grp__k.json")
