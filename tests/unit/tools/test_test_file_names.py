"""pytest imports test files in its default mode, by their base name: two files of one name cannot be collected in
one run (`make test-lowest` collects every integration file at once), so each name is unique across tests/."""
import collections
import os

from tests.helpers.paths import ROOT


def test_every_test_file_name_is_unique_across_tests():
    found = collections.defaultdict(list)
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "tests")):
        for name in files:
            if name.startswith("test_") and name.endswith(".py"):
                found[name].append(os.path.relpath(os.path.join(folder, name), ROOT))
    assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}
