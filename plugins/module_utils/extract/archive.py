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
- setuid/setgid/sticky and group/other write bits are dropped (files become 0644 or 0755);
- limits on total bytes, file count and expansion ratio (uncompressed / compressed) stop zip bombs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import ctypes
import ctypes.util
import errno
import fcntl
import gzip
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import time
import traceback
import zlib
from concurrent.futures import ThreadPoolExecutor

try:
    from isal import igzip_threaded, isal_zlib

    _GZIP_ERRORS = (zlib.error, isal_zlib.error)
    HAS_ISAL = True
    ISAL_IMPORT_ERROR = None
except ImportError:
    _GZIP_ERRORS = (zlib.error,)
    HAS_ISAL = False
    ISAL_IMPORT_ERROR = traceback.format_exc()

MARKER_NAME = ".gkm-cache.json"
MARKER_VERSION = 1
_TMP_INFIX = ".gkm-tmp-"
_CACHE_ROOTS = re.compile(r"^io\.[A-Za-z0-9_-]+\.(cache|manifest)$")
_GROUP_FILE = re.compile(r"^__grp__.*\.json$")
_MAX_GROUP_FILE = 16 * 1024 * 1024
_CHUNK = 1024 * 1024
# Files up to this size are read into memory and written by a pool of threads: creating many small
# files is bound by file-system latency, not CPU, and open/write/close release the GIL.
_POOLED_FILE_MAX = 4 * 1024 * 1024
_POOL_THREADS = 8
_POOL_MAX_INFLIGHT_BYTES = 64 * 1024 * 1024
_REGULAR_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class ExtractError(Exception):
    """The layer is unsafe, broken or over a limit; nothing was changed."""


class Limits:
    """Extraction limits. max_ratio bounds uncompressed bytes per compressed byte of the layer."""

    def __init__(self, max_bytes=8 * 1024 ** 3, max_files=100000, max_ratio=250):
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.max_ratio = max_ratio


# ---------------------------------------------------------------- entry rules (pure)


def safe_member_path(name, what="entry"):
    """The normalized relative path of a tar member name; ExtractError when it is unsafe."""
    if "\x00" in name:
        raise ExtractError("%s %r contains a NUL byte" % (what, name))
    if name.startswith("/"):
        raise ExtractError("%s %r is an absolute path; layer paths must be relative" % (what, name))
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ExtractError("%s %r has a '..' component, which could write outside dest" % (what, name))
    return "/".join(parts)


def in_cache_scope(path):
    """True for io.<kind>.cache/... and io.<kind>.manifest/..., the parts MCV extracts."""
    return bool(_CACHE_ROOTS.match(path.split("/", 1)[0]))


def entry_kind(member):
    """'file', 'dir', 'symlink' or 'hardlink'; ExtractError for devices, FIFOs and other types."""
    if member.type in _REGULAR_TYPES:
        return "file"
    if member.type == tarfile.DIRTYPE:
        return "dir"
    if member.type == tarfile.SYMTYPE:
        return "symlink"
    if member.type == tarfile.LNKTYPE:
        return "hardlink"
    if member.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
        raise ExtractError("entry %r is a device node; kernel caches hold only files and directories" % member.name)
    if member.type == tarfile.FIFOTYPE:
        raise ExtractError("entry %r is a FIFO; kernel caches hold only files and directories" % member.name)
    raise ExtractError("entry %r has unsupported tar type %r" % (member.name, member.type))


def file_mode(mode):
    """0755 when any execute bit is set, else 0644: no setuid/setgid/sticky, no group/other write."""
    return 0o755 if mode & 0o111 else 0o644


def check_symlink_target(path, target, symlink_paths):
    """Refuse a symlink whose target leaves the tree or passes through another symlink.

    Resolution is done on the names: because no path component on the way may itself be a
    symlink (only the last one may), this is exactly what the kernel will resolve.
    """
    if not target:
        raise ExtractError("symlink %r has an empty target" % path)
    if target.startswith("/"):
        raise ExtractError("symlink %r points to the absolute path %r, outside dest" % (path, target))
    position = path.split("/")[:-1]
    steps = [part for part in target.split("/") if part not in ("", ".")]
    for index, part in enumerate(steps):
        if part == "..":
            if not position:
                raise ExtractError("symlink %r -> %r leaves dest" % (path, target))
            position.pop()
            continue
        position.append(part)
        if index < len(steps) - 1 and "/".join(position) in symlink_paths:
            raise ExtractError("symlink %r -> %r passes through another symlink (%s); refused because chained "
                               "links can leave dest" % (path, target, "/".join(position)))


