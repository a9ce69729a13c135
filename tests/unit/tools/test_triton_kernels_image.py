"""Images of real compiled caches (tools/triton_kernels/store.py, image.py, CacheSpec(compiled=True)).

The pure rules run always. The rest compiles the kernel set with the pinned Triton once per machine (the store
keeps it by input hash: about 1.5 s per target cold, nothing warm) and is skipped without the Triton venv. The
central check: a compiled image extracted by the collection's own extractor is a cache Triton hits in full, by
Triton's own verdict, and the image's labels and manifest.json read back through the collection's parsers.
"""

import io
import json
import os
import subprocess
import threading

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive
from ansible_collections.gkm.cluster.plugins.module_utils.oci import metadata
from tests.helpers import kcache_images as ki
from tests.helpers.paths import ROOT
from tools.triton_kernels import image, layout, scan, store
from tools.triton_kernels.venv import HINT, triton_python

TRITON_PY = triton_python()
needs_triton = pytest.mark.skipif(TRITON_PY is None, reason="no Triton venv: " + HINT)


def _facts(hash_hex, arch="gfx90a", backend="hip"):
    return {"name": "k", "hash": hash_hex, "backend": backend, "arch": arch, "warp_size": 64,
            "triton_version": "3.9.0", "num_warps": 4, "num_stages": 2, "shared": 0}


def test_mcv_manifest_entry_has_mcvs_fields_with_the_arch_as_a_string_and_ptx_zero_for_none():
    entry = image.mcv_manifest_entry(dict(_facts("ab" * 32, arch=90, backend="cuda"), warp_size=32))
    assert entry == {"hash": "ab" * 32, "backend": "cuda", "arch": "90", "warp_size": 32, "ptx_version": 0,
                     "num_stages": 2, "num_warps": 4, "debug": False}
    assert image.mcv_manifest_entry(dict(_facts("cd" * 32), ptx_version=84))["ptx_version"] == 84


def test_select_kernels_is_stable_per_seed_and_differs_between_seeds():
    kernels = [{"facts": _facts("%02x" % n * 32)} for n in (5, 1, 4, 2, 3, 6)]
    picked = {seed: [k["facts"]["hash"][:2] for k in image.select_kernels(kernels, 3, seed)] for seed in (0, 1, 7)}
    assert picked[0] == ["01", "02", "03"] and picked[1] == ["02", "03", "04"] and picked[7] == picked[1]
    assert len(image.select_kernels(kernels)) == 6 and len(image.select_kernels(kernels, 9)) == 6


def test_labels_are_mcvs_then_ours():
    labels = image.labels("vllm", [_facts("ab" * 32), _facts("cd" * 32)], 1234, {"triton_key": "f" * 64})
    assert labels["cache.vllm.image/entry-count"] == "2" and labels["cache.vllm.image/cache-size-bytes"] == "1234"
    assert json.loads(labels["cache.vllm.image/summary"]) == {
        "targets": [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]}
    assert labels[image.LABEL_TRITON_VERSION] == "3.9.0" and labels[image.LABEL_TRITON_KEY] == "f" * 64
    assert labels[image.LABEL_GROUP_ROOT] == image.GROUP_ROOT
    # No compile seconds unless the build recorded every kernel's.
    assert image.LABEL_COMPILE_SECONDS not in labels


def test_the_compile_seconds_label_sums_the_image_kernels_cold_compiles_and_the_collection_reads_it():
    build = {"kernels": [{"hash": "ab" * 32, "seconds": 0.25}, {"hash": "cd" * 32, "seconds": 1.5},
                         {"hash": "ef" * 32, "seconds": 9.0}]}
    labels = image.labels("triton", [_facts("ab" * 32), _facts("cd" * 32)], 1, build)
    assert labels[image.LABEL_COMPILE_SECONDS] == "1.750"
    # What the collection reads back: the seconds per kernel a hit saves.
    assert metadata.framework_facts(labels, 2)[1] == 0.875


def test_the_store_key_follows_the_target_the_python_and_the_inputs(tmp_path):
    python = os.path.join(ROOT, ".venv", "bin", "python")
    assert store.entry_name("cuda:90", python).startswith("cuda-90_")
    assert store.entry_name("cuda:90", python, "warm-start").startswith("cuda-90-warm-start_")
    assert store.inputs_key("cuda:90", python, "warm-start") != store.inputs_key("cuda:90", python)
    assert store.inputs_key("cuda:90", python) == store.inputs_key("cuda:90", python)
    assert store.inputs_key("cuda:90", python) != store.inputs_key("hip:gfx90a", python)
    # Two venvs of one interpreter (each bin/python links to it) are two Triton installs; a link to a venv's
    # directory (.venv-triton) is that venv.
    for venv in ("pinned", "previous"):
        (tmp_path / venv / "bin").mkdir(parents=True)
        (tmp_path / venv / "bin" / "python").symlink_to(os.path.realpath(python))
    (tmp_path / ".venv-triton").symlink_to(tmp_path / "pinned")
    pinned, previous = (str(tmp_path / venv / "bin" / "python") for venv in ("pinned", "previous"))
    assert store.inputs_key("cuda:90", pinned) != store.inputs_key("cuda:90", previous)
    assert store.inputs_key("cuda:90", str(tmp_path / ".venv-triton" / "bin" / "python")) == store.inputs_key(
        "cuda:90", pinned)


