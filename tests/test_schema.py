"""The construct schema: parse/build/size round trips, and agreement with the fast reader."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from construct import ChecksumError, ConstError, ConstructError
from samples import sample_tensors, write

import reference
from spec import schema
from spec.algorithms import bucket_of, crc32c, fnv1a_64
from spec.constants import MAGIC, TRAILER_MAGIC

HEADER_VALUE = dict(
    magic=MAGIC, version_major=2, version_minor=0, reserved0=bytes(4), required_flags=0,
    optional_flags=0, alignment=65536, slab_offset=65536, index_offset=0x30000,
    index_length=1234, file_size=0x30000 + 1234 + 32, tensor_count=3, dims_count=5,
    names_length=40, metadata_length=10, bucket_bits=2, reserved1=bytes(3), index_crc=7,
    metadata_crc=9, reserved2=bytes(8),
)  # fmt: skip


def test_sizes_are_what_the_spec_tables_say():
    assert schema.HEADER_SIZE == 128
    assert schema.TRAILER_SIZE == 32
    assert schema.ENTRY_SIZE == 64
    assert schema.HEADER_CRC_OFFSET == 124
    assert schema.TRAILER_CRC_OFFSET == 20
    assert schema.ENTRY_DTYPE.itemsize == 64
    assert schema.HEADER_DTYPE.itemsize == 128


def test_header_parse_build_size_round_trip():
    built = schema.Header.build(dict(fields=dict(value=HEADER_VALUE)))
    assert len(built) == schema.Header.sizeof() == 128
    assert built[:8] == MAGIC
    assert int.from_bytes(built[124:], "little") == crc32c(built[:124])  # [HDR-4]
    parsed = schema.Header.parse(built)
    for key, value in HEADER_VALUE.items():
        assert parsed.fields.value[key] == value, key
    assert schema.Header.build(dict(fields=dict(value=parsed.fields.value))) == built


def test_header_schema_rejects_bad_magic_and_checksum():
    built = bytearray(schema.Header.build(dict(fields=dict(value=HEADER_VALUE))))
    broken = bytes(built[:100]) + bytes([built[100] ^ 1]) + bytes(built[101:])
    with pytest.raises(ChecksumError):
        schema.Header.parse(broken)
    with pytest.raises(ConstError):
        schema.Header.parse(b"\x89AWQ\n\n\x1a\n" + bytes(built[8:]))


def test_trailer_parse_build_size_round_trip():
    value = dict(index_offset=0x20000, index_length=99, header_crc=0xDEADBEEF)
    built = schema.Trailer.build(dict(fields=dict(value=value)))
    assert len(built) == schema.Trailer.sizeof() == 32
    assert built.endswith(TRAILER_MAGIC)
    parsed = schema.Trailer.parse(built)
    assert dict(parsed.fields.value, _io=None) == dict(value, _io=None)
    assert int.from_bytes(built[20:24], "little") == crc32c(built[:20])  # [TRL-2]


def test_entry_parse_build_and_numpy_view_agree():
    value = dict(
        name_hash=0x0123456789ABCDEF, data_offset=0x10000, data_length=12, name_offset=5,
        dims_index=2, name_length=7, dtype=10, layout=4, ndim=2, bits=4, flags=0,
        group_size=-1, k=128, n=64, data_crc=0xAABBCCDD, entry_crc=0x11223344,
    )  # fmt: skip
    built = schema.Entry.build(value)
    assert len(built) == schema.Entry.sizeof() == 64
    parsed = schema.Entry.parse(built)
    view = np.frombuffer(built, schema.ENTRY_DTYPE)[0]
    for key, expected in value.items():
        assert parsed[key] == expected == int(view[key]), key


def test_field_table_offsets_are_contiguous():
    for struct in (schema.Header, schema.Trailer, schema.Entry):
        rows = schema.field_table(struct)
        assert rows[0]["offset"] == 0
        for a, b in zip(rows, rows[1:]):
            assert b["offset"] == a["offset"] + a["size"]
        assert rows[-1]["offset"] + rows[-1]["size"] == struct.sizeof()
        assert all(row["meaning"] for row in rows), "every field documents its meaning"
    # u64 fields are 8-aligned in the header and entries, so C structs need no packing pragmas
    for struct in (schema.Header, schema.Entry):
        for row in schema.field_table(struct):
            assert row["offset"] % row["size"] == 0 or row["type"].startswith("bytes"), row


def test_check_values_of_the_algorithms():
    assert crc32c(b"123456789") == 0xE3069283  # [CRC-1]
    assert fnv1a_64(b"") == 0xCBF29CE484222325  # [IDX-7]
    assert fnv1a_64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a_64(b"foobar") == 0x85944171F73967E8
    assert bucket_of(0xFFFFFFFF00000000, 4) == 0xF  # [IDX-8] the high half folds in


def _files(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(7)
    many = {f"layer.{i}.w": rng.integers(0, 9, size=(i % 5,), dtype=np.int8) for i in range(300)}
    return [
        write(tmp_path / "sample.awq2"),
        write(tmp_path / "empty.awq2", {}, None),
        write(tmp_path / "one.awq2", {"x": np.zeros(3, np.float32)}, None),
        write(tmp_path / "many.awq2", many, {"k": [1, 2]}),
        write(tmp_path / "unicode.awq2", {"模型.权重": np.ones(2), "é": np.zeros(())}, {}),
    ]


def _agree(path: Path, reader: reference.Reader) -> None:
    """construct's parse of the file equals what the NumPy fast path of ``reader`` sees."""
    data = path.read_bytes()
    parsed = schema.File.parse(data)
    header = parsed.header.fields.value
    index = parsed.index
    for key, value in reader.header.items():
        if key == "header_crc":
            assert parsed.header.header_crc == value
        else:
            assert header[key] == value, (path.name, key)
    fast_index = reader.index
    assert list(index.buckets) == fast_index.buckets.tolist()
    assert len(index.entries) == len(fast_index.entries)
    for built, fast in zip(index.entries, fast_index.entries):
        for key in schema.ENTRY_FIELDS:
            assert built[key] == int(fast[key]), (path.name, key)
    assert list(index.dims) == fast_index.dims.tolist()
    assert parsed.trailer.fields.value.index_offset == header.index_offset
    start = fast_index.geometry.metadata.offset
    assert index.metadata == data[start : start + header.metadata_length]
    names_at = fast_index.geometry.names.offset
    pool = data[names_at : names_at + header.names_length]
    assert index.names == pool


