"""capture/read.py, its pure part and the unpacking: which directory of a pod is read, and the pod's tar through the
extractor's rules, only the kernels the pod compiled kept."""

import base64
import gzip
import hashlib
import io
import json
import os
import tarfile

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.capture import read
from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.capture_frame import DEFAULT_MAX_BYTES, FRAME_KEY
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.overlay import MARKER
from ansible_collections.gkm.cluster.plugins.module_utils.webhook.admission.kernel_overlay import OVERLAY_PATH
from tests.helpers.kernel_dirs import kernel


def _pod(containers, volumes=(), phase="Running", running=("app",)):
    return {"metadata": {"name": "p", "namespace": "team-a"},
            "spec": {"containers": containers, "volumes": list(volumes)},
            "status": {"phase": phase, "containerStatuses": [
                {"name": name, "state": {"running": {}} if name in running else {"terminated": {}}}
                for name in [c["name"] for c in containers]]}}


OVERLAID = {"name": "app", "volumeMounts": [{"name": "gkm-kernels-llama", "mountPath": OVERLAY_PATH}],
            "env": [{"name": "TRITON_CACHE_DIR", "value": OVERLAY_PATH}]}
COLD = {"name": "app", "volumeMounts": [{"name": "cold", "mountPath": "/var/run/cold"}],
        "env": [{"name": "TRITON_CACHE_DIR", "value": "/var/run/cold"}]}


def test_the_overlay_of_the_cache_is_read_where_the_pod_has_it():
    assert read.pod_source(_pod([OVERLAID]), "llama") == ("app", OVERLAY_PATH, True)


def test_a_pod_given_no_cache_is_read_at_its_triton_directory_in_an_empty_dir():
    pod = _pod([{"name": "side"}, COLD], [{"name": "cold", "emptyDir": {}}], running=("side", "app"))
    assert read.pod_source(pod, "llama") == ("app", "/var/run/cold", False)


@pytest.mark.parametrize("pod, fragment", [
    (_pod([OVERLAID], phase="Succeeded"), "is Succeeded"),
    (_pod([OVERLAID], running=()), "no running container"),
    (_pod([COLD], [{"name": "cold", "hostPath": {"path": "/x"}}]), "no running container"),
], ids=["finished", "container ended", "not an emptyDir"])
def test_a_pod_with_nothing_of_its_own_to_read_is_refused(pod, fragment):
    with pytest.raises(CaptureError) as refused:
        read.pod_source(pod, "llama")
    assert fragment in str(refused.value)


