"""The kernel-use sidecar (plugins/module_utils/kernels/usage.py, usage_main.py) on an overlay shaped like Triton's:
hits told by a group's access time, misses by the kernel directories the overlay did not write."""

import json
import os

from ansible_collections.gkm.cluster.plugins.module_utils.kernels import overlay, usage, usage_main


def _kernel(root, hash_dir, name, target=("hip", "gfx90a"), version="3.9.0"):
    kernel_dir = root / hash_dir
    kernel_dir.mkdir(parents=True)
    (kernel_dir / ("%s.hsaco" % name)).write_bytes(b"x")
    (kernel_dir / ("%s.json" % name)).write_text(json.dumps({
        "name": name, "triton_version": version, "target": {"backend": target[0], "arch": target[1]}}))
    children = {n: str(kernel_dir / n) for n in ("%s.hsaco" % name, "%s.json" % name)}
    (kernel_dir / ("__grp__%s.json" % name)).write_text(json.dumps({"child_paths": children}))
    return kernel_dir


def _read_group(into, hash_dir, name):
    """What Triton's get_group does to a group file: open and read it (its access time moves past its mtime)."""
    path = into / hash_dir / ("__grp__%s.json" % name)
    status = os.stat(path)
    # The same file read a second later: set explicitly, as a filesystem's clock may not tick between two calls.
    os.utime(path, ns=(status.st_mtime_ns + 10 ** 9, status.st_mtime_ns))


def _overlay(tmp_path, names=("vector_add", "row_softmax", "matmul")):
    cache, into = tmp_path / "cache", tmp_path / "into"
    for index, name in enumerate(names):
        _kernel(cache, "CACHED%d" % index, name)
    overlay.write_overlay(str(cache), str(into))
    return cache, into


def test_no_marker_no_report(tmp_path):
    assert usage.observe(str(tmp_path)) is None


def test_a_fresh_overlay_reports_no_hit_and_no_miss(tmp_path):
    _cache, into = _overlay(tmp_path)
    assert usage.observe(str(into)) == {usage.REPORT_KEY: 1, "overlaid": 3, "hits": 0, "misses": 0, "compiled": []}


def test_groups_read_are_hits_and_stat_alone_is_not(tmp_path):
    _cache, into = _overlay(tmp_path)
    _read_group(into, "CACHED0", "vector_add")
    _read_group(into, "CACHED2", "matmul")
    first = usage.observe(str(into))
    assert (first["hits"], first["misses"]) == (2, 0)
    # Observing again reads nothing: the sidecar's own look is not a hit.
    assert usage.observe(str(into)) == first


def test_a_kernel_compiled_in_the_pod_is_a_miss_named_with_its_metadata(tmp_path):
    _cache, into = _overlay(tmp_path, names=("vector_add", "row_softmax"))
    _kernel(into, "COMPILED", "matmul")
    # Triton's launcher and a compile in progress have no group: not kernels.
    (into / "LAUNCHER").mkdir()
    (into / "LAUNCHER" / "__triton_launcher.so").write_bytes(b"\x7fELF")
    report = usage.observe(str(into))
    assert report["misses"] == 1
    assert report["compiled"] == [{"name": "matmul", "hash_dir": "COMPILED", "cached_name": False, "left_out": False,
                                   "target": "hip:gfx90a", "triton_version": "3.9.0"}]


def test_a_miss_under_a_cached_name_and_one_left_out_say_so(tmp_path):
    cache, into = _overlay(tmp_path, names=("vector_add",))
    broken = _kernel(cache, "BROKEN", "row_softmax")
    os.remove(broken / "row_softmax.hsaco")
    overlay.write_overlay(str(cache), str(into))
    _kernel(into, "BROKEN", "row_softmax")
    _kernel(into, "OTHERKEY", "vector_add", version="3.8.0", target=("cuda", "90"))
    compiled = {item["hash_dir"]: item for item in usage.observe(str(into))["compiled"]}
    assert compiled["BROKEN"]["left_out"] and not compiled["BROKEN"]["cached_name"]
    assert compiled["OTHERKEY"]["cached_name"] and not compiled["OTHERKEY"]["left_out"]
    assert (compiled["OTHERKEY"]["target"], compiled["OTHERKEY"]["triton_version"]) == ("cuda:90", "3.8.0")


def test_the_listed_misses_are_bounded_not_their_count(tmp_path):
    _cache, into = _overlay(tmp_path, names=("vector_add",))
    for index in range(usage.MAX_LISTED + 5):
        _kernel(into, "C%03d" % index, "k%d" % index)
    report = usage.observe(str(into))
    assert report["misses"] == usage.MAX_LISTED + 5 and len(report["compiled"]) == usage.MAX_LISTED


def test_unreadable_metadata_leaves_the_miss_without_facts(tmp_path):
    _cache, into = _overlay(tmp_path, names=("vector_add",))
    _kernel(into, "COMPILED", "matmul")
    (into / "COMPILED" / "matmul.json").write_text("[1]")
    (item,) = usage.observe(str(into))["compiled"]
    assert "target" not in item and "triton_version" not in item


def test_main_prints_a_line_on_each_change_and_one_when_stopped(tmp_path, capsys):
    _cache, into = _overlay(tmp_path, names=("vector_add", "matmul"))
    looks = []

    def sleep(_seconds):
        looks.append(1)
        if len(looks) == 1:
            _read_group(into, "CACHED0", "vector_add")
        elif len(looks) == 3:
            _kernel(into, "COMPILED", "row_softmax")
            raise usage_main._Stopped()

    assert usage_main.main([str(into), "--interval", "0"], sleep=sleep) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["hits"], line["misses"]) for line in lines] == [(0, 0), (1, 0), (1, 1)]


def test_main_once_without_an_overlay(tmp_path, capsys):
    assert usage_main.main([str(tmp_path), "--once"]) == 0
    assert json.loads(capsys.readouterr().out)["no_overlay"] is True
