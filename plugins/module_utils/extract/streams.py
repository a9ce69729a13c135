# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streams of the extraction: the layer digest checked as the bytes arrive, gunzip (isal when installed)
in a helper thread, and the decompressed layer read forward only, with its expansion limit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import queue
import threading
import traceback
import zlib

from ansible_collections.gkm.cluster.plugins.module_utils.extract.rules import ExtractError

try:
    from isal import isal_zlib as gunzip_module

    GZIP_ERRORS = (zlib.error, gunzip_module.error)
    HAS_ISAL = True
    ISAL_IMPORT_ERROR = None
except ImportError:
    gunzip_module = zlib
    GZIP_ERRORS = (zlib.error,)
    HAS_ISAL = False
    ISAL_IMPORT_ERROR = traceback.format_exc()

# Compressed bytes per read and decompressed bytes per piece: large enough that per-call overhead is
# negligible, small enough that a decompression bomb never holds more than this in memory.
CHUNK = 1024 * 1024
_GZIP_WBITS = 16 + 15


# ---------------------------------------------------------------- streams


class DigestReader:
    """Reads a compressed blob, hashing and counting it; refuses more bytes than the descriptor says."""

    def __init__(self, read, expected_size):
        self._read = read
        self.expected_size = expected_size
        self.size = 0
        self._sha = hashlib.sha256()

    def read(self, n=CHUNK):
        data = self._read(n)
        if data:
            self.size += len(data)
            if self.expected_size is not None and self.size > self.expected_size:
                raise ExtractError("layer blob is larger than the %d bytes its descriptor states" % self.expected_size)
            self._sha.update(data)
        return data

    def digest(self):
        return "sha256:" + self._sha.hexdigest()


def gunzip_pieces(reader):
    """The decompressed bytes of reader's gzip stream, in pieces of at most CHUNK bytes.

    Several gzip members follow each other as gzip(1) allows, zero padding between them is skipped;
    EOFError when the stream ends inside a member.
    """
    decompressor = gunzip_module.decompressobj(_GZIP_WBITS)
    pending = b""
    in_member = False
    while True:
        if not pending:
            pending = reader.read(CHUNK)
            if not pending:
                break
        if not in_member:
            pending = pending.lstrip(b"\0")
            if not pending:
                continue
            in_member = True
        piece = decompressor.decompress(pending, CHUNK)
        if decompressor.eof:
            pending = decompressor.unused_data
            decompressor = gunzip_module.decompressobj(_GZIP_WBITS)
            in_member = False
        else:
            pending = decompressor.unconsumed_tail
        if piece:
            yield piece
    if in_member:
        raise EOFError("the gzip stream ended inside a member")


_END = object()
# Pieces decompressed ahead of the writer: enough to keep both busy, a few MiB of memory at most.
_HANDOFF_DEPTH = 4


def in_helper_thread(pieces):
    """The items of the iterator `pieces`, produced in a helper thread while the caller consumes them.

    Download, digest and gunzip (which release the GIL) then overlap the file writes, as gzip and tar do in
    two processes. Handoffs are per piece (a MiB), not per file. Closing the generator stops the helper.
    """
    handoff = queue.Queue(_HANDOFF_DEPTH)
    stop = threading.Event()

    def put(item):
        while not stop.is_set():
            try:
                handoff.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for piece in pieces:
                if not put(piece):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer, which raises it
            put(exc)

    helper = threading.Thread(target=produce, name="gkm-gunzip", daemon=True)
    helper.start()
    try:
        while True:
            item = handoff.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        helper.join()


class ForwardStream:
    """The decompressed layer, read forward only, counted, and stopped beyond `max_total` bytes."""

    def __init__(self, pieces, max_total):
        self._pieces = pieces
        self._piece = b""
        self._pos = 0
        self.max_total = max_total
        self.total = 0  # bytes handed out or skipped

    def _next_piece(self):
        """Make the current piece non-empty; False at the end of the stream."""
        while self._pos >= len(self._piece):
            piece = next(self._pieces, None)
            if piece is None:
                return False
            self._piece, self._pos = piece, 0
        return True

    def _take(self, n):
        """Up to n bytes of the current piece, as a memoryview (no copy)."""
        if not self._next_piece():
            return None
        size = min(n, len(self._piece) - self._pos)
        if self.total + size > self.max_total:
            raise ExtractError("rule max_expansion: the layer expands beyond %d bytes (max_bytes and the "
                               "expansion-ratio limit); refused as a decompression bomb" % self.max_total)
        view = memoryview(self._piece)[self._pos:self._pos + size]
        self._pos += size
        self.total += size
        return view

    def read(self, n):
        """Exactly n bytes, or fewer only at the end of the stream."""
        if self._pos + n <= len(self._piece) and self.total + n <= self.max_total:
            data = self._piece[self._pos:self._pos + n]
            self._pos += n
            self.total += n
            return data
        parts = []
        while n:
            view = self._take(n)
            if view is None:
                break
            parts.append(view)
            n -= len(view)
        return b"".join(parts)

    def copy_to(self, fd, n):
        """Write the next n bytes to the file descriptor fd; returns how many the stream had."""
        copied = 0
        while copied < n:
            view = self._take(n - copied)
            if view is None:
                break
            copied += len(view)
            while view:  # a regular file takes the whole buffer unless the disk is full, which raises
                view = view[os.write(fd, view):]
        return copied

    def skip(self, n):
        """Discard the next n bytes; returns how many the stream had."""
        skipped = 0
        while skipped < n:
            view = self._take(n - skipped)
            if view is None:
                break
            skipped += len(view)
        return skipped

    def drain(self):
        """Read to the end (the padding after the tar end-of-archive blocks), so the digest covers every byte."""
        while self._take(CHUNK) is not None:
            pass
