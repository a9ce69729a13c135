"""Streaming extraction of builder-made layers from memory (no registry): atomicity, limits, marker."""

import io
import os
import stat
import tarfile
import threading

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive, rules, tree
from tests.helpers import kcache_images as ki


def _extract(blob, dest, digest=None, size=None, **kwargs):
    stream = io.BytesIO(blob)
    return archive.extract_layer(stream.read, digest or ki.sha256_digest(blob), len(blob) if size is None else size,
                                 str(dest), **kwargs)


def _snapshot(root):
    result = {}
    for dirpath, _dirnames, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                result[os.path.relpath(path, root)] = f.read()
    return result


@pytest.fixture
def populated(tmp_path):
    """dest holding a first extraction, and its contents."""
    blob, _diff_id = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=2))[0])
    dest = tmp_path / "cache"
    _extract(blob, dest, marker={"digest": "sha256:first"})
    return dest, _snapshot(dest)


def test_extraction_writes_only_the_cache_scope_and_a_marker(tmp_path):
    entries, _labels = ki.cache_entries(ki.CacheSpec(kernels=2))
    entries.append(ki.Entry("etc/motd", b"outside the cache scope"))
    blob, _diff_id = ki.layer_bytes(entries)
    stats = _extract(blob, tmp_path / "c")
    assert sorted(os.listdir(tmp_path / "c")) == [".gkm-cache.json", "io.triton.cache", "io.triton.manifest"]
    assert stats["files"] == len(entries) - 1
    assert stats["group_files_rewritten"] == 2
    assert tree.tree_intact(str(tmp_path / "c"), tree.read_marker(str(tmp_path / "c")))


def test_whole_layer_extracts_everything(tmp_path):
    blob, _diff_id = ki.layer_bytes([ki.Entry("etc/motd", b"hi"), ki.Entry("io.triton.cache/K/a", b"a")])
    _extract(blob, tmp_path / "c", whole_layer=True)
    assert (tmp_path / "c" / "etc" / "motd").read_bytes() == b"hi"


def test_setuid_bits_are_stripped_and_links_inside_are_kept(tmp_path):
    blob, _diff_id = ki.layer_bytes([
        ki.Entry("io.triton.cache/K/launcher.so", b"elf", mode=0o4755),
        ki.Entry("io.triton.cache/K/copy.so", type=tarfile.LNKTYPE, linkname="io.triton.cache/K/launcher.so"),
        ki.Entry("io.triton.cache/K/alias.so", type=tarfile.SYMTYPE, linkname="launcher.so"),
    ])
    stats = _extract(blob, tmp_path / "c")
    kdir = tmp_path / "c" / "io.triton.cache" / "K"
    assert stats["setid_bits_stripped"] == 1
    assert (kdir / "launcher.so").stat().st_mode & 0o7777 == 0o555
    assert (kdir / "copy.so").stat().st_ino == (kdir / "launcher.so").stat().st_ino
    assert os.readlink(kdir / "alias.so") == "launcher.so"


@pytest.mark.parametrize("variant", [
    "path_traversal", "absolute_path", "symlink_escape", "symlink_chain", "hardlink_escape", "device", "fifo",
    "truncated_blob", "not_gzip", "malformed_group_file",
])
def test_hostile_layer_leaves_dest_exactly_as_it_was(populated, variant):
    dest, before = populated
    blob, _labels, _opts, fragment = ki.hostile_layer(variant)
    with pytest.raises(rules.ExtractError, match=fragment):
        _extract(blob, dest)
    assert _snapshot(dest) == before
    assert [n for n in os.listdir(dest.parent) if ".gkm-tmp-" in n] == []


def test_digest_mismatch_is_refused(populated):
    dest, before = populated
    blob, _diff_id = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=1, seed=5))[0])
    with pytest.raises(rules.ExtractError, match="digest mismatch"):
        _extract(blob, dest, digest="sha256:" + "0" * 64)
    assert _snapshot(dest) == before


def test_blob_longer_than_descriptor_is_refused(populated):
    dest, before = populated
    blob, _diff_id = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=1, seed=5))[0])
    with pytest.raises(rules.ExtractError, match="larger than"):
        _extract(blob, dest, size=len(blob) - 10)
    assert _snapshot(dest) == before


