"""The group overlay (plugins/module_utils/kernels/overlay.py, overlay_main.py) on files shaped like Triton's.

Whether Triton itself then hits is test_overlay_hits.py, with the pinned Triton; here, what the overlay writes, what
it leaves out and why, and that it touches nothing but its destination. Standard library only, as the init container.
"""

import ast
import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.kernels import overlay, overlay_main
from tests.helpers.paths import ROOT

BUILT_AT = "/var/lib/gkm/slots/c-0123/io.triton.cache"


def _kernel(root, hash_dir, name="matmul", built_at=BUILT_AT, files=("ttir", "llir", "cubin", "json")):
    kernel_dir = root / hash_dir
    kernel_dir.mkdir(parents=True)
    children = {}
    for ext in files:
        (kernel_dir / ("%s.%s" % (name, ext))).write_bytes(b"x" * 10)
        children["%s.%s" % (name, ext)] = "%s/%s/%s.%s" % (built_at, hash_dir, name, ext)
    (kernel_dir / ("__grp__%s.json" % name)).write_text(json.dumps({"child_paths": children}))
    return kernel_dir


def _tree(root):
    found = {}
    for base, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, root)] = handle.read()
    return found


def test_overlay_group_repoints_each_child_at_the_kernel_dir_in_tritons_shape():
    text, children = overlay.overlay_group(json.dumps({"child_paths": {
        "k.ttir": "/build/X/k.ttir", "k.json": "/elsewhere/k.json"}}), "/cache/io.triton.cache/X")
    assert children == {"k.ttir": "/cache/io.triton.cache/X/k.ttir", "k.json": "/cache/io.triton.cache/X/k.json"}
    assert json.loads(text) == {"child_paths": children}


@pytest.mark.parametrize(("text", "why"), [
    ("not json", "not JSON"),
    ("[]", "no child_paths"),
    ('{"child_paths": ["a"]}', "no child_paths"),
    ('{"child_paths": {"k.ttir": 3}}', "map file names"),
    ('{"child_paths": {"../k.ttir": "/b/../k.ttir"}}', "plain file name"),
    ('{"child_paths": {"..": "/b/.."}}', "plain file name"),
    ('{"child_paths": {"__grp__k.json": "/b/__grp__k.json"}}', "plain file name"),
    ('{"child_paths": {"k.ttir": "/etc/passwd"}}', "not under its own name"),
])
def test_overlay_group_refuses_what_tritons_file_cache_never_writes(text, why):
    with pytest.raises(overlay.OverlayError, match=why):
        overlay.overlay_group(text, "/cache/X")


def test_the_overlay_holds_only_group_files_pointing_at_the_mount_and_leaves_the_mount_untouched(tmp_path):
    mount = tmp_path / "mnt" / "cache" / "io.triton.cache"
    _kernel(mount, "AAAA", "matmul")
    _kernel(mount, "BBBB", "vector_add")
    (mount / "stray-file").write_text("not a kernel")
    before = _tree(tmp_path / "mnt")
    into = tmp_path / "triton"
    result = overlay.write_overlay(overlay.triton_cache_dir(str(tmp_path / "mnt" / "cache")), str(into))
    assert result["kernels"] == 2 and result["groups"] == 2 and result["skipped"] == []
    assert result["source"] == str(mount)
    assert sorted(_tree(into)) == [overlay.MARKER, "AAAA/__grp__matmul.json", "BBBB/__grp__vector_add.json"]
    for path, data in _tree(into).items():
        if path == overlay.MARKER:
            continue
        children = json.loads(data)["child_paths"]
        hash_dir = path.split("/")[0]
        assert all(child == "%s/%s/%s" % (mount, hash_dir, name) and os.path.isfile(child)
                   for name, child in children.items())
    assert result["bytes"] == sum(len(data) for path, data in _tree(into).items() if path != overlay.MARKER)
    assert _tree(tmp_path / "mnt") == before
    assert overlay.compiled_here(str(into)) == []


