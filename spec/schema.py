"""The normative byte layout of AWQ-v2, as declarative `construct` structures.

One field per line, with its meaning.  The docs' field tables, the reference
reader's NumPy view of the index and the size constants are all derived from
these structures, so prose, code and bytes cannot drift apart.

File map (all integers little-endian [FILE-3]; offsets and lengths u64)::

    0x0000            Header (128 bytes)
    0x0080 .. 0xFFFF  zero padding                                 [PAD-1]
    0x10000           slab: payloads, each at a multiple of 64 KiB  [SLAB-1..5]
    index_offset      index: buckets | pad | entries | dims | names | metadata
    file_size - 32    Trailer (32 bytes)                            [TRL-1..3]

The slab is opaque to the schema: its contents are described by the entries.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from construct import (
    Array,
    Bytes,
    Checksum,
    Const,
    Construct,
    Int8ul,
    Int16ul,
    Int32sl,
    Int32ul,
    Int64ul,
    Pointer,
    RawCopy,
    Struct,
    this,
)

from spec.algorithms import align_up, crc32c
from spec.constants import INDEX_SECTION_ALIGN, MAGIC, SLAB_OFFSET, TRAILER_MAGIC


def _crc32c_of(data: bytes) -> int:
    """Checksum function handed to construct's ``Checksum``."""
    return crc32c(data)


# --------------------------------------------------------------------------- header

HeaderFields = Struct(
    "magic" / Const(MAGIC) * "file signature [HDR-1]",
    "version_major" / Int16ul * "major version, 2 [VER-1, VER-2]",
    "version_minor" / Int16ul * "minor version; readers accept any [VER-1]",
    "reserved0" / Bytes(4) * "zero [HDR-5]",
    "required_flags" / Int64ul * "feature bits a reader must implement [VER-3]",
    "optional_flags" / Int64ul * "feature bits a reader may ignore [VER-4]",
    "alignment" / Int64ul * "payload alignment, 65536 [HDR-2]",
    "slab_offset" / Int64ul * "offset of the slab, 0x10000 [HDR-2]",
    "index_offset" / Int64ul * "offset of the index region [IDX-1]",
    "index_length" / Int64ul * "length of the index region [IDX-3]",
    "file_size" / Int64ul * "total file length in bytes [FILE-2]",
    "tensor_count" / Int64ul * "number of entries [LIM-2]",
    "dims_count" / Int64ul * "number of u64 values in the dims section [IDX-3]",
    "names_length" / Int64ul * "bytes in the name pool [IDX-3]",
    "metadata_length" / Int64ul * "bytes of UTF-8 JSON metadata, 0 for none [META-1]",
    "bucket_bits" / Int8ul * "log2 of the bucket count [IDX-5]",
    "reserved1" / Bytes(3) * "zero [HDR-5]",
    "index_crc" / Int32ul * "CRC-32C of the whole index region [IDX-4]",
    "metadata_crc" / Int32ul * "CRC-32C of the metadata bytes [META-4]",
    "reserved2" / Bytes(8) * "zero [HDR-5]",
)

Header = Struct(
    "fields" / RawCopy(HeaderFields),
    "header_crc"
    / Checksum(Int32ul, _crc32c_of, this.fields.data)
    * "CRC-32C of bytes 0..123 [HDR-4]",
)

# --------------------------------------------------------------------------- trailer

TrailerFields = Struct(
    "index_offset" / Int64ul * "copy of the header's index_offset [TRL-3]",
    "index_length" / Int64ul * "copy of the header's index_length [TRL-3]",
    "header_crc" / Int32ul * "copy of the header's header_crc [TRL-3]",
)

Trailer = Struct(
    "fields" / RawCopy(TrailerFields),
    "trailer_crc"
    / Checksum(Int32ul, _crc32c_of, this.fields.data)
    * "CRC-32C of bytes 0..19 [TRL-2]",
    "magic" / Const(TRAILER_MAGIC) * "end signature [TRL-1]",
)

# --------------------------------------------------------------------------- index

Entry = Struct(
    "name_hash" / Int64ul * "FNV-1a 64 of the UTF-8 name [IDX-7]",
    "data_offset" / Int64ul * "absolute offset of the payload, a multiple of 65536 [SLAB-2]",
    "data_length" / Int64ul * "exact payload length: product(shape) x itemsize [ENT-6]",
    "name_offset" / Int64ul * "offset of the name in the name pool [ENT-2]",
    "dims_index" / Int32ul * "index of the first dimension in the dims section [ENT-3]",
    "name_length" / Int16ul * "UTF-8 length of the name, 1..1024 [NAME-1, LIM-3]",
    "dtype" / Int8ul * "element type code [ENT-4]",
    "layout" / Int8ul * "layout code [LAY-1]",
    "ndim" / Int8ul * "number of dimensions, 0..8 [LIM-4]",
    "bits" / Int8ul * "bits per quantised code, 4 or 8; 0 for DENSE [LAY-2, LAY-3]",
    "flags" / Int16ul * "reserved, zero [ENT-1]",
    "group_size" / Int32sl * "quantisation group size, -1 for one group; 0 for DENSE [LAY-4]",
    "k" / Int32ul * "logical in_features of the layer; 0 for DENSE [LAY-5]",
    "n" / Int32ul * "logical out_features of the layer; 0 for DENSE [LAY-5]",
    "data_crc" / Int32ul * "CRC-32C of the payload [ENT-10]",
    "entry_crc" / Int32ul * "CRC-32C of bytes 0..59, the name and the dims [ENT-9]",
)


