"""The scrub Job's program on a temporary directory: slots removed, empty parents climbed, links never followed."""

import json
import os

import pytest

from ansible_collections.gkm.cluster.plugins.module_utils.extract import scrub_main

SLOT = "team-a/vector-add/team-a/9ac0"
SIBLING = "team-a/vector-add/team-a/77bb"


def make_slot(root, relative, files=("io.triton.cache/K/k.json", "io.triton.manifest/manifest.json")):
    for name in files:
        path = os.path.join(root, relative, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.write("{}")
    return os.path.join(root, relative)


def test_removes_the_slot_and_its_empty_parents_but_not_the_root(tmp_path):
    root = str(tmp_path / "root")
    make_slot(root, SLOT)
    report = scrub_main.scrub(root, [SLOT])
    assert report["removed"] == [SLOT] and not report["refused"]
    assert report["parents_removed"] == ["team-a/vector-add/team-a", "team-a/vector-add", "team-a"]
    assert os.listdir(root) == []


def test_parents_still_holding_another_slot_stay(tmp_path):
    root = str(tmp_path)
    make_slot(root, SLOT)
    make_slot(root, SIBLING)
    report = scrub_main.scrub(root, [SLOT])
    assert report["parents_removed"] == []
    assert not os.path.exists(os.path.join(root, SLOT))
    assert os.path.isfile(os.path.join(root, SIBLING, "io.triton.manifest", "manifest.json"))


def test_a_missing_slot_is_absent_and_its_empty_parents_still_go(tmp_path):
    root = str(tmp_path)
    os.makedirs(os.path.join(root, "team-a", "vector-add"))
    report = scrub_main.scrub(root, [SLOT])
    assert report["absent"] == [SLOT] and report["removed"] == []
    assert report["parents_removed"] == ["team-a/vector-add", "team-a"]
    assert os.listdir(root) == []


def test_links_inside_a_slot_are_removed_not_followed(tmp_path):
    root, outside = str(tmp_path / "root"), tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    slot = make_slot(root, SLOT)
    os.symlink(str(outside), os.path.join(slot, "io.triton.cache", "escape"))
    os.symlink(str(outside / "precious"), os.path.join(slot, "file-link"))
    scrub_main.scrub(root, [SLOT])
    assert not os.path.lexists(slot)
    assert (outside / "precious").read_text() == "keep me"


def test_a_slot_that_is_itself_a_link_loses_the_link_only(tmp_path):
    root, outside = str(tmp_path / "root"), tmp_path / "outside"
    (outside / "inner").mkdir(parents=True)
    os.makedirs(os.path.join(root, os.path.dirname(SLOT)))
    os.symlink(str(outside), os.path.join(root, SLOT))
    report = scrub_main.scrub(root, [SLOT])
    assert report["removed"] == [SLOT]
    assert (outside / "inner").is_dir()


def test_a_linked_parent_is_refused_and_its_target_untouched(tmp_path):
    root, outside = str(tmp_path / "root"), tmp_path / "outside"
    make_slot(str(outside), "team-a/9ac0")
    os.makedirs(os.path.join(root, "team-a"))
    os.symlink(str(outside / "team-a"), os.path.join(root, "team-a", "vector-add"))
    report = scrub_main.scrub(root, ["team-a/vector-add/9ac0", SIBLING, "team-b/llama/team-b/1234"])
    assert "symbolic link" in report["refused"]["team-a/vector-add/9ac0"]
    assert "symbolic link" in report["refused"][SIBLING]
    assert (outside / "team-a" / "9ac0" / "io.triton.manifest" / "manifest.json").is_file()
    assert report["absent"] == ["team-b/llama/team-b/1234"]


@pytest.mark.parametrize("bad", ["", "/etc", "a/../../etc", "a/./b", "a//b", "..", "a/b/", "a\0b"])
def test_paths_not_strictly_under_the_root_are_refused_before_anything_is_removed(tmp_path, bad):
    make_slot(str(tmp_path), SLOT)
    with pytest.raises(scrub_main.ScrubError):
        scrub_main.scrub(str(tmp_path), [SLOT, bad])
    assert os.path.isdir(os.path.join(str(tmp_path), SLOT))


def test_read_only_directories_of_the_extraction_uid_are_removed(tmp_path):
    """The extractor leaves read-only trees; the Job's DAC_OVERRIDE (here: root) removes them anyway."""
    if os.geteuid() != 0:
        pytest.skip("needs root, as the scrub Job runs")
    root = str(tmp_path)
    slot = make_slot(root, SLOT)
    for directory, _dirs, _files in os.walk(slot):
        os.chown(directory, 1000, 1000)
    for directory in [os.path.join(slot, "io.triton.cache", "K"), os.path.join(slot, "io.triton.cache"), slot]:
        os.chmod(directory, 0o555)
    assert scrub_main.scrub(root, [SLOT])["removed"] == [SLOT]
    assert os.listdir(root) == []


def test_main_prints_the_report_and_exits_by_outcome(tmp_path, capsys):
    make_slot(str(tmp_path), SLOT)
    assert scrub_main.main(["--root", str(tmp_path), SLOT]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == [SLOT]
    assert scrub_main.main(["--root", str(tmp_path), "../escape"]) == 2
    assert "refused" in json.loads(capsys.readouterr().out)["msg"]
