"""Rough edges of hostile layers: whiteouts, sizes announced up front, memory per entry, over-long names.

Each refusal names its rule and leaves dest untouched.
"""

import gzip
import io
import os
import tarfile
import tracemalloc

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive, rules
from ansible_collections.gkm.cluster.plugins.module_utils.extract.streams import ForwardStream
from ansible_collections.gkm.cluster.plugins.module_utils.extract.tar_entries import pax_records, tar_entries
from tests.helpers import kcache_images as ki

K = "io.triton.cache/" + "A" * 52


def _extract(blob, dest, read_size=None, **kwargs):
    stream = io.BytesIO(blob)
    read = stream.read if read_size is None else (lambda n: stream.read(min(n, read_size)))
    return archive.extract_layer(read, ki.sha256_digest(blob), len(blob), str(dest), **kwargs)


def _layer(*entries):
    return ki.layer_bytes([ki.Entry(K + "/ok.json", b"{}"), *entries])[0]


@pytest.mark.parametrize("name", [K + "/.wh.old.cubin", K + "/.wh..wh..opq", "io.triton.cache/.wh.stale/x"])
def test_whiteouts_are_refused_by_their_rule(tmp_path, name):
    with pytest.raises(rules.ExtractError, match=r"rule whiteout.*single layer"):
        _extract(_layer(ki.Entry(name, b"")), tmp_path / "c")
    assert not (tmp_path / "c").exists()


def _announcing_header(name, announced, carried):
    """A gzip tar whose one member's header announces `announced` bytes but carries only `carried`."""
    info = tarfile.TarInfo(name)
    info.size = announced
    return gzip.compress(info.tobuf(tarfile.PAX_FORMAT) + bytes(carried), compresslevel=1)


def _largest_file_below(parent):
    sizes = [0]
    for dirpath, _dirs, files in os.walk(parent):
        sizes.extend(os.path.getsize(os.path.join(dirpath, name)) for name in files)
    return max(sizes)


def test_a_member_announcing_more_than_the_declared_size_is_refused_before_any_byte_is_written(tmp_path):
    blob = _announcing_header(K + "/bomb.cubin", 5 * 1024 ** 3, 4 * 1024 * 1024)
    largest = []
    stream = io.BytesIO(blob)

    def read(n):  # looks at what was written beside dest each time the extraction asks for bytes
        largest.append(_largest_file_below(str(tmp_path)))
        return stream.read(min(n, 16 * 1024))

    with pytest.raises(rules.ExtractError, match=r"rule declared_size .*cache-size-bytes label 1000000.*"
                                                 r"refused before writing any of it"):
        archive.extract_layer(read, ki.sha256_digest(blob), len(blob), str(tmp_path / "c"),
                              limits=rules.Limits(max_ratio=10 ** 6), declared_bytes=10 ** 6)
    assert max(largest) == 0
    assert not (tmp_path / "c").exists()


def test_the_declared_size_keeps_the_volumes_margin(tmp_path):
    data = os.urandom(300_000)
    stats = _extract(_layer(ki.Entry(K + "/k.cubin", data)), tmp_path / "c", declared_bytes=len(data))
    assert stats["bytes"] == len(data) + 2
    assert rules.byte_budget(rules.Limits(), None, 10 ** 9)[0] == int(1.5 * 10 ** 9) + rules.DECLARED_SIZE_MARGIN


def test_a_member_announcing_more_than_max_bytes_is_refused_by_that_rule(tmp_path):
    blob = _announcing_header(K + "/bomb.cubin", 5 * 1024 ** 3, 1024)
    with pytest.raises(rules.ExtractError, match=r"rule max_bytes=1000000: .*refused before writing"):
        _extract(blob, tmp_path / "c", limits=rules.Limits(max_bytes=10 ** 6, max_ratio=10 ** 6))


def test_memory_does_not_grow_with_the_entry_count(tmp_path):
    """20,000 empty entries: the reader keeps nothing per entry it skipped (tarfile kept ~3 KB each)."""
    names = ("junk/%06d" % i for i in range(20_000))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            tar.addfile(tarfile.TarInfo(name))
        tar.addfile(tarfile.TarInfo(K + "/empty.cubin"))
    blob = gzip.compress(raw.getvalue(), compresslevel=1)
    del raw
    tracemalloc.start()
    try:
        stats = _extract(blob, tmp_path / "c")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats["files"] == 1
    assert peak < 8 * 1024 * 1024


def test_empty_files_cost_little_memory_each(tmp_path):
    """What the extraction keeps per written file (its path and size, for the marker): well under 1 KB."""
    blob = ki.layer_bytes([ki.Entry("io.triton.cache/k%05d/f" % i) for i in range(2_000)], compresslevel=1)[0]
    tracemalloc.start()
    try:
        _extract(blob, tmp_path / "c")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak / 2_000 < 1024


def test_a_name_over_name_max_is_refused_by_a_rule_not_an_errno(tmp_path):
    with pytest.raises(rules.ExtractError, match=r"rule name_max: .* 4000 bytes; Linux allows 255"):
        _extract(_layer(ki.Entry(K + "/" + "n" * 4000, b"x")), tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_a_path_over_path_max_is_refused_by_a_rule_not_an_errno(tmp_path):
    deep = "/".join(["d" * 200] * 21)
    with pytest.raises(rules.ExtractError, match=r"rule path_max: .*Linux allows 4095"):
        _extract(_layer(ki.Entry(K + "/" + deep, b"x")), tmp_path / "c")


def test_gnu_long_names_and_links_are_read(tmp_path):
    raw = io.BytesIO()
    long_dir = K + "/" + "/".join(["x" * 120] * 3)
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(long_dir + "/kernel.cubin")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
        link = tarfile.TarInfo(long_dir + "/alias.cubin")
        link.type, link.linkname = tarfile.SYMTYPE, long_dir + "/kernel.cubin"
        tar.addfile(link)
    stream = ForwardStream(iter([raw.getvalue()]), 10 ** 6)
    entries = [(e.name, e.type, e.size, e.linkname) for e in tar_entries(stream)]
    assert entries == [(long_dir + "/kernel.cubin", tarfile.REGTYPE, 3, ""),
                       (long_dir + "/alias.cubin", tarfile.SYMTYPE, 0, long_dir + "/kernel.cubin")]


@pytest.mark.parametrize("record", [b"5 x\n", b"12 path=abc\n\n", b"x path=a\n", b"30 path=a\n"])
def test_malformed_pax_records_are_refused(record):
    with pytest.raises(rules.ExtractError, match="pax header record"):
        pax_records(record)
