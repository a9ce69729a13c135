"""The capture frame (plugins/module_utils/kernels/capture_frame.py): a finished pod's compiled kernels as one
bounded log line, written by the stopped kernel-use sidecar and opened by cache_capture (capture/read.py)."""

import base64
import gzip
import hashlib
import io
import json
import tarfile

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.capture import read
from ansible_collections.gkm.cluster.plugins.module_utils.capture.errors import CaptureError
from ansible_collections.gkm.cluster.plugins.module_utils.kernels import overlay, usage_main
from ansible_collections.gkm.cluster.plugins.module_utils.kernels.capture_frame import (
    FRAME_KEY,
    OVER_CAP,
    FrameError,
    make_frame,
    open_frame,
)
from tests.helpers.kernel_dirs import kernel


def _write(root, directory, files):
    (root / directory).mkdir(parents=True)
    for name, data in files.items():
        (root / directory / name).write_bytes(data)


def _overlay(tmp_path):
    """An overlay: one kernel from the mount, one compiled in the pod, and a launcher directory (no group)."""
    cache, into = tmp_path / "cache", tmp_path / "into"
    mounted, mounted_files = kernel(1)
    _write(cache, mounted, mounted_files)
    overlay.write_overlay(str(cache), str(into))
    compiled, compiled_files = kernel(2, name="matmul")
    _write(into, compiled, compiled_files)
    (into / "LAUNCHER").mkdir()
    (into / "LAUNCHER" / "__triton_launcher.so").write_bytes(b"\x7fELF")
    return into, compiled, compiled_files


def _frame_of(entries):
    """A frame made by hand around a tar of (name, data or (type, linkname)) entries, its hash right."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            if isinstance(data, tuple):
                info.type, info.linkname = data
            else:
                info.size = len(data)
            tar.addfile(info, None if isinstance(data, tuple) else io.BytesIO(data))
    packed = gzip.compress(buffer.getvalue())
    return {FRAME_KEY: 1, "sha256": hashlib.sha256(packed).hexdigest(), "bytes": len(packed),
            "data": base64.b64encode(packed).decode()}


def test_the_stopped_sidecar_frames_what_the_pod_compiled_and_capture_reads_it_back(tmp_path, capsys):
    into, compiled, files = _overlay(tmp_path)

    def sleep(_seconds):
        raise usage_main._Stopped()

    assert usage_main.main([str(into), "--interval", "0", "--capture-max-bytes", "100000"], sleep=sleep) == 0
    lines = capsys.readouterr().out.splitlines()
    # The report stays the last line (the reconcile reads one line); the frame is the one before it.
    assert [FRAME_KEY in json.loads(line) for line in lines] == [False, True, False]
    assert json.loads(lines[-1])["misses"] == 1
    frame = read.frame_of("\n".join(lines))
    assert frame["kernels"] == 1
    dest = str(tmp_path / "read")
    assert read.unpack_frame(open_frame(frame), dest) == [compiled]
    assert read.load_kernels(dest, [compiled]) == {compiled: files}


def test_a_sidecar_not_opted_in_prints_no_frame(tmp_path, capsys):
    into, _compiled, _files = _overlay(tmp_path)

    def sleep(_seconds):
        raise usage_main._Stopped()

    usage_main.main([str(into), "--interval", "0"], sleep=sleep)
    assert read.frame_of(capsys.readouterr().out) is None


def test_over_the_cap_the_frame_says_it_skipped_and_capture_says_so(tmp_path):
    into, compiled, _files = _overlay(tmp_path)
    frame = make_frame(str(into), [compiled], max_bytes=10)
    assert frame["skipped"] == OVER_CAP and "data" not in frame and frame["max_bytes"] == 10
    with pytest.raises(FrameError, match="over the capture cap"):
        open_frame(frame)


def test_the_reader_holds_its_own_cap_whatever_the_frame_claims(tmp_path):
    into, compiled, _files = _overlay(tmp_path)
    frame = make_frame(str(into), [compiled])
    with pytest.raises(FrameError, match="over 16 bytes"):
        open_frame(frame, max_bytes=16)


@pytest.mark.parametrize("change, fragment", [
    (lambda f: f.update(data=f["data"][:len(f["data"]) // 2 - 1]), "not base64"),
    (lambda f: f.update(data=f["data"][:len(f["data"]) // 8 * 4]), "does not match"),
    (lambda f: f.update(sha256="0" * 64), "does not match"),
    (lambda f: f.update(bytes=1), "does not match"),
    (lambda f: f.pop("sha256"), "no data or no sha256"),
], ids=["truncated mid-quad", "truncated", "bad hash", "bad size", "no hash"])
def test_a_frame_cut_short_or_altered_is_refused(tmp_path, change, fragment):
    into, compiled, _files = _overlay(tmp_path)
    frame = make_frame(str(into), [compiled])
    change(frame)
    with pytest.raises(FrameError, match=fragment):
        open_frame(frame)


def test_a_line_cut_short_in_the_log_is_read_as_a_broken_frame():
    line = json.dumps({FRAME_KEY: 1, "sha256": "x", "bytes": 3, "data": "QUJD"})
    frame = read.frame_of('{"compiled": []}\n' + line[:-10])
    with pytest.raises(FrameError, match="no data"):
        open_frame(frame)


@pytest.mark.parametrize("entry, fragment", [
    (("../../escape", b"x"), "'..' component"),
    (("/etc/passwd", b"x"), "absolute"),
    (("dev", (tarfile.CHRTYPE, "")), "device node"),
    (("out", (tarfile.SYMTYPE, "../../../etc")), "leaves dest"),
], ids=["dot-dot", "absolute", "device", "link out"])
def test_hostile_names_in_a_well_hashed_frame_meet_the_extractor_s_rules(tmp_path, entry, fragment):
    directory, files = kernel(2)
    frame = _frame_of([("%s/%s" % (directory, n), d) for n, d in files.items()] + [entry])
    with pytest.raises(CaptureError) as refused:
        read.unpack_frame(open_frame(frame), str(tmp_path / "pod"))
    assert "extractor's rules" in str(refused.value) and fragment in str(refused.value), str(refused.value)
