"""Slow, loop-by-loop Marlin reference written straight from the codec chapter's formulas (docs/spec/codec.md).

Plain Python integers and loops, one code at a time, so that each line can be checked against
the spec by eye. It shares nothing with ``reference/quant/codec.py``; the tests compare the two.
Inputs and outputs are nested lists of ints (words as unsigned 32-bit values).
"""

from __future__ import annotations

from typing import Any

AWQ_ORDER = {4: [0, 2, 4, 6, 1, 3, 5, 7], 8: [0, 2, 1, 3]}


def marlin_position(k: int, n: int, bits: int) -> tuple[int, int, int]:
    """Where code ``(k, n)`` lives: ``(row, word column, field)`` of the Marlin qweight."""
    pf = 32 // bits
    row, kk = divmod(k, 16)  # k = 16R + kk
    tile, nn = divmod(n, 64)  # n = 64T + nn
    hk, rest = divmod(kk, 8)  # kk = k0 + dk + 8*hk, k0 = 2*(L % 4)
    l4, dk = divmod(rest, 2)
    sub, rest = divmod(nn, 16)  # nn = 16S + c + 8*blk
    blk, c = divmod(rest, 8)
    lane = 4 * c + l4  # c = L // 4
    if bits == 4:
        word, field = 4 * lane + sub, 4 * dk + 2 * blk + hk
    else:
        word, field = 8 * lane + 2 * sub + blk, 2 * dk + hk
    return row, tile * (1024 // pf) + word, field


def swizzle_qweight(q: list[list[int]], bits: int) -> list[list[int]]:
    """Codes ``[k][n]`` -> Marlin words ``[k // 16][n * 16 // pf]`` (unsigned)."""
    k, n = len(q), len(q[0])
    pf = 32 // bits
    out = [[0] * (n * 16 // pf) for _ in range(k // 16)]
    for kk in range(k):
        for nn in range(n):
            row, col, field = marlin_position(kk, nn, bits)
            out[row][col] |= q[kk][nn] << (bits * field)
    return out


def unswizzle_qweight(words: list[list[int]], k: int, n: int, bits: int) -> list[list[int]]:
    """Marlin words -> codes ``[k][n]``."""
    mask = (1 << bits) - 1
    q = [[0] * n for _ in range(k)]
    for kk in range(k):
        for nn in range(n):
            row, col, field = marlin_position(kk, nn, bits)
            q[kk][nn] = (words[row][col] >> (bits * field)) & mask
    return q


def awq_pack(q: list[list[int]], bits: int) -> list[list[int]]:
    """Field ``i`` of word ``(r, c)`` holds ``q[r][pf*c + ORDER[i]]``."""
    pf = 32 // bits
    out = []
    for row in q:
        words = []
        for c in range(len(row) // pf):
            word = 0
            for i in range(pf):
                word |= row[pf * c + AWQ_ORDER[bits][i]] << (bits * i)
            words.append(word)
        out.append(words)
    return out


def transpose8x8(rows: list[list[Any]]) -> list[list[Any]]:
    """Each run of 64 columns: ``out[64b + 8i + j] = in[64b + 8j + i]``."""
    out = []
    for row in rows:
        new = list(row)
        for b in range(len(row) // 64):
            for i in range(8):
                for j in range(8):
                    new[64 * b + 8 * i + j] = row[64 * b + 8 * j + i]
        out.append(new)
    return out


def channel_map(rows: list[list[float]]) -> list[list[float]]:
    """Each run of 32 columns: ``out[32b + 8a + 2p + r] = in[32b + 8p + 2a + r]``."""
    out = []
    for row in rows:
        new = [0.0] * len(row)
        for b in range(len(row) // 32):
            for a in range(4):
                for p in range(4):
                    for r in range(2):
                        new[32 * b + 8 * a + 2 * p + r] = row[32 * b + 8 * p + 2 * a + r]
        out.append(new)
    return out


def swizzle_scales(s: list[list[float]], k: int, group_size: int) -> list[list[float]]:
    """Grouped map when ``group_size != -1 and group_size < k``, else the channelwise map."""
    if group_size != -1 and group_size < k:
        return transpose8x8(s)
    return channel_map(s)


def swizzle_zeros(z: list[list[int]], bits: int) -> list[list[int]]:
    """Always the 64-column transpose, then AWQ packing."""
    return awq_pack(transpose8x8(z), bits)