def rewrite_group_file(data, final_dir, name):
    """A __grp__*.json with every child path pointed at the same file name in `final_dir`."""
    try:
        document = json.loads(data)
        children = document["child_paths"]
        if not isinstance(children, dict) or not all(isinstance(v, str) for v in children.values()):
            raise ValueError("child_paths must map file names to paths")
    except (ValueError, KeyError, TypeError) as exc:
        raise ExtractError(
            "Triton group file %r is malformed (%s): expected {\"child_paths\": {...}}" % (name, exc)) from exc
    document["child_paths"] = {
        key: os.path.join(final_dir, value.rstrip("/").rsplit("/", 1)[-1]) for key, value in children.items()
    }
    return json.dumps(document).encode()


# ---------------------------------------------------------------- streams


class DigestReader:
    """Reads a compressed blob, hashing and counting it; refuses more bytes than the descriptor says."""

    def __init__(self, read, expected_size):
        self._read = read
        self.expected_size = expected_size
        self.size = 0
        self._sha = hashlib.sha256()

    def readable(self):
        return True

    def read(self, n=-1):
        data = self._read(_CHUNK if n is None or n < 0 else n)
        if data:
            self.size += len(data)
            if self.expected_size is not None and self.size > self.expected_size:
                raise ExtractError("layer blob is larger than the %d bytes its descriptor states" % self.expected_size)
            self._sha.update(data)
        return data

    def readinto(self, buffer):
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def digest(self):
        return "sha256:" + self._sha.hexdigest()


class ForwardStream:
    """The decompressed layer as a forward-only seekable file, so tarfile can read it in "r:" mode.

    tarfile's own stream mode ("r|") re-slices its whole read buffer on every small read; plain
    mode only needs tell() and forward seeks, which are served by reading and discarding. It also
    counts decompressed bytes and stops a layer that expands beyond its limits.
    """

    def __init__(self, source, max_total):
        self._source = source
        self._max_total = max_total
        self.total = 0

    def read(self, n=-1):
        data = self._source.read(_CHUNK if n is None or n < 0 else n)
        self.total += len(data)
        if self.total > self._max_total:
            raise ExtractError("the layer expands beyond %d bytes (max_bytes / expansion-ratio limit); refused as a "
                               "decompression bomb" % self._max_total)
        return data

    def tell(self):
        return self.total

    def seekable(self):
        return True

    def seek(self, offset, whence=os.SEEK_SET):
        if whence != os.SEEK_SET or offset < self.total:
            raise ExtractError("the tar archive asks to move backwards in the stream; it is malformed")
        while self.total < offset:
            if not self.read(min(_CHUNK, offset - self.total)):
                break
        return self.total


def open_gunzip(reader):
    """A decompressed stream over `reader`; isal decompresses in a helper thread when installed."""
    if HAS_ISAL:
        return igzip_threaded.open(reader, "rb", threads=1, block_size=_CHUNK)
    return gzip.GzipFile(fileobj=reader, mode="rb")


# ---------------------------------------------------------------- tree, marker, swap


def tree_listing(root):
    """Sorted (path, kind, size or link target) of every file and symlink below root, marker excluded."""
    entries = []
    stack = [("", root)]
    while stack:
        rel, path = stack.pop()
        with os.scandir(path) as it:
            for entry in it:
                name = rel + entry.name
                if entry.is_symlink():
                    entries.append((name, "l", os.readlink(entry.path)))
                elif entry.is_dir():
                    stack.append((name + "/", entry.path))
                elif name != MARKER_NAME:
                    entries.append((name, "f", entry.stat().st_size))
    entries.sort()
    return entries


def tree_fingerprint(root):
    """(file count, bytes, sha256 of the listing) for root; changes when a file is added, removed or resized."""
    listing = tree_listing(root)
    text = "".join("%s\0%s\0%s\n" % entry for entry in listing)
    files = [value for _name, kind, value in listing if kind == "f"]
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
    return len(files), sum(files), "sha256:" + digest


