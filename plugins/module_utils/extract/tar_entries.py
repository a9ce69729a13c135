# Copyright: gkm.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The entries of a tar stream read forward once, one header at a time, nothing kept between entries.

tarfile keeps every member it has read (its memory grows with the entry count: a layer of 100,000 empty
files held about 300 MiB) and spends most of an entry's time on header fields a kernel cache does not
use; here only the fields the extraction needs are decoded (ustar, GNU long names, pax records), and the
caller copies the data straight from the stream.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import tarfile

from ansible_collections.gkm.cluster.plugins.module_utils.extract.rules import REGULAR_TYPES, ExtractError

BLOCK = tarfile.BLOCKSIZE
# GNU long names and pax records longer than this are not names of a kernel cache (PATH_MAX is 4096).
EXTENDED_HEADER_MAX = 64 * 1024
_EXTENDED_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE)
_ZERO_BLOCK = bytes(BLOCK)


class Entry:
    """One tar entry: what the extraction needs of its header."""

    __slots__ = ("linkname", "mode", "name", "size", "type")

    def __init__(self, name, entry_type, mode, size, linkname):
        self.name = name
        self.type = entry_type
        self.mode = mode
        self.size = size
        self.linkname = linkname


def _number(field):
    """A numeric header field: octal text, or base-256 when its first byte has the high bit (GNU, star)."""
    if field[0] & 0x80:
        value = int.from_bytes(field[1:], "big")
        return value - (256 ** (len(field) - 1)) if field[0] == 0xFF else value
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        raise ExtractError("the layer is not a valid tar archive: header field %r is not a number" % field) from None


def _text(field):
    return field.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def parse_header(block):
    """The Entry of a 512-byte ustar/GNU/pax header block; ExtractError when its checksum is wrong."""
    # The checksum is the byte sum of the header with its own field counted as spaces (some tars sum signed bytes).
    checksum = _number(block[148:156])
    unsigned = sum(block) - sum(block[148:156]) + 8 * 0x20
    if checksum != unsigned and checksum != unsigned - 256 * sum(1 for byte in block if byte > 127):
        raise ExtractError("the layer is not a valid tar archive: a header's checksum is wrong")
    entry_type = block[156:157] or tarfile.REGTYPE
    name = _text(block[0:100])
    if block[257:263] == b"ustar\0" and block[345] != 0:
        name = _text(block[345:500]) + "/" + name
    if entry_type == tarfile.AREGTYPE and name.endswith("/"):
        entry_type = tarfile.DIRTYPE
    if entry_type == tarfile.AREGTYPE:
        entry_type = tarfile.REGTYPE
    return Entry(name, entry_type, _number(block[100:108]), _number(block[124:136]), _text(block[157:257]))


def padding(size):
    """Bytes after `size` bytes of data up to the next header."""
    return -size % BLOCK


def _truncated(where):
    return ExtractError("the layer is truncated: the tar stream ends inside %s" % where)


def _decode(raw):
    return raw.decode("utf-8", "surrogateescape")


def pax_records(data):
    """The key/value records of a pax extended header (`<length> <key>=<value>\\n` each), as a dict."""
    records = {}
    pos = 0
    while pos < len(data):
        space = data.find(b" ", pos)
        try:
            length = int(data[pos:space]) if space > pos else 0
        except ValueError:
            length = 0
        end = pos + length
        if length <= 0 or end > len(data) or data[end - 1:end] != b"\n":
            raise ExtractError("the layer is not a valid tar archive: a pax header record is malformed")
        key, sep, value = data[space + 1:end - 1].partition(b"=")
        if not sep:
            raise ExtractError("the layer is not a valid tar archive: a pax header record has no '='")
        records[_decode(key)] = value
        pos = end
    return records


def _apply_pax(overrides, records):
    for key, value in records.items():
        if key.startswith("GNU.sparse."):
            raise ExtractError("rule entry_type: the layer holds a sparse file; kernel caches hold plain files")
        if key == "path":
            overrides["name"] = _decode(value)
        elif key == "linkpath":
            overrides["linkname"] = _decode(value)
        elif key == "size":
            try:
                overrides["size"] = int(value)
            except ValueError:
                raise ExtractError("the layer is not a valid tar archive: pax size %r is not a number"
                                   % value) from None


def _extended_data(stream, info):
    if info.size > EXTENDED_HEADER_MAX:
        raise ExtractError("rule name_max: an extended tar header (long name or pax records) of %d bytes is over "
                           "the %d-byte limit; no kernel-cache path is that long" % (info.size, EXTENDED_HEADER_MAX))
    data = stream.read(info.size)
    if len(data) != info.size or stream.skip(padding(info.size)) != padding(info.size):
        raise _truncated("an extended header")
    return data


def tar_entries(stream):
    """Yield one Entry per entry (long names and pax records applied) until the end of the archive.

    The caller may read up to `entry.size` bytes of the entry's data from `stream` before asking for the next
    entry; the rest of the data and the padding are skipped. Only regular files carry data: the size field
    of a directory or link is ignored, as tar does.
    """
    overrides = {}
    while True:
        block = stream.read(BLOCK)
        if not block or block == _ZERO_BLOCK:
            return  # end-of-archive blocks, or (tolerated like tar) none at all
        if len(block) < BLOCK:
            raise _truncated("a header")
        info = parse_header(block)
        if info.type in _EXTENDED_TYPES:
            data = _extended_data(stream, info)
            if info.type == tarfile.GNUTYPE_LONGNAME:
                overrides["name"] = _decode(data.split(b"\0", 1)[0])
            elif info.type == tarfile.GNUTYPE_LONGLINK:
                overrides["linkname"] = _decode(data.split(b"\0", 1)[0])
            elif info.type == tarfile.XHDTYPE:
                _apply_pax(overrides, pax_records(data))
            continue  # a global pax header (XGLTYPE) holds defaults such as comments: nothing a cache needs
        for key, value in overrides.items():
            setattr(info, key, value)
        overrides = {}
        if info.type not in REGULAR_TYPES:
            info.size = 0
        start = stream.total
        yield info
        rest = info.size - (stream.total - start) + padding(info.size)
        if stream.skip(rest) != rest:
            raise _truncated("entry %r" % info.name)
