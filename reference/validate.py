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

from typing import TYPE_CHECKING

import numpy as np

from reference.errors import error
from reference.rules import check_layers
from spec.algorithms import align_up, crc32c
from spec.constants import ALIGNMENT, MAX_BUCKET_LENGTH, SLAB_OFFSET
from spec.schema import ENTRY_FIELD_OFFSET, ENTRY_SIZE, HEADER_SIZE

if TYPE_CHECKING:
    from reference.reader import Reader
    from reference.rules import TensorInfo

_NAME_OFFSET_FIELD = ENTRY_FIELD_OFFSET["name_offset"]
_DIMS_INDEX_FIELD = ENTRY_FIELD_OFFSET["dims_index"]


def validate_file(reader: Reader) -> list[TensorInfo]:
    """Run RD-2 on an open reader; returns every entry's info in index order."""
    _check_index_checksum(reader)
    _check_bucket_table(reader)
    infos = _check_entries(reader)
    _check_layers(reader, infos)
    _check_placement(reader, infos)
    _check_padding(reader, infos)
    reader._metadata_cache = None
    _ = reader.metadata  # checksum, UTF-8, JSON object, depth [META-*]
    return infos


def _check_index_checksum(reader: Reader) -> None:
    h = reader.header
    start, end = h["index_offset"], h["index_offset"] + h["index_length"]
    crc = crc32c(reader._buf[start:end])
    if crc != h["index_crc"]:
        raise error(
            "BAD_INDEX_CHECKSUM",
            "index checksum mismatch",
            offset=start,
            expected=f"{crc:08x}",
            found=f"{h['index_crc']:08x}",
        )


def _check_bucket_table(reader: Reader) -> None:
    table = reader._buckets.astype(np.int64)
    count = reader._count
    if table[0] != 0:
        raise error(
            "BAD_BUCKET_TABLE",
            "bucket table does not start at 0",
            offset=reader._buckets_offset,
            expected=0,
            found=int(table[0]),
        )
    steps = np.diff(table)
    bad = np.flatnonzero(steps < 0)
    if bad.size:
        i = int(bad[0])
        raise error(
            "BAD_BUCKET_TABLE",
            f"bucket table decreases after slot {i}",
            offset=reader._buckets_offset + 4 * (i + 1),
            expected=f">= {table[i]}",
            found=int(table[i + 1]),
        )
    if table[-1] != count:
        raise error(
            "BAD_BUCKET_TABLE",
            "bucket table does not end at tensor_count",
            offset=reader._buckets_offset + 4 * (len(table) - 1),
            expected=count,
            found=int(table[-1]),
        )
    long = np.flatnonzero(steps > MAX_BUCKET_LENGTH)
    if long.size:
        i = int(long[0])
        raise error(
            "LIMIT_BUCKET",
            f"bucket {i} too long",
            offset=reader._buckets_offset + 4 * i,
            expected=f"<= {MAX_BUCKET_LENGTH}",
            found=int(steps[i]),
        )


