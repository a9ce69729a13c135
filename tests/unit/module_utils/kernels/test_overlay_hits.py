"""The group overlay with the real, pinned Triton: a cache the collection's extractor wrote, then mounted read-only
under another path (as a pod sees it), hits in full through the overlay, and a kernel the cache lacks is compiled
into the overlay's writable directory as one miss, the mount untouched.

Hit or miss is Triton's own verdict (its compilation listener, tools/triton_kernels/compile_run.py), each compile in
a fresh process of the Triton venv as a pod's would be. Skipped without the Triton venv (make venv-triton); the
compiled caches come from the store (tools/triton_kernels/store.py), compiled once per machine.
"""

import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive
from ansible_collections.gkm.cluster.plugins.module_utils.kernels import overlay
from tests.helpers import kcache_images as ki
from tests.helpers.paths import ROOT
from tools.triton_kernels import layout
from tools.triton_kernels.venv import HINT, triton_python

TRITON_PY = triton_python()
pytestmark = pytest.mark.skipif(TRITON_PY is None, reason="no Triton venv: " + HINT)
TARGET = {"cuda": "cuda:90", "hip": "hip:gfx90a"}


def _triton(command, cache_dir, target):
    """`python -m tools.triton_kernels <command>` in a fresh Triton process, none of Triton's variables inherited."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    run = subprocess.run([TRITON_PY, "-m", "tools.triton_kernels", command, "--target", target, "--cache-dir",
                          str(cache_dir)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def _mounted(spec, tmp_path, rewrite_groups=True):
    """The image extracted by the collection's extractor into a node's slot directory (its groups rewritten to
    that place, as the extraction Job does for the PVC modes; or kept as the image has them, naming the image's
    recorded root, as an image volume shows them), then moved to where a pod mounts it and made read-only: the
    slot's path no longer exists, as it does not inside a pod. Returns (the mount, the image's entries)."""
    entries, labels = ki.cache_entries(spec)
    blob, _diff_id = ki.layer_bytes(entries)
    slot = tmp_path / "node" / "slots" / "cache-0123"
    archive.extract_layer(io.BytesIO(blob).read, ki.sha256_digest(blob), len(blob), str(slot),
                          rewrite_groups=rewrite_groups,
                          declared_bytes=int(labels["cache.%s.image/cache-size-bytes" % spec.kind]))
    mount = tmp_path / "pod" / "mnt" / "kernel-cache"
    mount.parent.mkdir(parents=True)
    os.rename(str(slot), str(mount))
    for base, dirs, files in os.walk(str(mount)):
        for name in files + dirs:
            path = os.path.join(base, name)
            os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o222)
    os.chmod(str(mount), 0o555)
    return mount, entries


def _fingerprint(root):
    digest = hashlib.sha256()
    for base, dirs, files in sorted(os.walk(str(root))):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(base, name)
            with open(path, "rb") as handle:
                digest.update(os.path.relpath(path, str(root)).encode() + b"\0" + handle.read())
    return digest.hexdigest()


@pytest.fixture
def writable_afterwards(tmp_path):
    yield
    for base, dirs, _files in os.walk(str(tmp_path)):
        for name in dirs:
            os.chmod(os.path.join(base, name), 0o755)
    os.chmod(str(tmp_path), 0o755)


def _overlay(mount, into):
    started = time.perf_counter()
    result = overlay.write_overlay(overlay.triton_cache_dir(str(mount)), str(into))
    return result, time.perf_counter() - started


@pytest.mark.parametrize(("backend", "rewrite_groups"), [("cuda", True), ("hip", True), ("cuda", False)],
                         ids=["cuda-pvc", "hip-pvc", "cuda-image-volume"])
def test_a_mounted_cache_hits_in_full_through_the_overlay_and_not_at_all_without(
        tmp_path, writable_afterwards, backend, rewrite_groups):
    mount, _entries = _mounted(ki.CacheSpec(compiled=True, backend=backend, kernels=6), tmp_path, rewrite_groups)
    before = _fingerprint(mount)

    plain = _triton("predict", mount / "io.triton.cache", TARGET[backend])
    assert plain["hits"] == 0 and {k["state"] for k in plain["kernels"]} == {layout.DANGLING}

    into = tmp_path / "pod" / "triton"
    written, seconds = _overlay(mount, into)
    assert written["kernels"] == 6 and written["skipped"] == [] and seconds < 2
    compiled = _triton("compile", into, TARGET[backend])
    assert compiled["hits"] == 6 and compiled["misses"] == 0, compiled["kernels"]
    assert overlay.compiled_here(str(into)) == []
    assert _fingerprint(mount) == before


def test_a_kernel_the_cache_lacks_is_compiled_into_the_overlay_as_one_miss_and_then_hits(
        tmp_path, writable_afterwards):
    mount, entries = _mounted(ki.CacheSpec(compiled=True, backend="cuda", kernels=5, seed=1), tmp_path)
    in_image = {e.name.split("/")[1] for e in entries if e.name.startswith("io.triton.cache/") and "/" in e.name[16:]}
    before = _fingerprint(mount)
    into = tmp_path / "pod" / "triton"
    assert _overlay(mount, into)[0]["kernels"] == 5

    first = _triton("compile", into, "cuda:90")
    missed = [k for k in first["kernels"] if not k["hit"]]
    assert first["hits"] == 5 and len(missed) == 1, first["kernels"]
    hash_dir = layout.hash_directory_name(missed[0]["hash"])
    assert hash_dir not in in_image and len(in_image) == 5
    assert overlay.compiled_here(str(into)) == [hash_dir]
    group = next((into / hash_dir).glob("__grp__*.json"))
    assert {os.path.dirname(p) for p in json.loads(group.read_text())["child_paths"].values()} == {
        str(into / hash_dir)}
    assert _fingerprint(mount) == before

    again = _triton("compile", into, "cuda:90")
    assert again["hits"] == 6 and again["misses"] == 0


def _mount_namespace_works():
    try:
        run = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs t /mnt"],
                             capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0


POD_SCRIPT = r"""
set -eu
mkdir -p "$POD/kernels" "$POD/triton"
mount --bind "$SLOT" "$POD/kernels"
mount -o remount,bind,ro "$POD/kernels"
mount -t tmpfs node "$NODE"
if touch "$POD/kernels/probe" 2>/dev/null; then echo "the mount is writable" >&2; exit 9; fi
"$PY" -I -c "$RUN_OVERLAY" "$COLLECTIONS" "$POD/kernels" "$POD/triton" > "$OUT/overlay.json"
"$TRITON_PY" -m tools.triton_kernels compile --target cuda:90 --cache-dir "$POD/triton" > "$OUT/through.json"
set +e
"$TRITON_PY" -m tools.triton_kernels compile --target cuda:90 --cache-dir "$POD/kernels/io.triton.cache" \
    > "$OUT/plain.json" 2> "$OUT/plain.err"
