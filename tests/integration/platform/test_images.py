"""tools/images/build.sh without a container engine: the tools and pause images, pushed to the real local registry,
run in a chroot of their unpacked layouts, rebuilt only where their inputs changed, reproducible.

The tools image is built in the user's cache (~/.cache/gkm-cluster/images), so only the first run on a machine
pays for the Debian root and the wheels. Its full cold reproducibility (Debian root and wheels built twice) takes
minutes: it runs with GKM_TEST_IMAGES_COLD=1; the default run rebuilds the pause image and the tools image's code
stage from nothing and compares digests.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import requests

from tests.helpers.paths import ROOT

pytestmark = pytest.mark.registry

BUILD = os.path.join("tools", "images", "build.sh")
TOOLS_TAG = "0.1.0"
MODULE_UTILS = "ansible_collections.gkm.cluster.plugins.module_utils"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# What the build reads, for copies of the checkout that tests change.
BUILD_INPUTS = ["tools/images", "containers", "plugins/module_utils", "requirements.txt",
                "requirements/constraints.txt", "galaxy.yml"]


def build(name, *args, checkout=ROOT, cache=None):
    """Runs build.sh engine-less; returns (its one line of stdout, its stderr)."""
    env = dict(os.environ, GKM_IMAGE_ENGINE="none", GKM_IMAGE_PYTHON=sys.executable)
    if cache:
        env["XDG_CACHE_HOME"] = str(cache)
    done = subprocess.run([os.path.join(checkout, BUILD), name, *args], env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, done.stdout
    return lines[0], done.stderr


def layout_of(reference):
    """(layout directory, tag) of build.sh's oci:DIR:TAG output."""
    assert reference.startswith("oci:"), reference
    directory, tag = reference[len("oci:"):].rsplit(":", 1)
    return directory, tag


def read_blob(directory, digest):
    with open(os.path.join(directory, "blobs", "sha256", digest.split(":", 1)[1]), "rb") as f:
        return f.read()


def layout_manifest(reference):
    directory, tag = layout_of(reference)
    with open(os.path.join(directory, "index.json")) as f:
        index = json.load(f)
    [entry] = [m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == tag]
    manifest = json.loads(read_blob(directory, entry["digest"]))
    return entry["digest"], manifest


def layout_config(reference):
    _digest, manifest = layout_manifest(reference)
    return json.loads(read_blob(layout_of(reference)[0], manifest["config"]["digest"]))


def unpack(reference, bundle):
    """umoci unpack: the root filesystem and the runtime configuration a container would get."""
    directory, tag = layout_of(reference)
    subprocess.run(["umoci", "unpack", "--image", "%s:%s" % (directory, tag), str(bundle)], check=True,
                   capture_output=True)
    with open(os.path.join(bundle, "config.json")) as f:
        return json.load(f)["process"]


def chroot_run(bundle, process, args, **kwargs):
    """Runs args in the unpacked root as the image's user, with the image's environment and working directory."""
    user = "%d:%d" % (process["user"]["uid"], process["user"]["gid"])
    command = ["chroot", "--userspec", user, os.path.join(bundle, "rootfs"), "env", "-i", *process["env"],
               "sh", "-c", 'cd "$0" && exec "$@"', process["cwd"], *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, **kwargs)


def registry_manifest(registry, reference):
    repository, digest = re.fullmatch(r"[^/]+/(.+):[^:@]+@(sha256:[0-9a-f]{64})", reference).groups()
    response = requests.get("%s/v2/%s/manifests/%s" % (registry.url, repository, digest),
                            headers={"Accept": OCI_MANIFEST}, timeout=30)
    response.raise_for_status()
    assert "sha256:" + hashlib.sha256(response.content).hexdigest() == digest
    return response.json()


def checkout_copy(destination):
    """The build's inputs copied, so a test can change them without touching the checkout."""
    for path in BUILD_INPUTS:
        source = os.path.join(ROOT, path)
        target = os.path.join(destination, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.isdir(source):
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target)
    return str(destination)


