"""cache_extract against the real local registry: real images, hostile images, signatures, kills, idempotence."""

import gzip
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import uuid

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.common.tls import new_private_key, public_key_to_pem
from ansible_collections.gkm.cluster.plugins.module_utils.extract import pull as cache_pull
from ansible_collections.gkm.cluster.plugins.module_utils.extract import tree
from tests.helpers import kcache_images as ki
from tests.helpers.paths import ROOT
from tools.triton_kernels.venv import triton_python

pytestmark = pytest.mark.registry

HIP = {"backend": "hip", "arch": "gfx90a", "warp_size": 64}
H100 = {"backend": "cuda", "arch": "sm_90", "warp_size": 32}
CLI = "ansible_collections.gkm.cluster.plugins.module_utils.extract.job_main"


def _repo(name):
    return "it/%s-%s" % (name, uuid.uuid4().hex[:6])


def _pull(image_ref, dest, **options):
    return cache_pull.ensure_cache(dict(image=image_ref, dest=str(dest), plain_http=True, **options))


def _snapshot(root):
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def _registry_storage():
    spec = importlib.util.spec_from_file_location("gkm_sim_paths", os.path.join(ROOT, "tools", "sim-cluster", "sim.py"))
    sim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sim)
    return os.path.join(sim.SIM_DIR, "registry")


@pytest.fixture
def extracted(registry, tmp_path):
    """dest already holding a good HIP cache: (image, dest, snapshot)."""
    image = ki.build_image(registry.host, _repo("base"), "v1", ki.CacheSpec(backend="hip", kernels=2, compiled=True))
    dest = tmp_path / "caches" / "base"
    _pull(image.ref, dest)
    return image, dest, _snapshot(dest)