echo $? > "$OUT/plain.rc"
ls "$POD/triton" > "$OUT/triton.ls"
"""
# The init container's command, in a Python that sees only the collection (the tools image's PYTHONPATH).
RUN_OVERLAY = ("import sys; sys.path.insert(0, sys.argv[1]); "
               "from ansible_collections.gkm.cluster.plugins.module_utils.kernels import overlay_main; "
               "sys.exit(overlay_main.main(sys.argv[2:]))")


@pytest.mark.skipif(not _mount_namespace_works(), reason="needs unshare -m with mount rights (root here)")
def test_as_a_pod_sees_it_a_truly_read_only_mount_and_the_nodes_path_gone(tmp_path, writable_afterwards):
    """In a private mount namespace: the node's slot bind-mounted read-only where the pod mounts it and the slot's
    own path hidden, as in a pod. The init container's command writes the overlay; Triton through it hits the 5
    kernels of the cache and compiles the sixth into the overlay; Triton given the read-only mount itself, as a
    plain mount with TRITON_CACHE_DIR set to it would, fails on its first compile (EROFS)."""
    entries, labels = ki.cache_entries(ki.CacheSpec(compiled=True, backend="cuda", kernels=5, seed=1))
    blob, _diff_id = ki.layer_bytes(entries)
    node, pod, out = tmp_path / "node", tmp_path / "pod", tmp_path / "out"
    slot = node / "slots" / "cache-0123"
    archive.extract_layer(io.BytesIO(blob).read, ki.sha256_digest(blob), len(blob), str(slot), rewrite_groups=True,
                          declared_bytes=int(labels["cache.triton.image/cache-size-bytes"]))
    before = _fingerprint(slot)
    out.mkdir()
    collections = overlay.__file__
    for _level in range(7):
        collections = os.path.dirname(collections)
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    env.update(POD=str(pod), SLOT=str(slot), NODE=str(node), OUT=str(out), PY=sys.executable, TRITON_PY=TRITON_PY,
               COLLECTIONS=collections, RUN_OVERLAY=RUN_OVERLAY)
    run = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", POD_SCRIPT], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]

    written = json.loads((out / "overlay.json").read_text())
    assert written["kernels"] == 5 and written["skipped"] == [] and written["source"] == str(
        pod / "kernels" / "io.triton.cache")
    through = json.loads((out / "through.json").read_text())
    assert through["hits"] == 5 and through["misses"] == 1, through["kernels"]
    missed = layout.hash_directory_name(next(k for k in through["kernels"] if not k["hit"])["hash"])
    assert missed in (out / "triton.ls").read_text().split()
    # The plain mount: every group dangles, and Triton's first compile cannot write its result: the workload fails.
    assert int((out / "plain.rc").read_text()) != 0
    assert "Read-only file system" in (out / "plain.err").read_text()
    assert _fingerprint(slot) == before