def test_construct_schema_and_fast_reader_agree(tmp_path: Path):
    """The normative schema and the NumPy fast path read every test file identically."""
    for path in _files(tmp_path):
        with reference.open(path, validate=True) as reader:
            _agree(path, reader)
            names = {
                bytes(
                    reader.index.buf[reader.index.geometry.names.offset + int(e["name_offset"]) :][
                        : int(e["name_length"])
                    ]
                ).decode()
                for e in reader.index.entries
            }
            assert names == set(reader.names())
            assert set(schema.File.parse(path.read_bytes()).header_padding) <= {0}


def test_construct_schema_and_fast_reader_agree_on_every_vector():
    """DESIGN: construct is the normative description, the reader views the index as NumPy
    structured arrays; both read every conformance vector identically.  Every vector the
    reference opens (accepted ones, and rejected ones that fail only in full validation or
    verification) parses with construct to the same header, bucket table, entries, dims,
    names and metadata; every accepted vector parses."""
    root = Path(__file__).resolve().parent.parent / "conformance"
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    compared = 0
    for v in (v for v in manifest["vectors"] if "file" in v):  # a file set's folder aside
        path = root / v["file"]
        try:
            reader = reference.open(path)
        except reference.FormatError:
            assert v["expect"] != "accept", v["id"]
            continue
        with reader:
            try:
                _agree(path, reader)
            except ConstructError:
                # construct checks CRCs and magics itself; only a rejected vector may fail it
                assert v["expect"] != "accept", v["id"]
                continue
        compared += 1
    assert compared >= 50, compared


def test_schema_matches_sample_tensor_set():
    # guard: the sample used across the tests really covers several dtypes and sizes
    kinds = {a.dtype.kind for a in sample_tensors().values()}
    assert {"f", "i", "b"} <= kinds
