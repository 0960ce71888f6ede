"""A possibly damaged AWQ-v2 file as its header describes it, for the mutators.

The field catalogue comes from the schema's NumPy dtypes and the index sections from
:func:`spec.geometry.geometry_of` [IDX-2, IDX-3]; nothing here adds section sizes again.
Every read is bounds-checked: a field outside the file reads as 0 and a write to one is
dropped, since a mutated header may point anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spec.constants import MAX_DIMS
from spec.geometry import BUCKET_BOUND_SIZE, DIM_SIZE, IndexGeometry, geometry_of
from spec.schema import (
    ENTRY_DTYPE,
    HEADER_DTYPE,
    HEADER_SIZE,
    TRAILER_DTYPE,
    TRAILER_SIZE,
)

# --------------------------------------------------------------------------- field catalogue


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    kind: str  # "u" unsigned, "i" signed, "V" raw bytes


def _fields(dtype: np.dtype) -> tuple[Field, ...]:
    out = []
    for name in dtype.names or ():
        sub, offset = dtype.fields[name][:2]  # type: ignore[index]
        out.append(Field(name, offset, sub.itemsize, sub.kind))
    return tuple(out)


HEADER = _fields(HEADER_DTYPE)
ENTRY = _fields(ENTRY_DTYPE)
TRAILER = _fields(TRAILER_DTYPE)
HEADER_BY_NAME = {f.name: f for f in HEADER}
ENTRY_BY_NAME = {f.name: f for f in ENTRY}
TRAILER_BY_NAME = {f.name: f for f in TRAILER}


def get_int(data: bytearray, offset: int, size: int, signed: bool = False) -> int:
    if offset < 0 or offset + size > len(data):
        return 0
    return int.from_bytes(data[offset : offset + size], "little", signed=signed)


def put_int(data: bytearray, offset: int, size: int, value: int) -> None:
    """Store ``value`` modulo 2**(8 size) (so -1 is all ones), if the field is in the file."""
    if 0 <= offset and offset + size <= len(data):
        data[offset : offset + size] = (value % (1 << (8 * size))).to_bytes(size, "little")


# --------------------------------------------------------------------------- the view


@dataclass(frozen=True)
class FileView:
    """The header's integer fields and the index sections they give, for a file of ``size``
    bytes; the checks say whether a section lies inside the file (before the trailer)."""

    size: int
    header: dict[str, int]
    geo: IndexGeometry

    @classmethod
    def of(cls, data: bytearray) -> FileView:
        header = {f.name: get_int(data, f.offset, f.size) for f in HEADER if f.kind != "V"}
        return cls(len(data), header, geometry_of(header))

    @property
    def count(self) -> int:
        return self.header["tensor_count"]

    @property
    def index_offset(self) -> int:
        return self.geo.buckets.offset

    def inside(self, start: int, length: int) -> bool:
        return 0 <= start and start + length <= self.size - TRAILER_SIZE and length >= 0

    def entries_ok(self) -> bool:
        return self.count > 0 and self.inside(self.geo.entries.offset, self.geo.entries.length)

    def table_ok(self) -> bool:
        return self.inside(self.geo.buckets.offset, self.geo.buckets.length)

    def bucket_at(self, slot: int) -> int:
        """File offset of bound ``slot`` of the bucket table."""
        return self.geo.buckets.offset + BUCKET_BOUND_SIZE * slot

    def entry(self, data: bytearray, i: int) -> dict[str, int]:
        at = self.geo.entry_offset(i)
        return {f.name: get_int(data, at + f.offset, f.size, f.kind == "i") for f in ENTRY}

    def dims_of(self, data: bytearray, i: int) -> tuple[int, list[int]] | None:
        """File offset of entry i's dims and their values, when they are inside the file."""
        e = self.entry(data, i)
        start = self.geo.dim_offset(e["dims_index"])
        length = self.geo.dim_offset(e["dims_index"] + e["ndim"]) - start
        if e["ndim"] > MAX_DIMS or not self.inside(start, length):
            return None
        return start, [get_int(data, start + DIM_SIZE * j, DIM_SIZE) for j in range(e["ndim"])]

    def name_range(self, data: bytearray, i: int) -> tuple[int, int] | None:
        e = self.entry(data, i)
        start = self.geo.names.offset + e["name_offset"]
        if not self.inside(start, e["name_length"]):
            return None
        return start, start + e["name_length"]

    def regions(self) -> list[tuple[int, int]]:
        """Byte ranges worth aiming raw mutations at: header, index, trailer."""
        out = [(0, min(HEADER_SIZE, self.size))]
        if 0 <= self.index_offset < self.size:
            out.append((self.index_offset, max(self.index_offset + 1, self.size - TRAILER_SIZE)))
        out.append((max(0, self.size - TRAILER_SIZE), self.size))
        return [(a, b) for a, b in out if a < b]
