"""Exact bytes: the writer's output equals a file assembled by hand from the spec text.

The expected bytes are built here with ``struct`` from the byte tables of the
spec (not with the schema or the writer), so this is an independent oracle.
"""

from __future__ import annotations

import struct

import crc32c
import numpy as np

import reference


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return h


def crc(data: bytes) -> int:
    return crc32c.crc32c(data)


def expected_file() -> bytes:
    payload = struct.pack("<6e", 1, 2, 3, 4, 5, 6)  # F16 [2, 3], row-major
    name, meta = b"w", b'{"a":1,"b":"\xc3\xa9"}'
    buckets = struct.pack("<II", 0, 1)  # bucket_bits 0: one bucket holding entry 0
    dims = struct.pack("<QQ", 2, 3)
    entry_head = struct.pack(
        "<QQQQIHBBBBHiIII",
        fnv1a64(name), 0x10000, 12, 0, 0, 1,  # hash, offset, length, name_offset, dims_index, len
        10, 0, 2, 0, 0, 0, 0, 0,  # F16, DENSE, ndim 2, bits, flags, group size, k, n
        crc(payload),
    )  # fmt: skip
    entry = entry_head + struct.pack("<I", crc(entry_head + name + dims))
    index = buckets + entry + dims + name + meta
    index_offset = 0x20000
    file_size = index_offset + len(index) + 32
    header_head = struct.pack(
        "<8sHH4sQQQQQQQQQQQB3sII8s",
        b"\x89AWQ\r\n\x1a\n", 2, 0, bytes(4), 0, 0, 65536, 65536, index_offset, len(index),
        file_size, 1, 2, 1, len(meta), 0, bytes(3), crc(index), crc(meta), bytes(8),
    )  # fmt: skip
    header_crc = crc(header_head)
    header = header_head + struct.pack("<I", header_crc)
    trailer_head = struct.pack("<QQI", index_offset, len(index), header_crc)
    trailer = trailer_head + struct.pack("<I", crc(trailer_head)) + b"\x89AWQEND\n"
    out = bytearray(file_size)
    out[0:128] = header
    out[0x10000 : 0x10000 + 12] = payload
    out[index_offset : index_offset + len(index)] = index
    out[-32:] = trailer
    return bytes(out)


def test_writer_output_equals_the_hand_assembled_file(tmp_path):
    path = tmp_path / "golden.awq2"
    reference.save(path, {"w": np.arange(1, 7, dtype=np.float16).reshape(2, 3)}, {"b": "é", "a": 1})
    got, want = path.read_bytes(), expected_file()
    assert len(got) == len(want)
    if got != want:
        first = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        raise AssertionError(
            f"first difference at 0x{first:x}: got {got[first]:02x}, want {want[first]:02x}"
        )


def test_hand_assembled_file_is_read_back(tmp_path):
    path = tmp_path / "hand.awq2"
    path.write_bytes(expected_file())
    with reference.open(path, validate=True) as reader:
        reader.verify()
        assert reader.metadata == {"a": 1, "b": "é"}
        np.testing.assert_array_equal(reader.tensor("w"), np.arange(1, 7).reshape(2, 3))
