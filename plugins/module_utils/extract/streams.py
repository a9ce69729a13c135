# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Streams of the extraction: the layer digest checked as the bytes arrive, and gunzip in a helper thread
(isal when installed).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gzip
import hashlib
import os
import traceback
import zlib

from ansible_collections.gkm.cluster.plugins.module_utils.extract.rules import ExtractError

try:
    from isal import igzip_threaded, isal_zlib

    GZIP_ERRORS = (zlib.error, isal_zlib.error)
    HAS_ISAL = True
    ISAL_IMPORT_ERROR = None
except ImportError:
    GZIP_ERRORS = (zlib.error,)
    HAS_ISAL = False
    ISAL_IMPORT_ERROR = traceback.format_exc()

CHUNK = 1024 * 1024


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
        data = self._read(CHUNK if n is None or n < 0 else n)
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
        data = self._source.read(CHUNK if n is None or n < 0 else n)
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
            if not self.read(min(CHUNK, offset - self.total)):
                break
        return self.total


def open_gunzip(reader):
    """A decompressed stream over `reader`; isal decompresses in a helper thread when installed."""
    if HAS_ISAL:
        return igzip_threaded.open(reader, "rb", threads=1, block_size=CHUNK)
    return gzip.GzipFile(fileobj=reader, mode="rb")
