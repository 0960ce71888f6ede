"""The two algorithms a reader must implement: CRC-32C and the FNV-1a name hash.

Both are normative [CRC-1, IDX-7]; these scalar definitions are the ones the
spec cites.  The reference implementation vectorises the hash over many names
in :mod:`reference.ground.hashing` and checks it against this one.
"""

from __future__ import annotations

from typing import Any

import crc32c as _crc32c

#: FNV-1a 64-bit parameters [IDX-7].
FNV64_OFFSET_BASIS = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_U64 = (1 << 64) - 1


def crc32c(data: Any, value: int = 0) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, init and xorout 0xFFFFFFFF).

    ``crc32c(b"123456789") == 0xE3069283`` [CRC-1].  ``data`` is any C-contiguous
    buffer; ``value`` continues a running checksum: ``crc32c(b, crc32c(a)) == crc32c(a + b)``.
    """
    return int(_crc32c.crc32c(data, value))


def fnv1a_64(name: bytes) -> int:
    """FNV-1a 64 of a name's UTF-8 bytes [IDX-7]."""
    h = FNV64_OFFSET_BASIS
    for byte in name:
        h = ((h ^ byte) * FNV64_PRIME) & _U64
    return h


def bucket_of(name_hash: int, bucket_bits: int) -> int:
    """Bucket of a name hash: high half folded into the low, ``bucket_bits`` kept [IDX-8]."""
    return (name_hash ^ (name_hash >> 32)) & ((1 << bucket_bits) - 1)


def bucket_bits_for(tensor_count: int) -> int:
    """Canonical bucket_bits: the smallest b with 2**b >= tensor_count (0 for 0 or 1) [IDX-5]."""
    return max(tensor_count - 1, 0).bit_length()


def align_up(value: int, alignment: int) -> int:
    """Smallest multiple of ``alignment`` that is >= ``value``."""
    return -(-value // alignment) * alignment
