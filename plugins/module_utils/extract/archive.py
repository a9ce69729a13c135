# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Safe, atomic, streaming extraction of a gzip tar layer into a directory.

One pass: the compressed bytes are hashed as they arrive and gunzipped (isal when installed) in one helper
thread, handed over a MiB at a time, and untarred into a temporary directory beside `dest`, each file's
data written straight from the decompressed pieces. Only when the whole layer was read, its digest
matched and every entry passed the safety rules is the temporary directory swapped with `dest` (renameat2
RENAME_EXCHANGE where the kernel has it). On any failure the temporary directory is removed and `dest`
is exactly as it was.

Safety rules, checked on every entry before anything is written for it:
- names must be relative and free of `..`; device nodes, FIFOs and other special types are refused;
- symlinks are created last, after all regular files, and only when their target stays inside the
  extracted tree without passing through another symlink; hardlinks may only point at regular
  files already extracted from the same layer;
- setuid/setgid/sticky and every write bit are dropped: files become 0444 or 0555 and, once the tree is whole,
  directories 0555 whatever the umask, so a workload running as any uid can read the tree (it is not the
  extractor's uid) and nobody, the extractor included, changes it without first changing a mode;
- names must fit Linux's NAME_MAX and PATH_MAX and must not be OCI whiteouts (.wh.*);
- limits on total bytes, file count and expansion ratio (uncompressed / compressed) and the image's declared
  size stop zip bombs: a member whose header announces more than the budget is refused before it is written.
Every refusal is an ExtractError whose message names the rule.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import tempfile
import time

from ansible_collections.gkm.cluster.plugins.module_utils.extract.rules import (
    ExtractError,
    Limits,
    byte_budget,
    check_path_length,
    check_symlink_target,
    entry_kind,
    file_mode,
    in_cache_scope,
    rewrite_group_file,
    safe_member_path,
)
from ansible_collections.gkm.cluster.plugins.module_utils.extract.streams import (
    GZIP_ERRORS,
    DigestReader,
    ForwardStream,
    gunzip_pieces,
    in_helper_thread,
)
from ansible_collections.gkm.cluster.plugins.module_utils.extract.tar_entries import tar_entries
from ansible_collections.gkm.cluster.plugins.module_utils.extract.tree import (
    MARKER_NAME,
    MARKER_VERSION,
    TMP_INFIX,
    DestLock,
    check_dest,
    listing_fingerprint,
    remove_stale_temporaries,
    remove_tree,
    seal_directories,
    swap_into_place,
)

_GROUP_FILE = re.compile(r"^__grp__.*\.json$")
_MAX_GROUP_FILE = 16 * 1024 * 1024
# Readable and traversable by every uid, writable by the extractor only while it extracts (tree.seal_directories).
DIR_MODE = 0o755
MARKER_MODE = 0o444
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def current_umask():
    """The process umask (reading it means setting it: set back at once; the extraction is single-threaded)."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


# ---------------------------------------------------------------- extraction


class _Extraction:
    """Untars one layer stream into `root`, a temporary directory that will become `final_dest`."""

    def __init__(self, root, final_dest, limits, whole_layer, rewrite_groups, budget):
        self.root = root
        self.root_bytes = len(root.encode("utf-8", "surrogateescape"))
        self.final_dest = final_dest
        self.limits = limits
        self.whole_layer = whole_layer
        self.rewrite_groups = rewrite_groups
        self.budget, self.budget_rule = budget
        # Only a umask that cuts our modes costs a chmod per file (typical umasks, 022 and 002, do not).
        umask = current_umask()
        self.chmod_files = bool(umask & 0o755)
        self.files = {}  # path -> bytes written
        self.bytes = 0
        self.symlinks = {}  # path -> target, created after all files
        self.dirs = {""}
        self.setid_stripped = 0
        self.groups_rewritten = 0

    def _parent(self, path):
        missing = []
        parent = path.rpartition("/")[0]
        while parent and parent not in self.dirs:
            missing.append(parent)
            parent = parent.rpartition("/")[0]
        for directory in reversed(missing):
            full = os.path.join(self.root, directory)
            try:
                os.mkdir(full, DIR_MODE)
            except FileExistsError:
                raise ExtractError("entry %r is a file but the layer also has it as a directory" % directory) from None
            if self.chmod_files:
                os.chmod(full, DIR_MODE)
            self.dirs.add(directory)

    def _claim(self, path, size):
        if path in self.dirs:
            raise ExtractError("entry %r is a file but the layer also has it as a directory" % path)
        previous = self.files.pop(path, None)
        if previous is not None:  # a later tar entry replaces an earlier one, as tar does
            self.bytes -= previous
            os.unlink(os.path.join(self.root, path))
        if len(self.files) + len(self.symlinks) + 1 > self.limits.max_files:
            raise ExtractError("rule max_files: the layer has more than max_files=%d files" % self.limits.max_files)
        if self.bytes + size > self.budget:
            raise ExtractError("rule %s: the layer expands beyond %d bytes with entry %r, whose header announces %d "
                               "bytes; refused before writing any of it" % (self.budget_rule, self.budget, path, size))

    def add(self, stream, member):
        kind = entry_kind(member)
        path = safe_member_path(member.name)
        if not path or not (self.whole_layer or in_cache_scope(path)):
            return
        check_path_length(self.root_bytes, path)
        if kind == "dir":
            if path in self.files or path in self.symlinks:
                raise ExtractError("entry %r is a directory but the layer also has it as a file" % path)
            self._parent(path + "/x")
            return
        if kind == "symlink":
            self._claim(path, 0)
            self.symlinks[path] = member.linkname
            return
        if member.mode & 0o7000:
            self.setid_stripped += 1
        if kind == "hardlink":
            source = safe_member_path(member.linkname, "hardlink target")
            if source not in self.files:
                raise ExtractError("hardlink %r -> %r does not point at a regular file extracted from this layer"
                                   % (path, member.linkname))
            self._claim(path, self.files[source])
            self._parent(path)
            os.link(os.path.join(self.root, source), os.path.join(self.root, path))
            self.files[path] = self.files[source]
            self.bytes += self.files[path]
            return
        self._claim(path, member.size)
        self._parent(path)
        name = path.rpartition("/")[2]
        data = None
        if self.rewrite_groups and member.size <= _MAX_GROUP_FILE and _GROUP_FILE.match(name):
            data = stream.read(member.size)
            if len(data) != member.size:
                raise ExtractError("the layer is truncated inside entry %r" % path)
            data = rewrite_group_file(data, os.path.join(self.final_dest, path.rpartition("/")[0]), path)
            self.groups_rewritten += 1
        written = self._write(path, file_mode(member.mode), stream, member.size, data)
        if data is None and written != member.size:
            raise ExtractError("the layer is truncated inside entry %r" % path)
        self.files[path] = written
        self.bytes += written

    def _write(self, path, mode, stream, size, data):
        """Create the file (never through a symlink, never over an existing one) with `data` or `size` bytes
        of the stream; return the bytes written."""
        fd = os.open(os.path.join(self.root, path), _CREATE_FLAGS, mode)
        try:
            if self.chmod_files:
                os.fchmod(fd, mode)
            if data is None:
                return stream.copy_to(fd, size)
            os.write(fd, data)
            return len(data)
        finally:
            os.close(fd)

    def finish_symlinks(self):
        for path, target in self.symlinks.items():
            check_symlink_target(path, target, self.symlinks)
        for path, target in sorted(self.symlinks.items()):
            self._parent(path)
            try:
                os.symlink(target, os.path.join(self.root, path))
            except FileExistsError:
                raise ExtractError("symlink %r conflicts with a file or directory of the same name" % path) from None

    def listing(self):
        """What tree.tree_listing will find in the extracted tree, from what was written."""
        entries = [(path, "f", size) for path, size in self.files.items()]
        entries.extend((path, "l", target) for path, target in self.symlinks.items())
        entries.sort()
        return entries


def _write_marker(root, document):
    fd = os.open(os.path.join(root, MARKER_NAME), _CREATE_FLAGS, MARKER_MODE)
    try:
        os.fchmod(fd, MARKER_MODE)
        os.write(fd, json.dumps(document).encode("utf-8"))
    finally:
        os.close(fd)


def extract_layer(read, layer_digest, layer_size, dest, limits=None, whole_layer=False, rewrite_groups=True,
                  marker=None, declared_bytes=None):
    """Stream a gzip tar layer from `read(n)` into dest, atomically; return what was written.

    `marker` (a dict) is stored in dest as MARKER_NAME together with the tree fingerprint.
    `declared_bytes` (the image's cache-size-bytes label) bounds the files' size, with rules.DECLARED_SIZE_*.
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
            stats, listing, directories = _extract_into(read, layer_digest, layer_size, root, dest, limits,
                                                        whole_layer, rewrite_groups, declared_bytes)
            files, size, fingerprint = listing_fingerprint(listing)
            _write_marker(root, dict(marker or {}, version=MARKER_VERSION, layer_digest=layer_digest, files=files,
                                     bytes=size, tree=fingerprint, whole_layer=whole_layer,
                                     rewrite_groups=rewrite_groups))
            seal_directories(root, directories)
            old_tree = swap_into_place(root, dest)
        except BaseException:
            remove_tree(root, ignore_errors=True)
            raise
        if old_tree:
            remove_tree(old_tree, ignore_errors=True)
    stats.update(files=files, bytes=size, seconds=round(time.monotonic() - started, 3))
    return stats


def _extract_into(read, layer_digest, layer_size, root, final_dest, limits, whole_layer, rewrite_groups,
                  declared_bytes):
    digest_reader = DigestReader(read, layer_size)
    budget = byte_budget(limits, layer_size, declared_bytes)
    # The stream may carry a little more than the files (headers, padding, entries out of scope).
    pieces = in_helper_thread(gunzip_pieces(digest_reader))
    stream = ForwardStream(pieces, budget[0] + 1024 * 1024)
    extraction = _Extraction(root, final_dest, limits, whole_layer, rewrite_groups, budget)
    try:
        for member in tar_entries(stream):
            extraction.add(stream, member)
        stream.drain()
    except EOFError:
        raise ExtractError("the layer is truncated: the gzip stream ended early (%d of %s compressed bytes read)"
                           % (digest_reader.size, layer_size)) from None
    except GZIP_ERRORS as exc:
        raise ExtractError("the layer is not a valid gzip stream: %s" % exc) from exc
    finally:
        pieces.close()  # stops the helper thread when the extraction stopped early
    if layer_size is not None and digest_reader.size != layer_size:
        raise ExtractError("the layer is truncated: %d of %d bytes received" % (digest_reader.size, layer_size))
    if digest_reader.digest() != layer_digest:
        raise ExtractError("layer digest mismatch: expected %s, the registry sent content hashing to %s"
                           % (layer_digest, digest_reader.digest()))
    extraction.finish_symlinks()
    stats = {
        "layer_bytes": digest_reader.size,
        "uncompressed_bytes": stream.total,
        "setid_bits_stripped": extraction.setid_stripped,
        "group_files_rewritten": extraction.groups_rewritten,
    }
    return stats, extraction.listing(), extraction.dirs - {""}