def read_marker(dest):
    """The marker dict in dest, or None when dest has none (or an unreadable one)."""
    try:
        with open(os.path.join(dest, MARKER_NAME), "rb") as f:
            marker = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) and marker.get("version") == MARKER_VERSION else None


def tree_intact(dest, marker):
    files, size, fingerprint = tree_fingerprint(dest)
    return (files, size, fingerprint) == (marker.get("files"), marker.get("bytes"), marker.get("tree"))


def _exchange(a, b):
    """Atomically swap two directory entries; False when the platform cannot."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS):
        return False
    raise OSError(err, os.strerror(err), b)


def swap_into_place(new_tree, dest):
    """Make new_tree appear at dest in one step; returns the path now holding the old tree, or None."""
    try:
        if not os.path.lexists(dest):
            os.rename(new_tree, dest)
            return None
        if _exchange(new_tree, dest):
            return new_tree
        old = new_tree + ".old"
        os.rename(dest, old)
        os.rename(new_tree, dest)
        return old
    except OSError as exc:
        if exc.errno in (errno.EBUSY, errno.EXDEV):
            raise ExtractError("cannot replace %s (%s): dest must be a directory inside a volume, not its mount "
                               "point; use a subdirectory such as %s/cache" % (dest, exc.strerror, dest)) from exc
        raise


def check_dest(dest):
    """Refuse a dest that is not ours to replace: a file, or a non-empty directory without our marker."""
    if not os.path.isabs(dest):
        raise ExtractError("dest %r must be an absolute path" % dest)
    if os.path.islink(dest) or (os.path.lexists(dest) and not os.path.isdir(dest)):
        raise ExtractError("dest %s exists and is not a directory; remove it or choose another dest" % dest)
    if os.path.isdir(dest) and os.listdir(dest) and read_marker(dest) is None:
        raise ExtractError("dest %s is a non-empty directory not written by this module (no %s); refusing to "
                           "replace it: empty it or choose another dest" % (dest, MARKER_NAME))


class DestLock:
    """An exclusive lock beside dest so two extractions of the same dest never interleave."""

    def __init__(self, dest):
        parent, name = os.path.split(dest.rstrip("/"))
        os.makedirs(parent, mode=0o755, exist_ok=True)
        self.path = os.path.join(parent, "." + name + ".gkm-lock")
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def remove_stale_temporaries(dest):
    """Remove temporary trees left beside dest by an extraction that was killed (call under DestLock)."""
    parent, name = os.path.split(dest.rstrip("/"))
    prefix = "." + name + _TMP_INFIX
    removed = 0
    for entry in os.listdir(parent):
        if entry.startswith(prefix):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
            removed += 1
    return removed


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
        parent = path.rpartition("/")[0]
        if parent not in self.dirs:
            os.makedirs(os.path.join(self.root, parent), mode=0o755, exist_ok=True)
            while parent and parent not in self.dirs:
                self.dirs.add(parent)
                parent = parent.rpartition("/")[0]

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
            written = _write_file(os.path.join(self.root, path), iter(lambda: source.read(_CHUNK), b""), mode)
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
        root = tempfile.mkdtemp(prefix="." + name + _TMP_INFIX, dir=parent)
        old_tree = None
        try:
            os.chmod(root, 0o755)
            stats = _extract_into(read, layer_digest, layer_size, root, dest, limits, whole_layer, rewrite_groups)
            files, size, fingerprint = tree_fingerprint(root)
            document = dict(marker or {}, version=MARKER_VERSION, layer_digest=layer_digest, files=files,
                            bytes=size, tree=fingerprint, whole_layer=whole_layer, rewrite_groups=rewrite_groups)
            with open(os.path.join(root, MARKER_NAME), "w") as f:
                json.dump(document, f)
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
            while stream.read(_CHUNK):  # tar padding after the end-of-archive blocks, to finish the digest
                pass
    except EOFError:
        raise ExtractError("the layer is truncated: the gzip stream ended early (%d of %s compressed bytes read)"
                           % (digest_reader.size, layer_size)) from None
    except _GZIP_ERRORS as exc:
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
