"""The extraction Job's two programs, run as the Job runs them, without a cluster: failures reach the
termination log with their exit code, an unwritable volume is named with the uid, root without capabilities writes
what root owns only."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.distribute.plan import render
from ansible_collections.gkm.cluster.plugins.module_utils.extract import job_main
from tests.helpers import kcache_images as ki
from tests.helpers.paths import ROOT

COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
UNPRIVILEGED = 1000


def python_as(uid, *args):
    """This interpreter with `args`, as `uid`, in a fresh process."""
    command = ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups", sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/", check=False,
                          env={"PYTHONPATH": COLLECTIONS, "PATH": os.environ["PATH"]})


def run_as(uid, module, *args):
    """`python3 -m module args` as `uid` (the Job's user)."""
    return python_as(uid, "-m", module.__name__, *args)


@pytest.fixture(scope="module")
def interpreter_runs_as_job_user():
    """Skips where this interpreter cannot start as the Job's user: one installed where only root can reach it
    (pyenv's under /root, say) cannot, and neither can the program then."""
    probe = python_as(UNPRIVILEGED, "-c", "pass")
    if probe.returncode != 0:
        pytest.skip("%s cannot run as uid %d: %s" % (sys.executable, UNPRIVILEGED, probe.stderr.strip()))


@pytest.fixture
def tmp_path():
    """A directory other uids can reach (pytest's own sits under a 0700 one)."""
    path = tempfile.mkdtemp(prefix="gkm-job-main-")
    os.chmod(path, 0o755)
    yield pathlib.Path(path)
    shutil.rmtree(path)


@pytest.fixture
def termination_log(tmp_path):
    path = tmp_path / "termination-log"
    path.touch()
    path.chmod(0o666)
    return path


def test_fail_job_exit_codes_are_job_mains():
    assert render.FAIL_JOB_EXIT_CODES == (job_main.EXIT_REFUSED, job_main.EXIT_USAGE, job_main.EXIT_NOT_WRITABLE,
                                          job_main.EXIT_SIGNATURE)
    assert job_main.EXIT_RETRY not in render.FAIL_JOB_EXIT_CODES


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the program as another uid")
def test_root_owned_volume_is_refused_before_any_download_naming_path_uid_and_fix(
        tmp_path, termination_log, interpreter_runs_as_job_user):
    volume = tmp_path / "pv"
    volume.mkdir(mode=0o755)  # what the kubelet's DirectoryOrCreate makes: root:root 0755
    # The registry address is never contacted: the volume check comes first.
    done = run_as(UNPRIVILEGED, job_main, "--image", "127.0.0.1:9/c/a:v1", "--dest", str(volume / "cache"),
                  "--plain-http", "--termination-log", str(termination_log))
    assert done.returncode == job_main.EXIT_NOT_WRITABLE, done.stderr
    message = termination_log.read_text()
    assert json.loads(done.stdout) == {"failed": True, "msg": message}
    assert "cannot write %s as uid %d" % (volume, UNPRIVILEGED) in message
    assert "set_volume_owner" in message and "fsGroup" in message
    assert os.listdir(volume) == []


def python_as_root_without_capabilities(*args):
    """This interpreter as uid 0 with every capability gone (the bounding set emptied), as the Job's extractor runs
    on hostPath volumes (render._extract_container)."""
    command = ["setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--no-new-privs", sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/", check=False,
                          env={"PYTHONPATH": COLLECTIONS, "PATH": os.environ["PATH"]})


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop root's capabilities")
def test_root_without_capabilities_writes_the_kubelets_directory_but_not_another_uids(tmp_path, termination_log):
    """set_volume_owner: the hostPath directory is root's, so the extractor gets past the volume check and fails only
    at the (closed) registry, retryable; a directory another uid owns (an earlier version's extraction chowned it to
    1000) is refused before any download, naming uid 0 and the fix."""
    volume = tmp_path / "pv"
    volume.mkdir(mode=0o755)
    args = ["-m", job_main.__name__, "--image", "127.0.0.1:9/c/a:v1", "--dest", str(volume / "cache"), "--plain-http",
            "--timeout", "2", "--termination-log", str(termination_log)]
    done = python_as_root_without_capabilities(*args)
    assert done.returncode == job_main.EXIT_RETRY, done.stdout + done.stderr
    assert "unreachable" in termination_log.read_text()
    os.chown(volume, UNPRIVILEGED, UNPRIVILEGED)
    done = python_as_root_without_capabilities(*args)
    assert done.returncode == job_main.EXIT_NOT_WRITABLE, done.stdout + done.stderr
    message = termination_log.read_text()
    assert "cannot write %s as uid 0" % volume in message and "remove the cache's slot" in message


def test_refusal_exits_1_and_long_messages_are_cut_for_the_kubelet(tmp_path, termination_log, capsys):
    assert job_main.main(["--image", "no-registry-host", "--dest", str(tmp_path / "c"),
                          "--termination-log", str(termination_log)]) == job_main.EXIT_REFUSED
    assert "must name its registry host" in termination_log.read_text()
    job_main.report_failure("x" * 10000, str(termination_log))
    assert len(termination_log.read_text()) == job_main.TERMINATION_MESSAGE_MAX
    capsys.readouterr()


def test_without_termination_log_nothing_is_written_outside_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert job_main.main(["--image", "no-registry-host", "--dest", str(tmp_path / "c")]) == job_main.EXIT_REFUSED
    assert json.loads(capsys.readouterr().out)["failed"] is True
    assert os.listdir(tmp_path) == []


# Large import trees the Job's programs do not use on their way to the first byte: the API client (the Job
# never talks to the API server; its node's GPUs come as --gpu), oras-py's provider with jsonschema (our
# registry client uses only oras-py's auth and reference parser), cryptography (only a signature check needs
# it), ctypes (only replacing an older tree needs it) and ansible (the Job runs without it).
NOT_LOADED_AT_START = ("kubernetes", "ansible", "oras.provider", "jsonschema", "cryptography", "ctypes")


def test_the_jobs_programs_start_without_imports_they_do_not_need():
    probe = ("import sys; import %s; print(sorted(m for m in sys.modules if any(m == name or m.startswith("
             "name + '.') for name in %r)))" % (job_main.__name__, NOT_LOADED_AT_START))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False,
                          env={"PYTHONPATH": COLLECTIONS, "PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the program as another uid")
def test_the_extractor_cannot_write_its_sealed_tree_yet_replaces_and_removes_it(tmp_path,
                                                                                interpreter_runs_as_job_user):
    """Issue 31, class 1: a published tree has no write bit (files 0444, directories 0555), so its owner's uid writes
    nothing in it by accident or through a stale process; the extractor still swaps in a new tree and removes the
    old one, and a link planted at the lock's place is not followed."""
    volume = tmp_path / "pv"
    volume.mkdir(mode=0o755)
    os.chown(volume, UNPRIVILEGED, UNPRIVILEGED)
    (tmp_path / "sentinel").mkdir()
    os.symlink(tmp_path / "sentinel" / "lock", volume / ".cache.gkm-lock")
    for name, data in (("one", b"1"), ("two", b"22")):
        (tmp_path / name).write_bytes(ki.layer_bytes([ki.Entry("io.triton.cache/K/a.json", data)])[0])
    script = """
import errno, hashlib, io, os, sys
from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive, tree
dest, layers = sys.argv[1], sys.argv[2]
def extract(name):
    blob = open(os.path.join(layers, name), "rb").read()
    archive.extract_layer(io.BytesIO(blob).read, "sha256:" + hashlib.sha256(blob).hexdigest(), len(blob), dest)
try:
    extract("one")
except OSError as error:
    print("lock", error.errno == errno.ELOOP)
os.unlink(os.path.join(os.path.dirname(dest), ".cache.gkm-lock"))
extract("one")
for path in (dest + "/io.triton.cache/K/b.json", dest + "/io.triton.cache/K/a.json"):
    try:
        open(path, "w")
    except OSError as error:
        print("write", error.errno == errno.EACCES)
extract("two")
print("replaced", open(dest + "/io.triton.cache/K/a.json").read())
print("left", sorted(os.listdir(os.path.dirname(dest))))
tree.remove_tree(dest)
print("removed", os.path.lexists(dest))
"""
    done = python_as(UNPRIVILEGED, "-c", script, str(volume / "cache"), str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["lock True", "write True", "write True", "replaced 22",
                                        "left ['.cache.gkm-lock', 'cache']", "removed False"]
    assert os.listdir(tmp_path / "sentinel") == []