def seed_cache(cache, reference, stages):
    """A cache holding only the given stages of an existing build (hard-linked): what a rebuild may reuse."""
    stages_dir = os.path.dirname(layout_of(reference)[0])
    target = os.path.join(cache, "gkm-cluster", "images", "stages")
    os.makedirs(target)
    for name in os.listdir(stages_dir):
        if any(name.startswith(stage + "-") for stage in stages):
            shutil.copytree(os.path.join(stages_dir, name), os.path.join(target, name), copy_function=os.link)


@pytest.fixture(scope="module")
def tools_image():
    """The tools image in the user's cache (built once per machine, reused after)."""
    return build("tools")[0]


@pytest.fixture(scope="module")
def tools_bundle(tools_image, tmp_path_factory):
    """The tools image unpacked: (bundle directory, the runtime's process configuration)."""
    bundle = tmp_path_factory.mktemp("tools") / "bundle"
    return bundle, unpack(tools_image, bundle)


def test_tools_image_configuration(tools_image):
    config = layout_config(tools_image)
    assert config["config"]["User"] == "1000:1000"
    assert config["config"]["Entrypoint"] == ["python3", "-m", MODULE_UTILS + ".extract.job_main"]
    assert config["config"]["WorkingDir"] == "/tmp"
    assert "PYTHONPATH=/opt/gkm/collections" in config["config"]["Env"]
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == TOOLS_TAG
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    # Fixed timestamps everywhere: the config and every history entry.
    assert {config["created"], *(entry["created"] for entry in config["history"])} == {"2026-01-01T00:00:00Z"}
    _digest, manifest = layout_manifest(tools_image)
    assert len(manifest["layers"]) == 3  # Debian root, wheels, collection code


def test_tools_image_pushed_as_built(registry, tools_image):
    pushed, _log = build("tools", "--push", registry.host)
    assert re.fullmatch(r"%s/gkm-cluster/tools:%s@sha256:[0-9a-f]{64}" % (re.escape(registry.host), TOOLS_TAG),
                        pushed)
    digest, manifest = layout_manifest(tools_image)
    assert pushed.endswith("@" + digest)
    assert registry_manifest(registry, pushed) == manifest


def test_tools_image_runs_both_entry_points(tools_bundle):
    bundle, process = tools_bundle
    assert process["args"] == ["python3", "-m", MODULE_UTILS + ".extract.job_main"]
    extract = chroot_run(bundle, process, [*process["args"], "--help"])
    assert extract.returncode == 0, extract.stderr
    assert "--dest" in extract.stdout
    webhook = chroot_run(bundle, process, ["python3", "-m", MODULE_UTILS + ".webhook.server.main", "--help"])
    assert webhook.returncode == 0, webhook.stderr
    assert "--cert-file" in webhook.stdout
    # Every run-time requirement imports from the wheels, with the image's own Python.
    imports = chroot_run(bundle, process, ["python3", "-c", "import kubernetes, oras, requests, cryptography, "
                                           "aiohttp, isal; print('ok')"])
    assert imports.stdout.strip() == "ok", imports.stderr


def test_tools_image_imports_only_compiled_code(tools_bundle):
    """The image's user cannot write __pycache__: every module the programs import comes from byte code built in."""
    bundle, process = tools_bundle
    # python3 -v says "code object from '<file>'" for each module, naming the .pyc it loaded or the .py it compiled.
    verbose = chroot_run(bundle, process, ["python3", "-v", "-c", "import %s.extract.job_main, %s.webhook.server.main"
                                           % (MODULE_UTILS, MODULE_UTILS)])
    assert verbose.returncode == 0, verbose.stderr
    loaded = re.findall(r"code object from '([^']+)'", verbose.stderr)
    assert any(path.endswith("/extract/__pycache__/job_main.cpython-311.pyc") for path in loaded)
    assert [path for path in loaded if not path.endswith(".pyc")] == []
    apt = bundle / "rootfs" / "etc" / "apt"
    assert not (apt / "sources.list").exists() and not list(apt.glob("sources.list.d/*"))  # the build's mirror


