"""A real Triton cache (tools/triton_kernels): compiled once by the pinned Triton in its own venv, then read,
moved, copied and relocated; Triton itself says hit or miss. Skipped when the Triton venv is not there.

The venv is $GKM_TRITON_PY's, else the checkout's `.venv-triton` (make venv-triton). Two small kernels for
cuda:90 keep the compile near a second; no GPU is needed.
"""

import json
import os
import shutil
import subprocess

import pytest

from tests.helpers.paths import ROOT
from tools.triton_kernels import layout, relocate, scan
from tools.triton_kernels.venv import HINT, triton_python

TRITON_PY = triton_python()
KERNELS = ("vector_add", "row_softmax")

pytestmark = pytest.mark.skipif(TRITON_PY is None, reason="no Triton venv: " + HINT)


def compile_in(cache_dir, command="compile"):
    argv = [TRITON_PY, "-m", "tools.triton_kernels", command, "--target", "cuda:90", "--cache-dir", str(cache_dir)]
    for label in KERNELS:
        argv += ["--only", label]
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """The cache as compiled, and Triton's verdicts on that first compile."""
    cache_dir = tmp_path_factory.mktemp("triton") / "compiled"
    return cache_dir, compile_in(cache_dir)


@pytest.fixture
def moved(compiled, tmp_path):
    """A copy of the compiled cache at another path, while the compiled one still exists (as on a builder)."""
    destination = tmp_path / "moved"
    shutil.copytree(compiled[0], destination)
    return destination


def test_a_first_compile_misses_every_kernel_and_a_second_hits_every_one(compiled):
    cache_dir, first = compiled
    assert [k["label"] for k in first["kernels"]] == list(KERNELS)
    assert first["misses"] == len(KERNELS) and first["triton_version"] == "3.9.0"
    predicted = compile_in(cache_dir, "predict")
    assert predicted["hits"] == len(KERNELS) and {k["state"] for k in predicted["kernels"]} == {layout.RESOLVES}
    assert [k["hash"] for k in predicted["kernels"]] == [k["hash"] for k in first["kernels"]]
    again = compile_in(cache_dir)
    assert again["hits"] == len(KERNELS)
    assert [k["hash"] for k in again["kernels"]] == [k["hash"] for k in first["kernels"]]


def test_each_kernel_directory_holds_its_stages_its_metadata_and_its_group(compiled):
    kernels = scan.scan(compiled[0])
    assert sorted(k["name"] for k in kernels) == sorted(KERNELS)
    for kernel in kernels:
        assert kernel["state"] == layout.RESOLVES and kernel["hash_matches_dir"]
        assert sorted(kernel["files"].values()) == ["asm:ptx", "binary:cubin", "group", "ir:llir", "ir:source",
                                                    "ir:ttgir", "ir:ttir", "metadata"]
        facts = kernel["facts"]
        assert (facts["backend"], facts["arch"], facts["warp_size"]) == ("cuda", 90, 32)
        assert facts["triton_version"] == "3.9.0" and facts["name"] == kernel["name"]
    hashes = {k["hash"] for k in compiled[1]["kernels"]}
    assert {k["facts"]["hash"] for k in kernels} == hashes


def test_a_copy_elsewhere_reads_the_compiled_paths_and_a_moved_one_misses_everything(compiled, moved, tmp_path):
    assert {k["state"] for k in scan.scan(moved)} == {layout.FOREIGN}
    alone = tmp_path / "alone"
    os.rename(moved, alone)
    compiled_dir = compiled[0]
    hidden = compiled_dir.with_name("hidden")
    os.rename(compiled_dir, hidden)  # the compiled path gone, as in a pod that mounts the cache elsewhere
    try:
        assert {k["state"] for k in scan.scan(alone)} == {layout.DANGLING}
        predicted = compile_in(alone, "predict")
        assert predicted["misses"] == len(KERNELS)
        assert {k["state"] for k in predicted["kernels"]} == {layout.DANGLING}
        assert all("moved" in k["reason"] for k in predicted["kernels"])
        result = compile_in(alone)
        assert result["misses"] == len(KERNELS)
    finally:
        os.rename(hidden, compiled_dir)


def test_a_relocated_cache_resolves_where_it_is_and_hits(compiled, moved, tmp_path):
    local = tmp_path / "pod-local"
    copied = relocate.relocate(moved, local)
    assert copied["groups"] == len(KERNELS)
    assert (copied["files"], copied["bytes"]) == scan.tree_bytes(moved)
    for kernel in scan.scan(local):
        assert kernel["state"] == layout.RESOLVES
        with open(local / kernel["hash_dir"] / ("__grp__%s.json" % kernel["name"])) as handle:
            paths = layout.parse_group(handle.read()).values()
        assert all(path.startswith(str(local / kernel["hash_dir"]) + "/") for path in paths)
    compiled_dir = compiled[0]
    hidden = compiled_dir.with_name("hidden-2")
    os.rename(compiled_dir, hidden)
    try:
        assert compile_in(local)["hits"] == len(KERNELS)
    finally:
        os.rename(hidden, compiled_dir)


