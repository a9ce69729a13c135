# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Safe, atomic, streaming extraction of a gzip tar layer into a directory.

One pass: the compressed bytes are hashed as they arrive, gunzipped in a helper thread (isal when
installed) and untarred into a temporary directory beside `dest`. Only when the whole layer was
read, its digest matched and every entry passed the safety rules is the temporary directory
swapped with `dest` (renameat2 RENAME_EXCHANGE where the kernel has it). On any failure the
temporary directory is removed and `dest` is exactly as it was.

Safety rules, checked on every entry before anything is written for it:
- names must be relative and free of `..`; device nodes, FIFOs and other special types are refused;
- symlinks are created last, after all regular files, and only when their target stays inside the
  extracted tree without passing through another symlink; hardlinks may only point at regular
  files already extracted from the same layer;
- setuid/setgid/sticky and group/other write bits are dropped: files become 0644 or 0755 and directories
  0755 whatever the umask, so a workload running as any uid can read the tree (it is not the extractor's uid);
- limits on total bytes, file count and expansion ratio (uncompressed / compressed) stop zip bombs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gkm.cluster.plugins.module_utils.extract.rules import (
    ExtractError,
    Limits,
    check_symlink_target,
    entry_kind,
    file_mode,
    in_cache_scope,
    rewrite_group_file,
    safe_member_path,
)
from ansible_collections.gkm.cluster.plugins.module_utils.extract.streams import (
    CHUNK,
    GZIP_ERRORS,
    DigestReader,
    ForwardStream,
    open_gunzip,
)
from ansible_collections.gkm.cluster.plugins.module_utils.extract.tree import (
    MARKER_NAME,
    MARKER_VERSION,
    TMP_INFIX,
    DestLock,
    check_dest,
    remove_stale_temporaries,
    swap_into_place,
    tree_fingerprint,
)

_GROUP_FILE = re.compile(r"^__grp__.*\.json$")
_MAX_GROUP_FILE = 16 * 1024 * 1024
# Files up to this size are read into memory and written by a pool of threads: creating many small
# files is bound by file-system latency, not CPU, and open/write/close release the GIL.
_POOLED_FILE_MAX = 4 * 1024 * 1024
_POOL_THREADS = 8
_POOL_MAX_INFLIGHT_BYTES = 64 * 1024 * 1024
# Readable and traversable by every uid, writable by the extractor only.
DIR_MODE = 0o755
MARKER_MODE = 0o644


# ---------------------------------------------------------------- extraction


class _Extraction:
    """Untars one layer stream into `root`, a temporary directory that will become `final_dest`."""

    def __init__(self, root, final_dest, limits, whole_layer, rewrite_groups):
        self.root = root
        self.final_dest = final_dest
        self.limits = limits
        self.whole_layer = whole_layer
        self.rewrite_groups = rewrite_groups
        self.files = {}  # path -> bytes written
        self.bytes = 0
        self.symlinks = {}  # path -> target, created after all files
        self.dirs = {""}
        self.setid_stripped = 0
        self.groups_rewritten = 0
        self.pool = ThreadPoolExecutor(_POOL_THREADS)
        self.pending = {}  # path -> future of a pooled write
        self.inflight = collections.deque()  # (future, size) in submission order
        self.inflight_bytes = 0

    def _wait_for(self, path):
        future = self.pending.pop(path, None)
        if future is not None:
            future.result()

    def _submit(self, path, data, mode):
        while self.inflight and (self.inflight_bytes > _POOL_MAX_INFLIGHT_BYTES or self.inflight[0][0].done()):
            future, size = self.inflight.popleft()
            future.result()
            self.inflight_bytes -= size
        future = self.pool.submit(_write_file, os.path.join(self.root, path), (data,), mode)
        self.pending[path] = future
        self.inflight.append((future, len(data)))
        self.inflight_bytes += len(data)

    def close(self):
        """Wait for every pooled write; raise the first error any of them hit."""
        self.pool.shutdown(wait=True)
        for future in self.pending.values():
            future.result()

    def _parent(self, path):
        missing = []
        parent = path.rpartition("/")[0]
        while parent and parent not in self.dirs:
            missing.append(parent)
            parent = parent.rpartition("/")[0]
        for directory in reversed(missing):
            full = os.path.join(self.root, directory)
            try:
                os.mkdir(full)
            except FileExistsError:
                raise ExtractError("entry %r is a file but the layer also has it as a directory" % directory) from None
            os.chmod(full, DIR_MODE)  # mkdir's mode is cut by the umask
            self.dirs.add(directory)

    def _claim(self, path, size):
        if path in self.dirs:
            raise ExtractError("entry %r is a file but the layer also has it as a directory" % path)
        previous = self.files.pop(path, None)
        if previous is not None:  # a later tar entry replaces an earlier one, as tar does
            self._wait_for(path)
            self.bytes -= previous
            os.unlink(os.path.join(self.root, path))
        if len(self.files) + len(self.symlinks) + 1 > self.limits.max_files:
            raise ExtractError("the layer has more than max_files=%d files" % self.limits.max_files)
        if self.bytes + size > self.limits.max_bytes:
            raise ExtractError("the layer holds more than max_bytes=%d bytes (at entry %r, %d bytes)"
                               % (self.limits.max_bytes, path, size))

    def add(self, tar, member):
        kind = entry_kind(member)
        path = safe_member_path(member.name)
        if not path or not (self.whole_layer or in_cache_scope(path)):
            return
        if kind == "dir":
            if path in self.files or path in self.symlinks:
                raise ExtractError("entry %r is a directory but the layer also has it as a file" % path)
            self._parent(path + "/x")
            return
        if kind == "symlink":
            self._claim(path, 0)
            self.symlinks[path] = member.linkname
            return
        if member.mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX):
            self.setid_stripped += 1
        mode = file_mode(member.mode)
        if kind == "hardlink":
            source = safe_member_path(member.linkname, "hardlink target")
            if source not in self.files:
                raise ExtractError("hardlink %r -> %r does not point at a regular file extracted from this layer"
                                   % (path, member.linkname))
            self._claim(path, self.files[source])
            self._wait_for(source)
            self._parent(path)
            os.link(os.path.join(self.root, source), os.path.join(self.root, path))
            self.files[path] = self.files[source]
            self.bytes += self.files[path]
            return
        self._claim(path, member.size)
        self._parent(path)
        source = tar.extractfile(member)
        name = path.rpartition("/")[2]
        if self.rewrite_groups and _GROUP_FILE.match(name) and member.size <= _MAX_GROUP_FILE:
            final_dir = os.path.join(self.final_dest, path.rpartition("/")[0])
            data = rewrite_group_file(source.read(), final_dir, path)
            self.groups_rewritten += 1
        elif member.size <= _POOLED_FILE_MAX:
            data = source.read()
        else:
            written = _write_file(os.path.join(self.root, path), iter(lambda: source.read(CHUNK), b""), mode)
            self.files[path] = written
            self.bytes += written
            return
        if len(data) != member.size and not _GROUP_FILE.match(name):
            raise ExtractError("the layer is truncated inside entry %r" % path)
        self._submit(path, data, mode)
        self.files[path] = len(data)
        self.bytes += len(data)

    def finish_symlinks(self):
        for path, target in self.symlinks.items():
            check_symlink_target(path, target, self.symlinks)
        for path, target in sorted(self.symlinks.items()):
            self._parent(path)
            try:
                os.symlink(target, os.path.join(self.root, path))
            except FileExistsError:
                raise ExtractError("symlink %r conflicts with a file or directory of the same name" % path) from None


