"""The per-file cost of an extraction, counted, not timed: Python calls and system calls per file.

Timings vary with the machine; call counts do not. The budgets are about 1.4x what the extraction makes
today (about 73 Python calls, builtins included, and 3.1 system calls per file: open, write, close); an
accidental per-file tarfile object, thread handoff, stat or chmod shows up here at once.
"""

import cProfile
import io
import pstats

from ansible_collections.gkm.cluster.plugins.module_utils.extract import archive
from tests.helpers import kcache_images as ki

FILES = 600
PYTHON_CALLS_PER_FILE = 100
SYSTEM_CALLS_PER_FILE = 4.5
# Functions of the os module that are one system call each (as cProfile names them).
_SYSTEM_CALLS = ("open", "write", "close", "mkdir", "chmod", "fchmod", "stat", "lstat", "fstat", "utime", "link",
                 "symlink", "unlink", "rename", "scandir", "listdir", "fsync", "readlink")


def _layer():
    entries = [ki.Entry("io.triton.cache/k%03d/f%03d.bin" % (i // 10, i), bytes(1000 + i)) for i in range(FILES)]
    return ki.layer_bytes(entries)[0]


def _profile(blob, dest):
    profiler = cProfile.Profile()
    profiler.enable()
    archive.extract_layer(io.BytesIO(blob).read, ki.sha256_digest(blob), len(blob), str(dest))
    profiler.disable()
    return pstats.Stats(profiler).stats


def test_per_file_python_and_system_calls_stay_within_budget(tmp_path):
    blob = _layer()
    _profile(blob, tmp_path / "warm")  # first-use costs (imports, caches) are not per file
    stats = _profile(blob, tmp_path / "c")
    python_calls = sum(calls for (_file, _line, _name), (calls, *_rest) in stats.items())
    system_calls = sum(calls for (file, _line, name), (calls, *_rest) in stats.items()
                       if file == "~" and name.startswith("<built-in method posix.")
                       and name[len("<built-in method posix."):-1] in _SYSTEM_CALLS)
    print("per file: %.1f Python calls, %.2f system calls" % (python_calls / FILES, system_calls / FILES))
    assert python_calls / FILES <= PYTHON_CALLS_PER_FILE
    assert system_calls / FILES <= SYSTEM_CALLS_PER_FILE
    assert system_calls / FILES >= 3  # the count is real: open, write, close for every file