def _header_of(ctx: Any) -> Any:
    """Header fields as seen from inside the index, which the file struct reaches by Pointer."""
    return ctx._.header.fields.value


def _bucket_slots(ctx: Any) -> int:
    return (1 << _header_of(ctx).bucket_bits) + 1


def _bucket_padding(ctx: Any) -> int:
    table = 4 * _bucket_slots(ctx)
    return align_up(table, INDEX_SECTION_ALIGN) - table


Index = Struct(
    "buckets"
    / Array(_bucket_slots, Int32ul)
    * "cumulative entry counts, 2**bucket_bits + 1 [IDX-5]",
    "buckets_padding" / Bytes(_bucket_padding) * "zero, to an 8-byte boundary [PAD-3]",
    "entries"
    / Array(lambda ctx: _header_of(ctx).tensor_count, Entry)
    * "sorted by bucket, then name [IDX-6]",
    "dims"
    / Array(lambda ctx: _header_of(ctx).dims_count, Int64ul)
    * "shapes, in entry order [ENT-3]",
    "names" / Bytes(lambda ctx: _header_of(ctx).names_length) * "names, in entry order [ENT-2]",
    "metadata" / Bytes(lambda ctx: _header_of(ctx).metadata_length) * "UTF-8 JSON object [META-1]",
)

File = Struct(
    "header" / Header,
    "header_padding" / Bytes(SLAB_OFFSET - 128) * "zero [PAD-1]",
    "index" / Pointer(lambda ctx: ctx.header.fields.value.index_offset, Index),
    "trailer" / Pointer(-32, Trailer),
)

HEADER_SIZE: int = Header.sizeof()
HEADER_CRC_OFFSET: int = HeaderFields.sizeof()
TRAILER_SIZE: int = Trailer.sizeof()
TRAILER_CRC_OFFSET: int = TrailerFields.sizeof()
ENTRY_SIZE: int = Entry.sizeof()
ENTRY_CRC_OFFSET: int = ENTRY_SIZE - 4


# --------------------------------------------------------------------------- derived views

#: construct format string -> (spec type name, NumPy dtype)
_FORMATS = {
    "<Q": ("u64", "<u8"),
    "<L": ("u32", "<u4"),
    "<H": ("u16", "<u2"),
    "<B": ("u8", "u1"),
    "<l": ("i32", "<i4"),
}


def _leaf(subcon: Construct) -> Construct:
    """Strip the Renamed wrappers that ``"name" / ... * "doc"`` adds."""
    while hasattr(subcon, "subcon") and type(subcon).__name__ == "Renamed":
        subcon = subcon.subcon
    return subcon


def field_table(struct: Struct) -> list[dict[str, Any]]:
    """Rows ``{offset, size, name, type, meaning}`` of a fixed-size struct, for docs and views."""
    rows = []
    offset = 0
    for sub in struct.subcons:
        leaf = _leaf(sub)
        size = sub.sizeof()
        kind = type(leaf).__name__
        if kind == "FormatField":
            type_name = _FORMATS[leaf.fmtstr][0]
        elif kind == "Const":
            type_name = f"bytes[{size}] = {leaf.value!r}"
        elif kind == "RawCopy":
            rows.extend(field_table(leaf.subcon))
            offset += size
            continue
        elif kind == "Checksum":
            type_name = "u32"
        else:
            type_name = f"bytes[{size}]"
        rows.append(
            {
                "offset": offset,
                "size": size,
                "name": sub.name,
                "type": type_name,
                "meaning": sub.docs,
            }
        )
        offset += size
    return rows


def numpy_dtype(struct: Struct) -> np.dtype:
    """A NumPy structured dtype with exactly the byte layout of a fixed-size struct.

    The reference reader views the entry array through this dtype instead of
    parsing it with construct; ``tests/test_schema.py`` proves both agree.
    """
    names, formats, offsets = [], [], []
    for row, sub in zip(field_table(struct), _flat_subcons(struct), strict=True):
        leaf = _leaf(sub)
        names.append(row["name"])
        offsets.append(row["offset"])
        if type(leaf).__name__ == "FormatField":
            formats.append(_FORMATS[leaf.fmtstr][1])
        elif type(leaf).__name__ == "Checksum":
            formats.append("<u4")
        else:
            formats.append(f"V{row['size']}")
    return np.dtype(
        {"names": names, "formats": formats, "offsets": offsets, "itemsize": struct.sizeof()}
    )


def _flat_subcons(struct: Struct) -> list[Construct]:
    out = []
    for sub in struct.subcons:
        leaf = _leaf(sub)
        if type(leaf).__name__ == "RawCopy":
            out.extend(_flat_subcons(leaf.subcon))
        else:
            out.append(sub)
    return out


ENTRY_DTYPE: np.dtype = numpy_dtype(Entry)
HEADER_DTYPE: np.dtype = numpy_dtype(Header)
TRAILER_DTYPE: np.dtype = numpy_dtype(Trailer)

#: Field name -> byte offset inside the structure, for error offsets.
ENTRY_FIELD_OFFSET = {row["name"]: row["offset"] for row in field_table(Entry)}
HEADER_FIELD_OFFSET = {row["name"]: row["offset"] for row in field_table(Header)}
TRAILER_FIELD_OFFSET = {row["name"]: row["offset"] for row in field_table(Trailer)}
ENTRY_FIELDS: tuple[str, ...] = tuple(ENTRY_FIELD_OFFSET)
HEADER_FIELDS: tuple[str, ...] = tuple(HEADER_FIELD_OFFSET)