def test_code_change_rebuilds_only_the_code_stage(tools_image, tmp_path):
    checkout = checkout_copy(tmp_path / "checkout")
    cache = tmp_path / "cache"
    seed_cache(cache, tools_image, ["tools-root", "tools-wheels"])

    same, log = build("tools", checkout=checkout, cache=cache)
    assert "reusing tools-root" in log and "reusing tools-wheels" in log and "building tools-code" in log
    # The code stage from nothing gives the same bytes: the whole manifest is the same.
    assert layout_manifest(same)[0] == layout_manifest(tools_image)[0]

    with open(os.path.join(checkout, "plugins/module_utils/extract/job_main.py"), "a") as f:
        f.write("# changed\n")
    started = time.monotonic()
    changed, log = build("tools", checkout=checkout, cache=cache)
    print("tools image rebuild after a code change: %.1f s" % (time.monotonic() - started))
    assert "building tools-code" in log and "building tools-root" not in log and "building tools-wheels" not in log
    before, after = layout_manifest(tools_image)[1]["layers"], layout_manifest(changed)[1]["layers"]
    assert after[:2] == before[:2]
    assert after[2] != before[2]

    started = time.monotonic()
    again, log = build("tools", checkout=checkout, cache=cache)
    print("tools image rebuild with nothing changed: %.2f s" % (time.monotonic() - started))
    assert again == changed and "building" not in log


def test_pause_image_reproducible_pushed_stops_and_reaps(registry, tmp_path):
    first, _log = build("pause", cache=tmp_path / "first")
    second, _log = build("pause", cache=tmp_path / "second")
    digest, manifest = layout_manifest(first)
    assert layout_manifest(second)[0] == digest
    config = layout_config(first)
    assert config["config"]["User"] == "65535:65535"
    assert config["config"]["Entrypoint"] == ["/pause"]

    pushed, _log = build("pause", "--push", registry.host, cache=tmp_path / "first")
    assert pushed == "%s/gkm-cluster/pause:1.0.0@%s" % (registry.host, digest)
    assert registry_manifest(registry, pushed) == manifest

    process = unpack(first, tmp_path / "bundle")
    user = "%d:%d" % (process["user"]["uid"], process["user"]["gid"])
    for stop in (signal.SIGTERM, signal.SIGINT):
        pause = subprocess.Popen(["chroot", "--userspec", user, str(tmp_path / "bundle" / "rootfs"), *process["args"]])
        time.sleep(0.5)
        assert pause.poll() is None  # sleeps until told
        pause.send_signal(stop)  # chroot execs: the signal reaches pause itself
        assert pause.wait(timeout=30) == 0

    # As a pod sandbox's PID 1 (its own PID namespace), pause inherits orphans and must reap them.
    unshare = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "chroot", "--userspec", user,
                                str(tmp_path / "bundle" / "rootfs"), *process["args"]])
    try:
        pause_pid = int(wait_for(lambda: children(unshare.pid), timeout=30)[0])
        # The orphan lives until this test kills it: on a loaded machine a timed orphan could be gone before it
        # is looked at.
        subprocess.run(["nsenter", "--target", str(pause_pid), "--pid", "--", "sh", "-c", "sleep 600 & exit 0"],
                       check=True)
        # Until it has exec'd, the orphan still calls itself sh.
        [orphan] = wait_for(lambda: [child for child in children(pause_pid) if command_name(child) == "sleep"],
                            timeout=30)
        os.kill(int(orphan), signal.SIGKILL)
        # Reaped, the dead orphan leaves no zombie behind.
        wait_for(lambda: children(pause_pid) == [], timeout=10)
        os.kill(pause_pid, signal.SIGTERM)
        assert unshare.wait(timeout=30) == 0
    finally:
        if unshare.poll() is None:
            unshare.kill()


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return f.read().split()


def command_name(pid):
    try:
        with open("/proc/%s/comm" % pid) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def wait_for(probe, timeout=5):
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return found


@pytest.mark.skipif(os.environ.get("GKM_TEST_IMAGES_COLD") != "1", reason="minutes: set GKM_TEST_IMAGES_COLD=1")
def test_tools_image_reproducible_from_nothing(tools_image, tmp_path):
    cold, _log = build("tools", cache=tmp_path / "cold")
    assert layout_manifest(cold)[0] == layout_manifest(tools_image)[0]
