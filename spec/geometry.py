"""Where things are: the index sections' offsets and lengths, and what the entry checksum covers.

Derived from the header fields alone [IDX-2, IDX-3]; every reader, writer, validator and
tool calls these instead of adding the section sizes again.  The index region is::

    index_offset  buckets      u32 x (2**bucket_bits + 1)      [IDX-5]
                  padding      zero, to an 8-byte boundary     [PAD-3]
                  entries      ENTRY_SIZE x tensor_count       [IDX-6]
                  dims         u64 x dims_count                [ENT-3]
                  names        names_length bytes              [ENT-2]
                  metadata     metadata_length bytes           [META-1]
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spec.algorithms import align_up, crc32c
from spec.constants import INDEX_SECTION_ALIGN
from spec.schema import ENTRY_CRC_OFFSET, ENTRY_SIZE

#: Bytes per bucket bound (u32) and per dimension (u64).
BUCKET_BOUND_SIZE = 4
DIM_SIZE = 8


@dataclass(frozen=True)
class Section:
    """One section of the index: ``[offset, offset + length)`` in the file."""

    offset: int
    length: int

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True)
class IndexGeometry:
    """Every section of the index region, from the header fields [IDX-2, IDX-3]."""

    buckets: Section
    bucket_padding: Section
    entries: Section
    dims: Section
    names: Section
    metadata: Section

    @property
    def bucket_slots(self) -> int:
        """Bounds in the bucket table: 2**bucket_bits + 1 [IDX-5]."""
        return self.buckets.length // BUCKET_BOUND_SIZE

    @property
    def length(self) -> int:
        """The index_length these sections add up to [IDX-3]."""
        return self.metadata.end - self.buckets.offset

    def entry_offset(self, i: int) -> int:
        """File offset of entry record ``i``."""
        return self.entries.offset + ENTRY_SIZE * i

    def dim_offset(self, i: int) -> int:
        """File offset of the ``i``-th u64 of the dims section."""
        return self.dims.offset + DIM_SIZE * i


def index_geometry(
    *,
    index_offset: int,
    bucket_bits: int,
    tensor_count: int,
    dims_count: int,
    names_length: int,
    metadata_length: int,
) -> IndexGeometry:
    """The sections of an index that starts at ``index_offset`` [IDX-2, IDX-3]."""
    table = BUCKET_BOUND_SIZE * ((1 << bucket_bits) + 1)
    sections, at = [], index_offset
    for length in (
        table,
        align_up(table, INDEX_SECTION_ALIGN) - table,
        ENTRY_SIZE * tensor_count,
        DIM_SIZE * dims_count,
        names_length,
        metadata_length,
    ):
        sections.append(Section(at, length))
        at += length
    return IndexGeometry(*sections)


def geometry_of(header: Mapping[str, int] | object) -> IndexGeometry:
    """:func:`index_geometry` of a header, given as a mapping or an object with the fields."""
    fields = (
        "index_offset",
        "bucket_bits",
        "tensor_count",
        "dims_count",
        "names_length",
        "metadata_length",
    )
    if isinstance(header, Mapping):
        return index_geometry(**{name: int(header[name]) for name in fields})
    return index_geometry(**{name: int(getattr(header, name)) for name in fields})


def pack_dims(shape: Iterable[int]) -> bytes:
    """A shape as the dims section stores it: little-endian u64 each [ENT-3]."""
    dims = tuple(shape)
    return struct.pack(f"<{len(dims)}Q", *dims)


def entry_checksum(record: bytes | memoryview, name: bytes, dims: bytes) -> int:
    """``entry_crc``: CRC-32C of the record's bytes before the checksum field, then the
    entry's name bytes, then its dims as stored [ENT-9]."""
    crc = crc32c(record[:ENTRY_CRC_OFFSET])
    crc = crc32c(name, crc)
    return crc32c(dims, crc)