@pytest.mark.parametrize(("spec", "manifest_format", "gpu"), [
    (ki.CacheSpec(backend="cuda", kernels=3, compiled=True), "oci", H100),
    (ki.CacheSpec(backend="hip", kernels=3, compiled=True), "docker", HIP),
    (ki.CacheSpec(kind="vllm", backend="cuda", kernels=2, compiled=True), "oci", H100),
])
def test_cache_images_extract_with_rewritten_group_files(registry, tmp_path, spec, manifest_format, gpu):
    image = ki.build_image(registry.host, _repo(spec.kind), "v1", spec, manifest_format=manifest_format)
    dest = tmp_path / "cache"
    result = _pull(image.ref, dest, gpus=[gpu])
    assert result["changed"] is True
    assert result["digest"] == image.digest
    assert result["kind"] == spec.kind
    assert result["entry_count"] == spec.kernels
    assert result["compatible_gpus"] and not result["incompatible_gpus"]
    assert (dest / ("io.%s.manifest" % spec.kind) / "manifest.json").is_file()
    groups = list(dest.rglob("__grp__*.json"))
    assert len(groups) == spec.kernels and result["group_files_rewritten"] == spec.kernels
    for group in groups:
        for child in json.loads(group.read_text())["child_paths"].values():
            assert child.startswith(str(group.parent) + "/") and os.path.isfile(child)
    binaries = ".cubin" if spec.backend == "cuda" else ".hsaco"
    assert len(list(dest.rglob("*" + binaries))) == spec.kernels
    # The kernels are real: Triton, given the pulled cache where the extractor put it, finds every one of them.
    triton_dir = groups[0].parent.parent
    env = {key: value for key, value in os.environ.items() if not key.startswith("TRITON_")}
    predict = subprocess.run([triton_python(), "-m", "tools.triton_kernels", "predict", "--target",
                              "%s:%s" % (spec.backend, spec.targets()[0]["arch"]), "--cache-dir", str(triton_dir)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(predict.stdout)["hits"] == spec.kernels


@pytest.mark.parametrize("variant", ki.HOSTILE_VARIANTS)
def test_hostile_image_is_refused_and_dest_is_unchanged(registry, extracted, variant):
    dest, before = extracted[1:]
    bad, fragment = ki.push_hostile(registry.host, _repo("bad"), variant)
    limits = {"max_files": 40, "max_bytes": 250_000} if variant in ("too_many_files", "oversized_entry") else {}
    with pytest.raises(cache_pull.CachePullError, match=fragment):
        _pull(bad.ref, dest, **limits)
    assert _snapshot(dest) == before
    assert not [n for n in os.listdir(dest.parent) if ".gkm-tmp-" in n]


def test_a_member_announcing_more_than_the_label_declares_is_refused_at_its_header(registry, extracted):
    """The 5 GiB header of a bomb against the image's cache-size-bytes label: refused before any byte is written."""
    image, dest, before = extracted
    labels = ki.cache_entries(ki.CacheSpec(kernels=1))[1]
    header = tarfile.TarInfo(ki.K + "/bomb.cubin")
    header.size = 5 * 1024 ** 3
    bomb = ki.push_image(registry.host, image.repository, "bomb",
                         gzip.compress(header.tobuf(tarfile.PAX_FORMAT) + bytes(1024 * 1024)), labels)
    with pytest.raises(cache_pull.CachePullError, match=r"rule declared_size \(the image's cache-size-bytes label %s,"
                       % labels["cache.triton.image/cache-size-bytes"]):
        _pull(bomb.ref, dest, max_expansion_ratio=10 ** 6)  # so the label, not the ratio, is the tighter bound
    assert _snapshot(dest) == before
    assert [name for name in os.listdir(dest.parent) if tree.TMP_INFIX in name] == []


def test_blob_tampered_in_the_registry_is_refused(registry, extracted):
    dest, before = extracted[1:]
    image = ki.build_image(registry.host, _repo("tampered"), "v1", ki.CacheSpec(kernels=1, seed=11))
    good = ki.layer_bytes(ki.cache_entries(ki.CacheSpec(kernels=1, seed=11))[0])[0]
    ki.tamper_blob(_registry_storage(), image.layer_digest, good[:-8] + b"\0" * 8)
    with pytest.raises(cache_pull.CachePullError, match=r"digest mismatch|gzip|truncated"):
        _pull(image.ref, dest)
    assert _snapshot(dest) == before


def test_unknown_tag_and_unreachable_registry_name_the_problem(registry, extracted):
    image, dest, before = extracted
    with pytest.raises(cache_pull.CachePullError, match="not found"):
        _pull("%s/%s:no-such-tag" % (registry.host, image.repository), dest)
    started = time.monotonic()
    with pytest.raises(cache_pull.CachePullError, match="unreachable"):
        _pull("127.0.0.1:9/%s:v1" % image.repository, dest, timeout=5)
    assert time.monotonic() - started < 10
    assert _snapshot(dest) == before


def test_rerun_is_a_no_op_until_the_tree_or_tag_changes(registry, extracted):
    image, dest, before = extracted
    started = time.perf_counter()
    again = _pull(image.ref, dest)
    assert again["changed"] is False and (time.perf_counter() - started) < 0.5
    assert again["files"] == len(before) - 1  # all but the marker
    next(dest.rglob("*.hsaco")).unlink()
    assert _pull(image.ref, dest)["changed"] is True
    assert _snapshot(dest).keys() == before.keys()
    newer = ki.build_image(registry.host, image.repository, "v1",
                           ki.CacheSpec(backend="hip", kernels=3, seed=4, compiled=True))
    moved = _pull(image.ref, dest)
    assert (moved["changed"], moved["previous_digest"], moved["digest"]) == (True, image.digest, newer.digest)
    assert moved["diff"] == {"before": "digest: %s\n" % image.digest, "after": "digest: %s\n" % newer.digest}


def test_check_mode_reports_and_writes_nothing(registry, extracted, tmp_path):
    image, dest, before = extracted
    newer = ki.build_image(registry.host, image.repository, "v2",
                           ki.CacheSpec(backend="hip", kernels=1, seed=8, compiled=True))
    result = cache_pull.ensure_cache({"image": newer.ref, "dest": str(dest), "plain_http": True}, check_mode=True)
    assert result["changed"] is True and result["digest"] == newer.digest
    assert _snapshot(dest) == before
    fresh = tmp_path / "never"
    assert cache_pull.ensure_cache({"image": newer.ref, "dest": str(fresh), "plain_http": True},
                                   check_mode=True)["changed"] is True
    assert not fresh.exists()


def test_incompatible_gpu_fails_or_skips_without_writing(registry, tmp_path):
    image = ki.build_image(registry.host, _repo("compat"), "v1", ki.CacheSpec(backend="hip", compiled=True))
    dest = tmp_path / "c"
    with pytest.raises(cache_pull.CachePullError, match="no GPU matches"):
        _pull(image.ref, dest, gpus=[H100])
    skipped = _pull(image.ref, dest, gpus=[H100], compatibility="skip")
    assert skipped["skipped"] is True and skipped["changed"] is False and not dest.exists()
    forced = _pull(image.ref, dest, gpus=[H100], compatibility="ignore")
    assert forced["changed"] is True
    assert forced["incompatible_gpus"] == [{"backend": "cuda", "arch": "90", "warp_size": 32}]


def test_absent_removes_only_our_own_tree(extracted, tmp_path):
    dest = extracted[1]
    assert cache_pull.ensure_cache({"dest": str(dest), "state": "absent"}, check_mode=True)["changed"] is True
    assert dest.exists()
    assert cache_pull.ensure_cache({"dest": str(dest), "state": "absent"})["changed"] is True
    assert not dest.exists()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep").write_text("x")
    with pytest.raises(cache_pull.CachePullError, match="refusing to remove"):
        cache_pull.ensure_cache({"dest": str(foreign), "state": "absent"})


# ---------------------------------------------------------------- signatures


@pytest.fixture(scope="module")
def cosign_cli(tmp_path_factory):
    """(cosign v2 binary, cosign v3 binary, key dir, public key PEM): real CLIs built by tools/bench-tools.sh."""
    v2, v3 = ki.cosign_binary("cosign"), ki.cosign_binary("cosign3")
    if not (v2 and v3):
        subprocess.run([os.path.join(ROOT, "tools", "bench-tools.sh")], check=False, capture_output=True)
        v2, v3 = ki.cosign_binary("cosign"), ki.cosign_binary("cosign3")
    if not (v2 and v3):
        pytest.skip("cosign CLIs could not be built from the Go module proxy")
    workdir = str(tmp_path_factory.mktemp("cosign"))
    public = ki.cosign_cli_generate_key(v2, workdir)
    with open(public) as f:
        return v2, v3, workdir, f.read()


@pytest.mark.parametrize("fmt", ["v2", "v3"])
def test_real_cosign_signature_verifies_and_a_wrong_key_is_refused(registry, tmp_path, cosign_cli, fmt):
    v2, v3, workdir, public = cosign_cli
    image = ki.build_image(registry.host, _repo("signed-" + fmt), "v1", ki.CacheSpec(kernels=1))
    ki.cosign_cli_sign(v3 if fmt == "v3" else v2, image, workdir, v3=(fmt == "v3"))
    dest = tmp_path / "c"
    result = _pull(image.ref, dest, verify="cosign", public_key=public, signature_format="auto")
    assert (result["signature_verified"], result["signature_format"]) == (True, fmt)
    other = "v2" if fmt == "v3" else "v3"
    with pytest.raises(cache_pull.CachePullError, match="not signed"):
        _pull(image.ref, tmp_path / "d", verify="cosign", public_key=public, signature_format=other)
    wrong = public_key_to_pem(new_private_key())
    with pytest.raises(cache_pull.CachePullError, match="none verifies"):
        _pull(image.ref, tmp_path / "e", verify="cosign", public_key=wrong)
    assert not (tmp_path / "e").exists()


@pytest.mark.parametrize("fmt", ["v2", "v3"])
def test_independent_signature_format_and_unsigned_image(registry, tmp_path, fmt):
    key = new_private_key()
    image = ki.build_image(registry.host, _repo("ind-" + fmt), "v1", ki.CacheSpec(kernels=1))
    unsigned = ki.build_image(registry.host, image.repository, "unsigned",
                              ki.CacheSpec(kernels=1, seed=3, compiled=True))
    (ki.sign_cosign_v3 if fmt == "v3" else ki.sign_cosign_v2)(image, key)
    result = _pull(image.ref, tmp_path / "c", verify="cosign", public_key=public_key_to_pem(key),
                   signature_format=fmt)
    assert result["signature_format"] == fmt
    assert _pull(image.ref, tmp_path / "c", verify="cosign", public_key=public_key_to_pem(key))["changed"] is False
    with pytest.raises(cache_pull.CachePullError, match="not signed"):
        _pull(unsigned.ref, tmp_path / "u", verify="cosign", public_key=public_key_to_pem(key))


# ---------------------------------------------------------------- the command line and the module


def _cli(*args, env=None):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".cache", "collections"), **(env or {}))
    return subprocess.Popen([sys.executable, "-m", CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_killed_extraction_leaves_dest_intact_and_the_next_run_completes(registry, extracted):
    image, dest, before = extracted
    big = ki.build_image(registry.host, image.repository, "big", ki.CacheSpec(backend="hip", kernels=1500,
                                                                              kernel_bytes=20_000, seed=2))
    proc = _cli("--image", big.ref, "--dest", str(dest), "--plain-http")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not [n for n in os.listdir(dest.parent) if ".gkm-tmp-" in n]:
        time.sleep(0.005)
    time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert _snapshot(dest) == before
    done = _cli("--image", big.ref, "--dest", str(dest), "--plain-http")
    out = done.communicate(timeout=300)[0]
    result = json.loads(out)
    assert done.returncode == 0 and result["changed"] is True and result["digest"] == big.digest
    assert not [n for n in os.listdir(dest.parent) if ".gkm-tmp-" in n]
    assert tree.tree_intact(str(dest), tree.read_marker(str(dest)))


def test_cli_reports_failures_as_json_with_exit_status_1(registry, tmp_path):
    bad = ki.push_hostile(registry.host, _repo("cli-bad"), "path_traversal")[0]
    proc = _cli("--image", bad.ref, "--dest", str(tmp_path / "c"), "--plain-http")
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1
    assert "'..'" in json.loads(out)["msg"]


def _playbook(tmp_path, task, *flags):
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n    - gkm.cluster.cache_extract:\n"
                        + "".join("        %s: %s\n" % (k, json.dumps(v)) for k, v in task.items()))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([os.path.join(ROOT, ".cache", "collections"), os.path.join(
                   sys.prefix, "lib", "python%d.%d" % sys.version_info[:2], "site-packages")]))
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
               "-e", "ansible_python_interpreter=" + sys.executable, str(playbook), *flags]
    # A failed task exits non-zero; the caller reads the task's result either way.
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_module_check_diff_apply_and_idempotence_through_ansible_playbook(registry, tmp_path):
    image = ki.build_image(registry.host, _repo("module"), "v1", ki.CacheSpec(backend="hip", kernels=2, compiled=True))
    task = {"image": image.ref, "dest": str(tmp_path / "cache"), "registry_plain_http": True,
            "gpus": [{"backend": "hip", "arch": "gfx90a", "warp_size": 64}]}
    checked = _playbook(tmp_path, task, "--check", "--diff")
    assert checked["changed"] is True and "digest: %s" % image.digest in checked["diff"]["after"]
    assert not (tmp_path / "cache").exists()
    applied = _playbook(tmp_path, task)
    assert applied["changed"] is True and applied["files"] > 0 and applied["kind"] == "triton"
    assert _playbook(tmp_path, task)["changed"] is False
    failed = _playbook(tmp_path, dict(task, gpus=[{"backend": "cuda", "arch": "sm_90", "warp_size": 32}]))
    assert failed.get("failed") is True and "no GPU matches" in failed["msg"]