def _check_entries(reader: Reader) -> list[TensorInfo]:
    infos = []
    name_cursor = dims_cursor = 0
    previous_bucket, previous_name = -1, b""
    table = reader._buckets
    for i in range(reader._count):
        rec = reader._record(i)
        f = rec.fields
        if f["name_offset"] != name_cursor:  # [ENT-2]
            raise error(
                "BAD_ENTRY_FIELD",
                f"entry {i} name not packed in entry order",
                offset=rec.offset + _NAME_OFFSET_FIELD,
                expected=name_cursor,
                found=f["name_offset"],
            )
        if f["dims_index"] != dims_cursor:  # [ENT-3]
            raise error(
                "BAD_ENTRY_FIELD",
                f"entry {i} dims not packed in entry order",
                offset=rec.offset + _DIMS_INDEX_FIELD,
                expected=dims_cursor,
                found=f["dims_index"],
            )
        name_cursor += f["name_length"]
        dims_cursor += f["ndim"]
        info = reader._info(rec)
        bucket = reader._bucket_of_record(rec)
        if not table[bucket] <= i < table[bucket + 1]:  # [IDX-6, IDX-8]
            raise error(
                "BAD_ENTRY_ORDER",
                f"entry {i} ({info.name!r}) outside its bucket {bucket}",
                offset=rec.offset,
                expected=f"[{table[bucket]}, {table[bucket + 1]})",
                found=i,
            )
        if bucket == previous_bucket:
            if rec.name == previous_name:  # [NAME-3]
                raise error(
                    "DUPLICATE_NAME",
                    f"duplicate name {info.name!r}",
                    offset=rec.offset,
                    expected="unique names",
                    found=info.name,
                )
            if rec.name < previous_name:
                raise error(
                    "BAD_ENTRY_ORDER",
                    f"entry {i} ({info.name!r}) out of name order",
                    offset=rec.offset,
                    expected=f"> {previous_name!r}",
                    found=rec.name,
                )
        previous_bucket, previous_name = bucket, rec.name
        infos.append(info)
    for field, used, cursor in (
        ("names_length", reader.header["names_length"], name_cursor),
        ("dims_count", reader.header["dims_count"], dims_cursor),
    ):
        if used != cursor:
            raise error(
                "BAD_ENTRY_FIELD",
                f"{field} holds bytes no entry uses",
                offset=reader._entries_offset,
                expected=cursor,
                found=used,
            )
    return infos


def _check_layers(reader: Reader, infos: list[TensorInfo]) -> None:
    """[LAY-7] over every entry, in index order; errors point at the entry record."""
    check_layers(infos, lambda i: reader._entries_offset + ENTRY_SIZE * i)


def _check_placement(reader: Reader, infos: list[TensorInfo]) -> None:
    """Overlap, then packing [SLAB-4, SLAB-5]."""
    placed = sorted((t for t in infos if t.length), key=lambda t: t.offset)
    previous_end, expected = None, SLAB_OFFSET
    for info in placed:
        if previous_end is not None and info.offset < previous_end:
            raise error(
                "OVERLAP",
                f"payload of {info.name!r} overlaps the one before",
                offset=info.offset,
                expected=f">= {previous_end}",
                found=info.offset,
            )
        if info.offset != expected:
            raise error(
                "SLAB_GAP",
                f"payload of {info.name!r} not at the next 64 KiB boundary",
                offset=info.offset,
                expected=expected,
                found=info.offset,
            )
        previous_end = info.offset + info.length
        expected = align_up(previous_end, ALIGNMENT)
    if reader.header["index_offset"] != expected:
        raise error(
            "SLAB_GAP",
            "index not at the first 64 KiB boundary after the last payload",
            offset=reader.header["index_offset"],
            expected=expected,
            found=reader.header["index_offset"],
        )


def _first_nonzero(reader: Reader, start: int, end: int, what: str) -> None:
    if end <= start:
        return
    nonzero = np.flatnonzero(reader._buf[start:end])
    if nonzero.size:
        at = start + int(nonzero[0])
        raise error(
            "NONZERO_PADDING",
            f"non-zero byte in {what}",
            offset=at,
            expected=0,
            found=f"0x{int(reader._buf[at]):02x}",
        )


def _check_padding(reader: Reader, infos: list[TensorInfo]) -> None:
    """PAD-1 (header area), PAD-2 (slab gaps), PAD-3 (bucket table padding) [PAD-4]."""
    _first_nonzero(reader, HEADER_SIZE, SLAB_OFFSET, "the header padding")
    for info in sorted((t for t in infos if t.length), key=lambda t: t.offset):
        end = info.offset + info.length
        _first_nonzero(reader, end, align_up(end, ALIGNMENT), f"the padding after {info.name!r}")
    if not any(t.length for t in infos):
        _first_nonzero(reader, SLAB_OFFSET, reader.header["index_offset"], "the empty slab")
    table_end = reader._buckets_offset + 4 * len(reader._buckets)
    _first_nonzero(reader, table_end, reader._entries_offset, "the bucket table padding")