def test_expansion_ratio_stops_a_decompression_bomb(tmp_path):
    blob, _labels, _opts, _fragment = ki.hostile_layer("zip_bomb")
    with pytest.raises(rules.ExtractError, match=r"rule max_expansion_ratio.*expands beyond"):
        _extract(blob, tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_file_and_byte_limits(tmp_path):
    blob, _diff_id = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=2))[0])
    with pytest.raises(rules.ExtractError, match="max_files=5"):
        _extract(blob, tmp_path / "a", limits=rules.Limits(max_files=5))
    with pytest.raises(rules.ExtractError, match="max_bytes=1000"):
        _extract(blob, tmp_path / "b", limits=rules.Limits(max_bytes=1000))


def test_foreign_non_empty_dest_is_never_replaced(tmp_path):
    dest = tmp_path / "home"
    dest.mkdir()
    (dest / "notes.txt").write_text("mine")
    blob, _diff_id = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=1))[0])
    with pytest.raises(rules.ExtractError, match="not written by this module"):
        _extract(blob, dest)
    assert os.listdir(dest) == ["notes.txt"]


def test_stale_temporary_trees_of_a_killed_run_are_removed(populated):
    dest, _before = populated
    stale = dest.parent / (".cache" + ".gkm-tmp-abc123")
    (stale / "io.triton.cache").mkdir(parents=True)
    blob, _diff_id = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=1, seed=9))[0])
    _extract(blob, dest)
    assert not stale.exists()


def test_tree_fingerprint_notices_a_changed_file(populated):
    dest, _before = populated
    marker = tree.read_marker(str(dest))
    victim = next(p for p in dest.rglob("*.cubin"))
    victim.write_bytes(b"short")
    assert not tree.tree_intact(str(dest), marker)


def test_tree_is_readable_by_any_uid_and_writable_by_none_whatever_the_umask(tmp_path):
    """The workload reading the cache is not the extractor's uid: group/other read every file, cross every dir; and
    nobody writes the published tree, its owner included (issue 31, class 1)."""
    blob, _diff_id = ki.layer_bytes([
        ki.Entry("io.triton.cache/K", type=tarfile.DIRTYPE, mode=0o700),
        ki.Entry("io.triton.cache/K/private.json", b"{}", mode=0o600),
        ki.Entry("io.triton.cache/K/tool.so", b"elf", mode=0o6777),
        ki.Entry("io.triton.cache/K/sticky.bin", b"s", mode=0o1666),
        ki.Entry("io.triton.cache/K/copy.so", type=tarfile.LNKTYPE, linkname="io.triton.cache/K/tool.so"),
        ki.Entry("io.triton.manifest/deep/er/manifest.json", b"{}", mode=0o640),
    ])
    previous = os.umask(0o077)
    try:
        _extract(blob, tmp_path / "c")
    finally:
        os.umask(previous)
    modes = {}
    for dirpath, dirnames, filenames in os.walk(tmp_path / "c"):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            modes[os.path.relpath(path, tmp_path / "c")] = os.lstat(path).st_mode
    assert stat.S_IMODE(os.lstat(tmp_path / "c").st_mode) == 0o555
    assert {name: stat.S_IMODE(mode) for name, mode in modes.items()} == {
        ".gkm-cache.json": 0o444,
        "io.triton.cache": 0o555,
        "io.triton.cache/K": 0o555,
        "io.triton.cache/K/private.json": 0o444,
        "io.triton.cache/K/tool.so": 0o555,
        "io.triton.cache/K/copy.so": 0o555,
        "io.triton.cache/K/sticky.bin": 0o444,
        "io.triton.manifest": 0o555,
        "io.triton.manifest/deep": 0o555,
        "io.triton.manifest/deep/er": 0o555,
        "io.triton.manifest/deep/er/manifest.json": 0o444,
    }


def test_the_gunzip_helper_thread_stops_with_every_extraction(tmp_path):
    """Nothing outlives an extraction, refused or not: the growth across extractions in one process came from
    threads and their handoffs."""
    blob, _diff_id = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=2))[0])
    bad = ki.layer_bytes([ki.Entry("io.triton.cache/K/.wh..wh..opq")])[0]
    before = threading.active_count()
    for index in range(3):
        _extract(blob, tmp_path / ("ok%d" % index))
        with pytest.raises(rules.ExtractError, match="rule whiteout"):
            _extract(bad, tmp_path / ("bad%d" % index))
    assert threading.active_count() == before