@pytest.mark.matrix
@pytest.mark.cluster
def test_gpus_from_node_labels_reads_the_simulated_node(registry, sim, tmp_path):
    hip = ki.build_image(registry.host, _repo("node"), "hip", ki.CacheSpec(backend="hip", kernels=1, compiled=True))
    cuda = ki.build_image(registry.host, hip.repository, "cuda", ki.CacheSpec(backend="cuda", kernels=1, compiled=True))
    proc = _cli("--image", hip.ref, "--dest", str(tmp_path / "h"), "--plain-http", "--kubeconfig", sim.kubeconfig,
                "--gpus-from-node-labels", "gkm-gpu-worker-1")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert json.loads(out)["compatible_gpus"] == [HIP]
    proc = _cli("--image", cuda.ref, "--dest", str(tmp_path / "c"), "--plain-http", "--kubeconfig", sim.kubeconfig,
                "--gpus-from-node-labels", "gkm-gpu-worker-1", "--compatibility", "skip")
    out = proc.communicate(timeout=120)[0]
    assert json.loads(out)["skipped"] is True and not (tmp_path / "c").exists()


@pytest.mark.matrix
@pytest.mark.cluster
def test_module_reads_node_labels_with_kubernetes_core_auth(registry, sim, tmp_path):
    image = ki.build_image(registry.host, _repo("module-node"), "v1",
                           ki.CacheSpec(backend="hip", kernels=1, compiled=True))
    task = {"image": image.ref, "dest": str(tmp_path / "cache"), "registry_plain_http": True,
            "gpus_from_node_labels": "gkm-gpu-worker-2", "kubeconfig": sim.kubeconfig}
    result = _playbook(tmp_path, task)
    assert result["changed"] is True and result["compatible_gpus"] == [HIP]
    missing = _playbook(tmp_path, dict(task, gpus_from_node_labels="gkm-control-plane", dest=str(tmp_path / "x")))
    assert missing.get("failed") is True and "none advertised" in missing["msg"]