def test_the_store_says_how_to_get_triton_when_there_is_none(monkeypatch, tmp_path):
    monkeypatch.delenv("GKM_TRITON_PY", raising=False)
    monkeypatch.setattr(store, "triton_python", lambda: None)
    with pytest.raises(store.StoreError, match="make venv-triton"):
        store.compiled_cache("cuda:90", root=str(tmp_path))


def _predict(cache_dir, target, *options):
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    run = subprocess.run([TRITON_PY, "-m", "tools.triton_kernels", "predict", "--target", target, "--cache-dir",
                          str(cache_dir), *options], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def _extract(spec, dest, rewrite_groups=True):
    entries, labels = ki.cache_entries(spec)
    blob, _diff_id = ki.layer_bytes(entries)
    archive.extract_layer(io.BytesIO(blob).read, ki.sha256_digest(blob), len(blob), str(dest),
                          rewrite_groups=rewrite_groups, declared_bytes=int(labels["cache.%s.image/cache-size-bytes"
                                                                                   % spec.kind]))
    return entries, labels


@needs_triton
def test_the_store_compiles_once_and_then_reuses():
    first, info = store.compiled_cache("hip:gfx90a")
    again, reused = store.compiled_cache("hip:gfx90a")
    assert first == again and reused["reused"] is True and reused["seconds"] < 0.5
    assert info["build"]["triton_version"] == "3.9.0" and len(info["build"]["kernels"]) == 6
    kernels = scan.scan(os.path.join(first, "cache"))
    assert len(kernels) == 6 and {k["state"] for k in kernels} == {layout.RESOLVES}


@needs_triton
@pytest.mark.parametrize(("backend", "target"), [("cuda", "cuda:90"), ("hip", "hip:gfx90a")])
def test_an_extracted_compiled_image_is_a_cache_triton_hits_in_full(tmp_path, backend, target):
    spec = ki.CacheSpec(compiled=True, backend=backend, kernels=6)
    entries, labels = _extract(spec, tmp_path / "cache")
    predicted = _predict(tmp_path / "cache" / "io.triton.cache", target)
    assert predicted["hits"] == 6 and {k["state"] for k in predicted["kernels"]} == {layout.RESOLVES}

    facts = metadata.parse_cache_metadata({"config": {"Labels": labels}})
    assert facts["kind"] == "triton" and facts["entry_count"] == 6
    assert facts["targets"] == [{"backend": backend, "arch": "90" if backend == "cuda" else "gfx90a",
                                 "warp_size": 32 if backend == "cuda" else 64}]
    assert facts["size_bytes"] == sum(len(e.data) for e in entries)
    manifest = metadata.parse_manifest_json(
        (tmp_path / "cache" / "io.triton.manifest" / "manifest.json").read_bytes())
    assert sorted(e["hash"] for e in manifest) == sorted(k["hash"] for k in predicted["kernels"])
    assert labels[image.LABEL_TRITON_VERSION] == predicted["triton_version"]


@needs_triton
def test_the_images_groups_name_the_recorded_root_so_a_plain_copy_misses(tmp_path):
    spec = ki.CacheSpec(compiled=True, backend="cuda", kernels=2, seed=3)
    _entries, labels = _extract(spec, tmp_path / "cache", rewrite_groups=False)
    groups = list((tmp_path / "cache").rglob("__grp__*.json"))
    assert len(groups) == 2
    for group in groups:
        for child in json.loads(group.read_text())["child_paths"].values():
            assert child.startswith(labels[image.LABEL_GROUP_ROOT] + "/" + group.parent.name + "/")
    predicted = _predict(tmp_path / "cache" / "io.triton.cache", "cuda:90")
    states = [k["state"] for k in predicted["kernels"]]
    assert states.count(layout.DANGLING) == 2 and states.count(None) == 4 and predicted["hits"] == 0


@needs_triton
def test_two_seeds_make_two_different_real_caches_of_one_target():
    one = ki.cache_entries(ki.CacheSpec(compiled=True, backend="hip", kernels=2, seed=0))[0]
    two = ki.cache_entries(ki.CacheSpec(compiled=True, backend="hip", kernels=2, seed=1))[0]
    assert {e.name for e in one} != {e.name for e in two}
    with pytest.raises(ValueError, match="has 6 kernels"):
        ki.cache_entries(ki.CacheSpec(compiled=True, backend="hip", kernels=7))


@needs_triton
def test_the_warm_start_set_is_56_distinct_kernels_of_the_three_functions(tmp_path):
    # Triton's own keys, computed without compiling: every configuration is a kernel of its own in a cache.
    predicted = _predict(tmp_path, "hip:gfx90a", "--set", "warm-start")
    kernels = predicted["kernels"]
    assert predicted["kernel_set"] == "warm-start" and len(kernels) == 56 and predicted["hits"] == 0
    assert len({k["label"] for k in kernels}) == len({k["hash_dir"] for k in kernels}) == 56
    assert {k["name"] for k in kernels} == {"vector_add", "row_softmax", "matmul"}


@needs_triton
def test_concurrent_builders_compile_a_target_once(tmp_path):
    """Two builders (threads with their own lock file handles, as xdist workers or lanes have) asking at once for a
    target missing from the store: one compiles it, the other waits and reuses it."""
    results = []

    def build():
        results.append(store.compiled_cache("cuda:90", root=str(tmp_path)))

    builders = [threading.Thread(target=build) for _index in range(2)]
    for builder in builders:
        builder.start()
    for builder in builders:
        builder.join(timeout=600)
    assert len(results) == 2 and results[0][0] == results[1][0]
    assert sorted(info["reused"] for _directory, info in results) == [False, True]
    assert len(scan.scan(os.path.join(results[0][0], "cache"))) == 6
