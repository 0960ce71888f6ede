"""Full validation of an open AWQ-v2 file, in the order the spec fixes [RD-2].

The opening checks [RD-1] have already passed when this runs.  Then:

1. index checksum [IDX-4];
2. bucket table [IDX-5, LIM-6];
3. every entry, in index order: bounds, checksum, fields, name, hash, bucket and
   order, canonical packing of names and dims, shape, length, layout, slab bounds
   [ENT-*, NAME-*, IDX-6..8, LAY-*, SLAB-2, SLAB-3];
4. layers: every quantised entry belongs to one whole layer that agrees [LAY-7];
5. payload placement: overlap, then packing [SLAB-4, SLAB-5];
6. padding [PAD-1..4];
7. metadata [META-1..4, LIM-5].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from reference.errors import checksum_mismatch, field_error, over_limit
from reference.index import Index
from reference.rules import TensorInfo, check_layers
from spec.algorithms import align_up, crc32c
from spec.constants import ALIGNMENT, MAX_BUCKET_LENGTH, SLAB_OFFSET
from spec.schema import ENTRY_FIELD_OFFSET, HEADER_SIZE


class Validated(NamedTuple):
    """What full validation read: every entry in index order, and the metadata object."""

    infos: list[TensorInfo]
    metadata: dict[str, Any]


#: Reads bytes ``[start, end)`` of the file: a slice of the index's buffer by default, or
#: positioned reads, so that padding a full file system never allocated cannot fault [WR-4].
Read = Callable[[int, int], Any]


def validate_index(index: Index, read: Read | None = None) -> Validated:
    """Run RD-2 on an index that passed the opening checks; the first failure is raised.

    ``read(start, end)`` fetches the padding for its check; without it the buffer is sliced.
    """
    if read is None:
        read = lambda start, end: index.buf[start:end]  # noqa: E731
    _check_index_checksum(index)
    _check_bucket_table(index)
    infos = _check_entries(index)
    check_layers(infos, index.geometry.entry_offset)  # [LAY-7], at the entry records
    _check_placement(index, infos)
    _check_padding(read, index, infos)
    return Validated(infos, index.metadata())  # checksum, UTF-8, JSON object, depth [META-*]


def _check_index_checksum(index: Index) -> None:
    """[IDX-4]"""
    h = index.header
    start = h["index_offset"]
    crc = crc32c(index.buf[start : start + h["index_length"]])
    if crc != h["index_crc"]:
        raise checksum_mismatch(
            "BAD_INDEX_CHECKSUM", "index checksum mismatch", start, crc, h["index_crc"]
        )


def _check_bucket_table(index: Index) -> None:
    """Starts at 0, never decreases, ends at tensor_count, no bucket too long [IDX-5, LIM-6]."""
    table = index.buckets.astype(np.int64)
    at = index.bucket_bound_offset
    if table[0] != 0:
        raise field_error(
            "BAD_BUCKET_TABLE", "bucket table does not start at 0", at(0), 0, int(table[0])
        )
    steps = np.diff(table)
    bad = np.flatnonzero(steps < 0)
    if bad.size:
        i = int(bad[0])
        message = f"bucket table decreases after slot {i}"
        raise field_error(
            "BAD_BUCKET_TABLE", message, at(i + 1), f">= {table[i]}", int(table[i + 1])
        )
    if table[-1] != index.tensor_count:
        message = "bucket table does not end at tensor_count"
        last = len(table) - 1
        raise field_error("BAD_BUCKET_TABLE", message, at(last), index.tensor_count, int(table[-1]))
    long = np.flatnonzero(steps > MAX_BUCKET_LENGTH)
    if long.size:
        i = int(long[0])
        raise over_limit(
            "LIMIT_BUCKET", f"bucket {i} too long", at(i), MAX_BUCKET_LENGTH, int(steps[i])
        )


def _check_entries(index: Index) -> list[TensorInfo]:
    """Every entry in index order: packing, local rules, bucket and name order [ENT-*, IDX-6..8]."""
    infos = []
    cursors = {"name_offset": 0, "dims_index": 0}
    previous_bucket, previous_name = -1, b""
    table = index.buckets
    for i in range(index.tensor_count):
        rec = index.record(i)
        f = rec.fields
        for field, what in (("name_offset", "name"), ("dims_index", "dims")):  # [ENT-2, ENT-3]
            if f[field] != cursors[field]:
                message = f"entry {i} {what} not packed in entry order"
                where = rec.offset + ENTRY_FIELD_OFFSET[field]
                raise field_error("BAD_ENTRY_FIELD", message, where, cursors[field], f[field])
        cursors["name_offset"] += f["name_length"]
        cursors["dims_index"] += f["ndim"]
        info = index.info(rec)
        bucket = index.bucket_of(rec)
        if not table[bucket] <= i < table[bucket + 1]:  # [IDX-6, IDX-8]
            message = f"entry {i} ({info.name!r}) outside its bucket {bucket}"
            bounds = f"[{table[bucket]}, {table[bucket + 1]})"
            raise field_error("BAD_ENTRY_ORDER", message, rec.offset, bounds, i)
        if bucket == previous_bucket and rec.name == previous_name:  # [NAME-3]
            message = f"duplicate name {info.name!r}"
            raise field_error("DUPLICATE_NAME", message, rec.offset, "unique names", info.name)
        if bucket == previous_bucket and rec.name < previous_name:  # [IDX-6]
            message = f"entry {i} ({info.name!r}) out of name order"
            raise field_error(
                "BAD_ENTRY_ORDER", message, rec.offset, f"> {previous_name!r}", rec.name
            )
        previous_bucket, previous_name = bucket, rec.name
        infos.append(info)
    for field, cursor in (
        ("names_length", cursors["name_offset"]),
        ("dims_count", cursors["dims_index"]),
    ):
        if index.header[field] != cursor:
            message = f"{field} holds bytes no entry uses"
            where = index.geometry.entries.offset
            raise field_error("BAD_ENTRY_FIELD", message, where, cursor, index.header[field])
    return infos


def _check_placement(index: Index, infos: list[TensorInfo]) -> None:
    """Overlap, then packing [SLAB-4, SLAB-5]."""
    placed = sorted((t for t in infos if t.length), key=lambda t: t.offset)
    previous_end, expected = None, SLAB_OFFSET
    for info in placed:
        if previous_end is not None and info.offset < previous_end:
            message = f"payload of {info.name!r} overlaps the one before"
            raise field_error("OVERLAP", message, info.offset, f">= {previous_end}", info.offset)
        if info.offset != expected:
            message = f"payload of {info.name!r} not at the next 64 KiB boundary"
            raise field_error("SLAB_GAP", message, info.offset, expected, info.offset)
        previous_end = info.offset + info.length
        expected = align_up(previous_end, ALIGNMENT)
    index_offset = index.header["index_offset"]
    if index_offset != expected:
        message = "index not at the first 64 KiB boundary after the last payload"
        raise field_error("SLAB_GAP", message, index_offset, expected, index_offset)


def _first_nonzero(read: Read, start: int, end: int, what: str) -> None:
    if end <= start:
        return
    data = np.frombuffer(read(start, end), np.uint8)
    nonzero = np.flatnonzero(data)
    if nonzero.size:
        at = start + int(nonzero[0])
        message = f"non-zero byte in {what}"
        raise field_error("NONZERO_PADDING", message, at, 0, f"0x{int(data[nonzero[0]]):02x}")


def _check_padding(read: Read, index: Index, infos: list[TensorInfo]) -> None:
    """PAD-1 (header area), PAD-2 (slab gaps), PAD-3 (bucket table padding) [PAD-4]."""
    _first_nonzero(read, HEADER_SIZE, SLAB_OFFSET, "the header padding")
    for info in sorted((t for t in infos if t.length), key=lambda t: t.offset):
        end = info.offset + info.length
        _first_nonzero(read, end, align_up(end, ALIGNMENT), f"the padding after {info.name!r}")
    if not any(t.length for t in infos):
        _first_nonzero(read, SLAB_OFFSET, index.header["index_offset"], "the empty slab")
    pad = index.geometry.bucket_padding
    _first_nonzero(read, pad.offset, pad.end, "the bucket table padding")