def _write_file(path, chunks, mode):
    """Create a new file (never through a symlink, never over an existing one); return bytes written."""
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # open's mode is cut by the umask
        for chunk in chunks:
            os.write(fd, chunk)
            written += len(chunk)
    finally:
        os.close(fd)
    return written


def extract_layer(read, layer_digest, layer_size, dest, limits=None, whole_layer=False, rewrite_groups=True,
                  marker=None):
    """Stream a gzip tar layer from `read(n)` into dest, atomically; return what was written.

    `marker` (a dict) is stored in dest as MARKER_NAME together with the tree fingerprint.
    Raises ExtractError (dest unchanged) on any unsafe entry, limit, digest or format problem.
    """
    limits = limits or Limits()
    started = time.monotonic()
    check_dest(dest)
    with DestLock(dest):
        remove_stale_temporaries(dest)
        parent, name = os.path.split(dest.rstrip("/"))
        root = tempfile.mkdtemp(prefix="." + name + TMP_INFIX, dir=parent)
        old_tree = None
        try:
            os.chmod(root, DIR_MODE)
            stats = _extract_into(read, layer_digest, layer_size, root, dest, limits, whole_layer, rewrite_groups)
            files, size, fingerprint = tree_fingerprint(root)
            document = dict(marker or {}, version=MARKER_VERSION, layer_digest=layer_digest, files=files,
                            bytes=size, tree=fingerprint, whole_layer=whole_layer, rewrite_groups=rewrite_groups)
            _write_file(os.path.join(root, MARKER_NAME), (json.dumps(document).encode("utf-8"),), MARKER_MODE)
            old_tree = swap_into_place(root, dest)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        if old_tree:
            shutil.rmtree(old_tree, ignore_errors=True)
    stats.update(files=files, bytes=size, seconds=round(time.monotonic() - started, 3))
    return stats


def _extract_into(read, layer_digest, layer_size, root, final_dest, limits, whole_layer, rewrite_groups):
    digest_reader = DigestReader(read, layer_size)
    max_total = limits.max_bytes
    if limits.max_ratio and layer_size:
        max_total = min(max_total + 1024 * 1024, layer_size * limits.max_ratio)
    extraction = _Extraction(root, final_dest, limits, whole_layer, rewrite_groups)
    try:
        with open_gunzip(digest_reader) as gunzipped:
            stream = ForwardStream(gunzipped, max_total)
            try:
                with tarfile.open(fileobj=stream, mode="r:") as tar:
                    for member in tar:
                        extraction.add(tar, member)
            finally:
                extraction.close()
            while stream.read(CHUNK):  # tar padding after the end-of-archive blocks, to finish the digest
                pass
    except EOFError:
        raise ExtractError("the layer is truncated: the gzip stream ended early (%d of %s compressed bytes read)"
                           % (digest_reader.size, layer_size)) from None
    except GZIP_ERRORS as exc:
        raise ExtractError("the layer is not a valid gzip stream: %s" % exc) from exc
    except OSError as exc:
        if exc.errno is not None:  # a real I/O error (disk full, permissions), not a format problem
            raise
        raise ExtractError("the layer is not a valid gzip stream: %s" % exc) from exc
    except tarfile.TarError as exc:
        raise ExtractError("the layer is not a valid tar archive: %s" % exc) from exc
    if layer_size is not None and digest_reader.size != layer_size:
        raise ExtractError("the layer is truncated: %d of %d bytes received" % (digest_reader.size, layer_size))
    if digest_reader.digest() != layer_digest:
        raise ExtractError("layer digest mismatch: expected %s, the registry sent content hashing to %s"
                           % (layer_digest, digest_reader.digest()))
    extraction.finish_symlinks()
    return {
        "layer_bytes": digest_reader.size,
        "uncompressed_bytes": stream.total,
        "setid_bits_stripped": extraction.setid_stripped,
        "group_files_rewritten": extraction.groups_rewritten,
    }
