"""One AWQ-v2 file written again with new metadata, without rewriting its payloads.

The metadata is the last section of the index, after the slab [IDX-2], so no payload moves
when it changes: the new file is the old slab copied byte for byte by ``copy_file_range``
(:mod:`reference.write.rangecopy`), then the old index with the new metadata, a new trailer
and a new header with their checksums, written into the partial of a publishing transaction
(:mod:`reference.write.publish`), validated and verified there before it is published
[RD-2, ENT-10, WR-2]."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference.format.reader import Reader
from reference.ground.errors import FormatError
from reference.write.publish import Transaction, Watched, named_error
from reference.write.rangecopy import Copied, copy_range
from spec.algorithms import crc32c
from spec.constants import SLAB_OFFSET
from spec.schema import TRAILER_SIZE, Header, HeaderFields, Trailer

#: What a file's new metadata is: its canonical bytes [WR-1], from the old metadata and the
#: file's name (for a refusal's message).
NewMetadata = Callable[[dict[str, Any], str], bytes]


@dataclass
class Edited:
    """A file's new version, written and checked in its partial, not yet published."""

    dest: Path
    transaction: Transaction | None  # None: planned (--dry-run), never written
    copied: Copied
    size: int
    header_crc: int
    metadata_length: int
    sha256: str | None = None

    @property
    def tmp(self) -> Path | None:
        return None if self.transaction is None else self.transaction.tmp

    def discard(self) -> None:
        if self.transaction is not None:
            self.transaction.abort()

    def publish(self) -> None:
        """The partial takes the destination's name, with the old file's mode, owner and
        group, unless the destination changed since the run started [WR-2]."""
        assert self.transaction is not None
        self.transaction.commit()


def _header(header: Mapping[str, Any], index: bytes, metadata: bytes) -> bytes:
    """The header of the edited file: the old one with the new index's lengths and
    checksums [HDR-4, IDX-4, META-4]."""
    fields = {sub.name: header[sub.name] for sub in HeaderFields.subcons}
    fields.update(index_length=len(index), metadata_length=len(metadata),
                  file_size=header["index_offset"] + len(index) + TRAILER_SIZE,
                  index_crc=crc32c(index), metadata_crc=crc32c(metadata))  # fmt: skip
    return bytes(Header.build(dict(fields=dict(value=fields))))


def _trailer(index_offset: int, index_length: int, header_crc: int) -> bytes:
    fields = dict(index_offset=index_offset, index_length=index_length, header_crc=header_crc)
    return bytes(Trailer.build(dict(fields=dict(value=fields))))


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def write_edited(reader: Reader, metadata: bytes, dest: Path, *,
                 watched: Watched | None = None) -> Edited:  # fmt: skip
    """Write the file ``reader`` reads with ``metadata`` instead of its own, in a partial of
    ``dest``, flushed to storage: the slab copied by :func:`copy_range`, then the index
    (every section as it was, the metadata last [IDX-2]), the trailer and the header.  It
    is published (:meth:`Edited.publish`) with the mode, owner and group of the file read,
    against ``watched`` (what the run started from)."""
    h, geometry = reader.header, reader.index.geometry
    index_offset = h["index_offset"]
    index = bytes(reader.index.buf[index_offset : geometry.metadata.offset]) + metadata
    header = _header(h, index, metadata)
    header_crc = int.from_bytes(header[-4:], "little")
    publishing = Transaction(dest, watched=watched, like=reader.path)  # named and locked [WR-3]
    assert publishing.file is not None
    try:
        fd, src = publishing.file.fileno(), reader.fileno()
        _pwrite_all(fd, header + bytes(SLAB_OFFSET - len(header)), 0)  # [PAD-1]
        copied = copy_range(src, fd, SLAB_OFFSET, SLAB_OFFSET, index_offset - SLAB_OFFSET)
        _pwrite_all(fd, index + _trailer(index_offset, len(index), header_crc), index_offset)
        os.fsync(fd)
    except OSError as exc:  # a full disk, a quota: said with the user's path
        publishing.abort()
        raise named_error(exc, reader.path, "cannot write the edited copy beside it") from exc
    except BaseException:
        publishing.abort()
        raise
    size = index_offset + len(index) + TRAILER_SIZE
    return Edited(dest, publishing, copied, size, header_crc, len(metadata))


def check_edited(edited: Edited, *, verify: bool, source: Path | None = None) -> None:
    """Full validation of the partial and, with ``verify``, every payload checksum [RD-2,
    ENT-10]; a failure names the file being edited, ``source`` (by default the destination):
    its payloads are the ones copied."""
    assert edited.tmp is not None
    named = edited.dest if source is None else source
    try:
        with Reader(edited.tmp) as reader:
            reader.validate()
            if verify:
                reader.verify()
    except FormatError as exc:
        exc.path = str(named)
        exc.message = f"{named.name}: {exc.message} (found in its edited copy)"
        raise


def prepare(path: Path, new_metadata: NewMetadata, *, verify: bool, write: bool,
            dest: Path | None = None, watched: Watched | None = None,
            ) -> Edited | None:  # fmt: skip
    """The version of one file with ``new_metadata(old metadata, file name)``, written (as
    ``dest``'s partial; ``path``'s by default) and checked (None: nothing to change; not
    written without ``write``); ``watched``: what the run started from."""
    with Reader(path) as reader:
        reader.validate()  # the original first, so that its own errors name it [RD-2]
        raw = new_metadata(reader.metadata, path.name)
        g = reader.index.geometry
        if bytes(reader.index.buf[g.metadata.offset : g.metadata.offset + g.metadata.length]) \
                == raw:  # fmt: skip
            return None
        if not write:
            return Edited(path, None, Copied(), 0, 0, len(raw))
        edited = write_edited(reader, raw, path if dest is None else dest, watched=watched)
    try:
        check_edited(edited, verify=verify, source=path)
    except BaseException:
        edited.discard()
        raise
    return edited