def _tar(entries):
    """tar bytes as `tar -c -C dir .` writes them: ./-prefixed names."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo("./" + name)
            if isinstance(data, tuple):
                info.type, info.linkname = data
            else:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if not isinstance(data, tuple) else None)
    return buffer.getvalue()


def _overlay_tar(extra=()):
    """An overlay directory: a kernel from the mount (only its group), one the pod compiled, and the marker."""
    mounted, mounted_files = kernel(1)
    compiled, compiled_files = kernel(2)
    entries = [("%s/__grp__vector_add.json" % mounted, mounted_files["__grp__vector_add.json"])]
    entries += [("%s/%s" % (compiled, name), data) for name, data in compiled_files.items()]
    entries.append((MARKER, json.dumps({"hash_dirs": [mounted]}).encode()))
    return _tar(entries + list(extra)), mounted, compiled, compiled_files


def test_only_the_kernels_the_pod_compiled_are_kept(tmp_path):
    tar, _mounted, compiled, files = _overlay_tar()
    dest = str(tmp_path / "pod")
    assert read.unpack(tar, dest, overlaid=True) == [compiled]
    assert read.load_kernels(dest, [compiled]) == {compiled: files}


def test_without_the_overlay_every_kernel_directory_is_the_pod_s(tmp_path):
    tar, mounted, compiled, _files = _overlay_tar()
    assert read.unpack(tar, str(tmp_path / "pod"), overlaid=False) == sorted([mounted, compiled])


def test_an_overlay_without_its_marker_is_refused(tmp_path):
    directory, files = kernel(2)
    with pytest.raises(CaptureError, match=r"no \.gkm-overlay\.json"):
        read.unpack(_tar([("%s/%s" % (directory, n), d) for n, d in files.items()]), str(tmp_path / "p"), True)


@pytest.mark.parametrize("entry, fragment", [
    (("../../escape", b"x"), "'..' component"),
    (("dev", (tarfile.CHRTYPE, "")), "device node"),
    (("out", (tarfile.SYMTYPE, "../../../etc")), "leaves dest"),
], ids=["dot-dot", "device", "link out"])
def test_the_extractor_s_rules_refuse_a_hostile_entry(tmp_path, entry, fragment):
    tar = _overlay_tar([entry])[0]
    with pytest.raises(CaptureError) as refused:
        read.unpack(tar, str(tmp_path / "pod"), overlaid=True)
    assert "extractor's rules" in str(refused.value) and fragment in str(refused.value), str(refused.value)


def test_a_link_inside_a_kernel_directory_is_refused_when_read(tmp_path):
    tar, _mounted, compiled, _files = _overlay_tar()
    tar = _overlay_tar([("%s/vector_add.link" % compiled, (tarfile.SYMTYPE, "vector_add.llir"))])[0]
    dest = str(tmp_path / "pod")
    assert read.unpack(tar, dest, overlaid=True) == [compiled]
    assert os.path.islink(os.path.join(dest, compiled, "vector_add.link"))
    with pytest.raises(CaptureError, match="not a regular file"):
        read.load_kernels(dest, [compiled])


INIT_USE = {"name": "gkm-kernel-use-llama", "restartPolicy": "Always"}


@pytest.mark.parametrize("phase, running, ended", [
    ("Succeeded", (), True), ("Failed", (), True), ("Running", (), True), ("Running", ("app",), False),
    ("Pending", ("app",), False)], ids=["succeeded", "failed", "workload ended", "running", "pending"])
def test_a_pod_is_finished_when_its_phase_or_its_workload_says_so(phase, running, ended):
    assert read.finished(_pod([OVERLAID], phase=phase, running=running)) is ended


def test_a_finished_pod_is_read_from_its_kernel_use_sidecar_and_one_without_is_refused():
    pod = _pod([OVERLAID], phase="Succeeded", running=())
    with pytest.raises(CaptureError, match="no kernel-use sidecar of llama"):
        read.log_source(pod, "llama")
    pod["spec"]["initContainers"] = [INIT_USE]
    assert read.log_source(pod, "llama") == "gkm-kernel-use-llama"


class _Log:
    """The API's answer to pods/log: the log text given, the request kept."""

    def __init__(self, text):
        self.text, self.asked = text, []

    def request(self, method, path, query=None, **options):
        self.asked.append((method, path, dict(query)))
        return 200, self.text


def test_the_frame_is_read_from_the_sidecar_s_last_two_lines_and_its_absence_said():
    directory, files = kernel(2)
    packed = gzip.compress(_tar([("%s/%s" % (directory, n), d) for n, d in files.items()]))
    frame = {FRAME_KEY: 1, "sha256": hashlib.sha256(packed).hexdigest(), "bytes": len(packed),
             "data": base64.b64encode(packed).decode()}
    kube = _Log("\n".join([json.dumps(frame), json.dumps({"gkm_kernel_use": 1, "misses": 1})]))
    assert read.log_frame(kube, "team-a", "p", "gkm-kernel-use-llama") == packed
    [(method, path, query)] = kube.asked
    # The frame's line may be stored as partial lines of 16 KiB, which tailLines counts: enough for the cap's.
    assert (method, path, query["container"]) == ("GET", "/api/v1/namespaces/team-a/pods/p/log", "gkm-kernel-use-llama")
    assert int(query["tailLines"]) * read.CRI_LINE_BYTES > DEFAULT_MAX_BYTES * 4 // 3
    with pytest.raises(CaptureError, match="wrote no capture frame"):
        read.log_frame(_Log('{"gkm_kernel_use": 1}'), "team-a", "p", "gkm-kernel-use-llama")
    with pytest.raises(CaptureError, match="does not match"):
        read.log_frame(_Log(json.dumps(dict(frame, sha256="0" * 64))), "team-a", "p", "gkm-kernel-use-llama")