def test_rewriting_in_place_makes_a_moved_cache_resolve(moved):
    assert relocate.rewrite_in_place(moved) == len(KERNELS)
    assert {k["state"] for k in scan.scan(moved)} == {layout.RESOLVES}
    assert not [name for _base, _dirs, files in os.walk(moved) for name in files if name.endswith(".gkm-tmp")]


def test_relocating_onto_an_existing_directory_is_refused(compiled, tmp_path):
    (tmp_path / "there").mkdir()
    with pytest.raises(FileExistsError):
        relocate.relocate(compiled[0], tmp_path / "there")


def test_an_overlay_of_group_files_hits_reading_the_read_only_cache(compiled, moved, tmp_path):
    os.chmod(moved, 0o555)  # the mounted cache; its kernel directories stay as they are
    local = tmp_path / "pod-groups"
    compiled_dir = compiled[0]
    hidden = compiled_dir.with_name("hidden-3")
    os.rename(compiled_dir, hidden)
    try:
        written = relocate.overlay(moved, local)
        assert written["groups"] == len(KERNELS)
        kernels = scan.scan(local)
        assert {k["state"] for k in kernels} == {layout.FOREIGN}  # on purpose: the files are the mount's
        assert all(list(k["files"].values()) == ["group"] for k in kernels)
        before = sorted(os.path.join(base, name) for base, _dirs, files in os.walk(moved) for name in files)
        # One kernel the cache lacks: its group taken out of the overlay, it is compiled into the writable place.
        lacking = next(k for k in kernels if k["name"] == "row_softmax")
        shutil.rmtree(local / lacking["hash_dir"])
        predicted = compile_in(local, "predict")
        assert {k["label"]: k["state"] for k in predicted["kernels"]} == {"vector_add": layout.FOREIGN,
                                                                          "row_softmax": None}
        result = compile_in(local)
        assert {k["label"]: k["hit"] for k in result["kernels"]} == {"vector_add": True, "row_softmax": False}
        assert sorted(os.path.join(base, name) for base, _dirs, files in os.walk(moved) for name in files) == before
        recompiled = {k["name"]: k for k in scan.scan(local)}["row_softmax"]
        assert recompiled["state"] == layout.RESOLVES and "binary:cubin" in recompiled["files"].values()
    finally:
        os.rename(hidden, compiled_dir)
        os.chmod(moved, 0o755)


def warm_up(cache_dir):
    """The workload image's entry point, as a pod runs it: TRITON_CACHE_DIR and GKM_WARMUP_TARGET from the
    environment; (exit code, its per-kernel lines, its summary)."""
    argv = [TRITON_PY, "-m", "tools.triton_kernels", "warmup"]
    for label in KERNELS:
        argv += ["--only", label]
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    env.update(TRITON_CACHE_DIR=str(cache_dir), GKM_WARMUP_TARGET="cuda:90")
    run = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    return run.returncode, lines[:-1], lines[-1]


def test_the_warm_up_prints_triton_s_verdict_per_kernel_and_a_summary(compiled, moved, tmp_path):
    status, kernels, summary = warm_up(moved)
    # The copy's groups still name the compiled directory, which exists: Triton hits.
    assert status == 0 and [(k["kernel"], k["result"]) for k in kernels] == [(label, "hit") for label in KERNELS]
    assert (summary["hits"], summary["misses"], summary["errors"]) == (len(KERNELS), 0, 0)
    assert summary["cache_dir"] == str(moved) and summary["target"] == "cuda:90" and summary["summary"] is True
    assert summary["seconds"] == pytest.approx(sum(k["seconds"] for k in kernels), abs=1e-3)
    # The wall clock around the warm-up, which a benchmark reads against a pod's start.
    assert summary["kernel_set"] == "small" and summary["started_at"] + summary["seconds"] <= summary["ready_at"]
    # A cache directory that cannot be written: every kernel is reported with Triton's error, and the exit code says so.
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    status, kernels, summary = warm_up(blocked)
    assert status == 1 and [k["result"] for k in kernels] == ["error"] * len(KERNELS), kernels
    assert all(k["error"].startswith(("FileExistsError", "NotADirectoryError")) for k in kernels), kernels
    assert (summary["hits"], summary["misses"], summary["errors"]) == (0, 0, len(KERNELS))