def test_a_group_triton_would_miss_is_left_out_so_triton_compiles_it_into_the_overlay(tmp_path):
    mount = tmp_path / "cache"
    _kernel(mount, "GOOD")
    (_kernel(mount, "GONE") / "matmul.cubin").unlink()
    (_kernel(mount, "BAD") / "__grp__matmul.json").write_text("{")
    evil = _kernel(mount, "EVIL")
    (evil / "__grp__matmul.json").write_text(json.dumps({"child_paths": {"matmul.ttir": "/etc/matmul.ttirx"}}))
    linked = _kernel(mount, "LINK")
    (linked / "matmul.llir").unlink()
    os.symlink("/etc/hostname", str(linked / "matmul.llir"))
    os.symlink(str(mount / "GOOD"), str(mount / "ALIAS"))
    _kernel(mount, overlay.MARKER)  # a hostile cache's directory named as the marker: not a kernel, not fatal
    result = overlay.write_overlay(str(mount), str(tmp_path / "triton"))
    assert result["kernels"] == 1 and sorted(os.listdir(tmp_path / "triton")) == [overlay.MARKER, "GOOD"]
    reasons = {s["hash_dir"]: s["reason"] for s in result["skipped"]}
    assert reasons["GONE"] == overlay.MISSING_FILE and reasons["LINK"] == overlay.MISSING_FILE
    assert reasons["BAD"].startswith(overlay.NOT_TRITONS) and "not under its own name" in reasons["EVIL"]
    assert "ALIAS" not in reasons and overlay.MARKER not in reasons
    assert json.loads((tmp_path / "triton" / overlay.MARKER).read_text())["hash_dirs"] == ["GOOD"]


def test_run_again_into_the_same_emptydir_it_rewrites_the_same_files_and_sees_what_the_pod_compiled(tmp_path):
    mount = tmp_path / "cache"
    _kernel(mount, "AAAA")
    into = tmp_path / "triton"
    into.mkdir()  # an emptyDir exists before the init container runs
    first = overlay.write_overlay(str(mount), str(into))
    (into / "CCCC").mkdir()  # what Triton writes for a kernel the cache lacks
    (into / "CCCC" / "__grp__softmax.json").write_text("{}")
    again = overlay.write_overlay(str(mount), str(into))
    assert first == again and sorted(os.listdir(into)) == [overlay.MARKER, "AAAA", "CCCC"]
    assert overlay.compiled_here(str(into)) == ["CCCC"]
    assert overlay.compiled_here(str(mount)) is None
    assert not [n for n in os.listdir(into / "AAAA") if n.endswith(".tmp")]


def test_a_cache_mounted_at_its_kernels_level_is_overlaid_from_there(tmp_path):
    _kernel(tmp_path / "cache", "AAAA")
    assert overlay.triton_cache_dir(str(tmp_path / "cache")) == str(tmp_path / "cache")


def test_the_entry_point_prints_what_it_wrote_and_fails_with_a_message_without_a_mount(tmp_path, capsys):
    _kernel(tmp_path / "cache" / "io.triton.cache", "AAAA")
    assert overlay_main.main([str(tmp_path / "cache"), str(tmp_path / "triton")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["kernels"] == 1 and printed["seconds"] >= 0
    log = tmp_path / "termination-log"
    assert overlay_main.main([str(tmp_path / "nowhere"), str(tmp_path / "t2"), "--termination-log", str(log)]) == 1
    assert "must be mounted in this container" in log.read_text()
    assert not (tmp_path / "t2").exists()


def test_a_read_only_mount_is_enough(tmp_path):
    mount = tmp_path / "cache"
    kernel_dir = _kernel(mount, "AAAA")
    for path in [*kernel_dir.iterdir(), kernel_dir, mount]:
        path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)
    try:
        assert overlay.write_overlay(str(mount), str(tmp_path / "triton"))["kernels"] == 1
    finally:
        for path in [mount, kernel_dir, *kernel_dir.iterdir()]:
            path.chmod(0o755)


def test_it_runs_as_the_init_container_runs_it_importing_only_the_standard_library(tmp_path):
    _kernel(tmp_path / "cache" / "io.triton.cache", "AAAA")
    run = subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "from ansible_collections.gkm.cluster.plugins.module_utils.kernels import overlay_main; "
                          "code = overlay_main.main(sys.argv[2:]); "
                          "assert not [m for m in sys.modules if m.startswith(('ansible.', 'oras', 'yaml'))], "
                          "sorted(sys.modules); sys.exit(code)",
                          _collections_root(),
                          str(tmp_path / "cache"), str(tmp_path / "triton")],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["kernels"] == 1


def _collections_root():
    """The directory holding ansible_collections/, as PYTHONPATH in the tools image (overlay_main.py is 7 levels in)."""
    path = overlay_main.__file__
    for _level in range(7):
        path = os.path.dirname(path)
    return path


def test_the_kernels_package_imports_nothing_of_the_collection_but_itself():
    package = os.path.join(ROOT, "plugins", "module_utils", "kernels")
    found = []
    for name in sorted(os.listdir(package)):
        if name.endswith(".py"):
            with open(os.path.join(package, name)) as handle:
                tree = ast.parse(handle.read())
            for node in ast.walk(tree):
                module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
                if "gkm.cluster" in module and ".module_utils.kernels" not in module:
                    found.append("%s imports %s" % (name, module))
    assert found == []
