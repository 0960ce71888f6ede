"""The quantisation facts AWQ-v2 relies on: AutoAWQ v1 packing and vLLM's Marlin tiling.

Every number here is stated once; the codec (:mod:`reference.quant.codec`), the per-entry rules
(:mod:`reference.format.rules`), the registries and the generated codec tables import them.  The
layouts themselves are specified in the codec chapter (``docs/spec/codec.md``) [LAY-5, LAY-8].
"""

from __future__ import annotations

#: bits a quantised entry may record [LAY-3]; 8-bit Marlin is optional for readers [LAY-9].
QUANT_BITS: tuple[int, ...] = (4, 8)

#: Group sizes the Marlin GEMM takes [LAY-4]; -1 means one group per column (channelwise).
MARLIN_GROUP_SIZES: tuple[int, ...] = (-1, 32, 64, 128)

#: AWQ v1 packing order: field ``i`` of a 32-bit word holds the code of column
#: ``pf * c + AWQ_ORDER[bits][i]``.
AWQ_ORDER: dict[int, tuple[int, ...]] = {4: (0, 2, 4, 6, 1, 3, 5, 7), 8: (0, 2, 1, 3)}

#: k rows per Marlin qweight row (the repack rule k % 16 == 0).
TILE_K = 16
#: n columns per Marlin tile (the shape rule n % 64 == 0).
TILE_N = 64
#: The Marlin GEMM's thread tile in k (the shape rule k % 128 == 0).
GEMM_MIN_K = 128
#: Columns per 8x8 transpose of grouped scales (and of every zero-point row).
SCALE_RUN_GROUPED = 64
#: Columns per run of channelwise scales.
SCALE_RUN_CHANNEL = 32
#: Bits in one packed word.
WORD_BITS = 32


def pack_factor(bits: int) -> int:
    """``pf = 32 // bits``: codes per 32-bit word (8 for 4-bit, 4 for 8-bit)."""
    return WORD_BITS // bits


def marlin_shape_ok(k: int, n: int, bits: int, group_size: int) -> bool:
    """Marlin's shape rule [LAY-8]: bits 4 or 8, ``n % 64 == 0``, ``k % 128 == 0``, and a
    group size of -1, 32, 64 or 128 that divides k."""
    return (
        bits in QUANT_BITS
        and n % TILE_N == 0
        and k % GEMM_MIN_K == 0
        and group_size in MARLIN_GROUP_SIZES
        and (group_size == -1 or k % group_size == 0)
    )
