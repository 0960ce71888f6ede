"""Byte-level editing of AWQ-v2 files, for making must-reject vectors and malformed-input tests.

A :class:`FileEditor` changes one field of a valid file and then (by default)
recomputes every checksum that covers it, so the file breaks exactly the rule
under test and no other check fires first.  It depends on ``spec`` only: the
field offsets come from the construct schema, the index sections' offsets and the entry
checksum's coverage from :mod:`spec.geometry`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spec.algorithms import crc32c
from spec.geometry import IndexGeometry, entry_checksum, geometry_of
from spec.schema import (
    ENTRY_DTYPE,
    HEADER_CRC_OFFSET,
    HEADER_DTYPE,
    TRAILER_CRC_OFFSET,
    TRAILER_DTYPE,
    TRAILER_SIZE,
)


class FileEditor:
    """A mutable copy of a file's bytes with field-level setters."""

    def __init__(self, data: bytes) -> None:
        self.data = bytearray(data)

    # ------------------------------------------------------------------ locating

    @property
    def header(self) -> Any:
        return np.frombuffer(self.data, HEADER_DTYPE, 1, 0)[0]

    def h(self, field: str) -> int:
        return int(self.header[field])

    @property
    def geometry(self) -> IndexGeometry:
        """The index sections where the header (as it is now) puts them [IDX-2, IDX-3]."""
        header = self.header
        return geometry_of({name: header[name] for name in HEADER_DTYPE.names or ()})

    @property
    def trailer_offset(self) -> int:
        return len(self.data) - TRAILER_SIZE

    @property
    def index_offset(self) -> int:
        return self.h("index_offset")

    @property
    def buckets_offset(self) -> int:
        return self.index_offset

    @property
    def entries_offset(self) -> int:
        return self.geometry.entries.offset

    @property
    def dims_offset(self) -> int:
        return self.geometry.dims.offset

    @property
    def names_offset(self) -> int:
        return self.geometry.names.offset

    @property
    def metadata_offset(self) -> int:
        return self.geometry.metadata.offset

    def entries(self) -> Any:
        """Writable structured view of the entry array."""
        return np.frombuffer(self.data, ENTRY_DTYPE, self.h("tensor_count"), self.entries_offset)

    def entry_offset(self, i: int) -> int:
        return self.geometry.entry_offset(i)

    def entry_of(self, name: str) -> int:
        """Position of the entry called ``name``."""
        raw = name.encode("utf-8")
        for i, e in enumerate(self.entries()):
            start = self.names_offset + int(e["name_offset"])
            if bytes(self.data[start : start + int(e["name_length"])]) == raw:
                return i
        raise KeyError(name)

    def name_range(self, i: int) -> tuple[int, int]:
        e = self.entries()[i]
        start = self.names_offset + int(e["name_offset"])
        return start, start + int(e["name_length"])

    # ------------------------------------------------------------------ editing

    def set_header(self, **fields: Any) -> FileEditor:
        view = np.frombuffer(self.data, HEADER_DTYPE, 1, 0)
        for name, value in fields.items():
            view[0][name] = value
        return self

    def set_trailer(self, **fields: Any) -> FileEditor:
        view = np.frombuffer(self.data, TRAILER_DTYPE, 1, self.trailer_offset)
        for name, value in fields.items():
            view[0][name] = value
        return self

    def set_entry(self, i: int, **fields: Any) -> FileEditor:
        view = self.entries()
        for name, value in fields.items():
            view[i][name] = value
        return self

    def set_bytes(self, offset: int, data: bytes) -> FileEditor:
        self.data[offset : offset + len(data)] = data
        return self

    def flip_bit(self, offset: int, bit: int) -> FileEditor:
        self.data[offset] ^= 1 << bit
        return self

    def replace_metadata(self, raw: bytes) -> FileEditor:
        """Put ``raw`` in place of the metadata (the last index section, so nothing moves but
        the trailer): fixes ``metadata_length``, ``index_length`` and ``file_size``; the
        caller refreshes the checksums."""
        start, length = self.metadata_offset, self.h("metadata_length")
        self.data[start : start + length] = raw
        self.set_header(
            metadata_length=len(raw),
            index_length=self.h("index_length") + len(raw) - length,
            file_size=len(self.data),
        )
        return self

    def truncate(self, length: int) -> FileEditor:
        del self.data[length:]
        return self

    # ------------------------------------------------------------------ checksums

    def refresh(
        self, *, entries: bool = True, metadata: bool = True, trailer: bool = True
    ) -> FileEditor:
        """Recompute the checksums in dependency order: entry CRCs, metadata CRC, index CRC,
        header CRC, then the trailer's copies and CRC.  Turning a step off keeps the stored
        value, to make a file that fails exactly that check."""
        if entries:
            self._refresh_entries()
        if metadata:
            start = self.metadata_offset
            meta = bytes(self.data[start : start + self.h("metadata_length")])
            self.set_header(metadata_crc=crc32c(meta))
        index = bytes(self.data[self.index_offset : self.index_offset + self.h("index_length")])
        self.set_header(index_crc=crc32c(index))
        header_crc = crc32c(bytes(self.data[:HEADER_CRC_OFFSET]))
        self.set_header(header_crc=header_crc)
        if trailer:
            self.set_trailer(
                index_offset=self.h("index_offset"),
                index_length=self.h("index_length"),
                header_crc=header_crc,
            )
        return self.refresh_trailer_crc()

    def refresh_trailer_crc(self) -> FileEditor:
        start = self.trailer_offset
        self.set_trailer(trailer_crc=crc32c(bytes(self.data[start : start + TRAILER_CRC_OFFSET])))
        return self

    def refresh_entry_crc(self, i: int, geometry: IndexGeometry | None = None) -> FileEditor:
        """Recompute entry ``i``'s ``entry_crc`` over its record, name and dims [ENT-9]."""
        geo = geometry or self.geometry
        e = self.entries()[i]
        at = geo.entry_offset(i)
        name_start = geo.names.offset + int(e["name_offset"])
        name = bytes(self.data[name_start : name_start + int(e["name_length"])])
        dims_start = geo.dim_offset(int(e["dims_index"]))
        dims = bytes(self.data[dims_start : geo.dim_offset(int(e["dims_index"]) + int(e["ndim"]))])
        record = bytes(self.data[at : geo.entry_offset(i + 1)])
        e["entry_crc"] = entry_checksum(record, name, dims)
        return self

    def _refresh_entries(self) -> None:
        geo = self.geometry
        for i in range(len(self.entries())):
            self.refresh_entry_crc(i, geo)

    def bytes(self) -> bytes:
        return bytes(self.data)
