"""Pure-NumPy reference codec: AWQ v1 packing <-> vLLM Marlin layout.

Definitions (the codec chapter, ``docs/spec/codec.md``, is the normative statement of the bit
order; the numbers below are imported from :mod:`spec.marlin`):

- ``q[k, n]`` and ``z[G, n]`` are unsigned codes (``uint8``, ``0 <= code < 2**bits``), ``s[G, n]``
  are scales (any float dtype), ``G = k // group_size`` or 1 when ``group_size == -1``.
- ``pf = 32 // bits`` codes per int32 word. Every word is little-endian and field ``f`` occupies
  bits ``bits*f .. bits*f + bits - 1``.
- AWQ v1 (``awq_pack``): field ``i`` of word ``(r, c)`` holds ``q[r, pf*c + ORDER[i]]`` with
  ``ORDER = [0, 2, 4, 6, 1, 3, 5, 7]`` (4-bit) or ``[0, 2, 1, 3]`` (8-bit).
- compressed-tensors ``pack-quantized`` (``ct_pack``): field ``i`` of word ``(r, c)`` holds
  ``q[r, pf*c + i]``; its ``weight_packed`` is ``[n, k // pf]``, packed along k.
- Marlin qweight ``int32[k // 16, n * 16 // pf]``: row ``R`` holds k rows ``16R .. 16R + 15`` as
  ``n // 64`` tiles ``T`` of ``1024 // pf`` words. In a tile, lane ``L`` (0..31) and sub-tile
  ``S`` (0..3) own the codes at ``k = 16R + 2*(L % 4) + dk + 8*hk``,
  ``n = 64T + 16S + L // 4 + 8*blk`` (``dk, hk, blk`` in {0, 1}).
  4-bit: word ``4L + S``, field ``4*dk + 2*blk + hk``. 8-bit: word ``8L + 2S + blk``,
  byte ``2*dk + hk``. Check value: the first 4-bit word holds, fields 0..7, the codes at
  (k, n) = (0,0), (8,0), (0,8), (8,8), (1,0), (9,0), (1,8), (9,8).
- Marlin scales keep shape and dtype. Grouped (``group_size != -1`` and ``group_size < k``):
  each 64 columns ``out[64b + 8i + j] = in[64b + 8j + i]``. Channelwise (otherwise, including
  ``group_size == k``): each 32 columns ``out[32b + 8a + 2p + r] = in[32b + 8p + 2a + r]``.
  ``k`` is the k of the layer (shard) the kernel runs on.
- Marlin zeros ``int32[G, n // pf]``: the grouped 64-column transpose of ``z`` (always, even for
  channelwise scales), then AWQ packing.

How the qweight swizzle is computed: write every code's position as bit fields. Unpacked,
a k-block of 16 rows is ``(hk, L%4, dk, T, S, blk, c)`` with ``c = L // 4`` the three low bits
of ``n`` (eight consecutive bytes); packed, a row is ``(T, c, L%4, S, [field bits])``. So the
swizzle is a re-ordering of those bit fields: the 4-bit nibble pair ``hk`` is merged first,
one SWAR byte swap (a delta swap of byte bit 0 with one array axis) exchanges ``c % 2`` with
``blk`` (4-bit) or ``hk`` (8-bit), and one gather of 16-bit units, with a per-``(bits, n)``
index cached once, moves everything else. Every step is vectorised; unswizzle runs the same
steps backwards. All scalars carry explicit dtypes; arrays are little-endian (``'<u8'`` etc.).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from reference.ground import scratch
from spec import marlin
from spec.marlin import (
    AWQ_ORDER,
    GEMM_MIN_K,
    MARLIN_GROUP_SIZES,
    QUANT_BITS,
    SCALE_RUN_CHANNEL,
    SCALE_RUN_GROUPED,
    TILE_K,
    TILE_N,
)

__all__ = [
    "AWQ_ORDER",
    "MARLIN_GROUP_SIZES",
    "RULES",
    "CodecError",
    "awq_pack",
    "awq_to_marlin",
    "awq_unpack",
    "columns_marlin",
    "ct_pack",
    "ct_unpack",
    "dequantize",
    "is_channelwise",
    "marlin_compatible",
    "num_groups",
    "pack_factor",
    "shard_marlin",
    "swizzle_qweight",
    "swizzle_scales",
    "swizzle_zeros",
    "unswizzle_qweight",
    "unswizzle_scales",
    "unswizzle_zeros",
    "validate_marlin",
]


# Stable rule strings carried by CodecError.rule.
RULE_BITS = "bits in {4, 8}"
RULE_K16 = "k % 16 == 0"
RULE_K128 = "k % 128 == 0"
RULE_N64 = "n % 64 == 0"
RULE_NPF = "n % pf == 0"
RULE_GROUP = "group_size in {-1, 32, 64, 128, k}"
RULE_GROUP_DIV = "group_size divides k"
RULE_CODE = "code < 2**bits"
RULE_DTYPE = "dtype"
RULE_SHAPE = "shape"
RULE_PARALLEL = "parallel in {column, row}"
RULE_TP_SIZE = "tp_size >= 1"
RULE_TP_RANK = "0 <= tp_rank < tp_size"
RULE_TP_DIV_N = "tp_size divides n"
RULE_TP_DIV_K = "tp_size divides k"
RULE_COLUMNS = "0 <= start < stop <= n, start and stop multiples of 64"

RULES: tuple[str, ...] = (
    RULE_BITS,
    RULE_K16,
    RULE_K128,
    RULE_N64,
    RULE_NPF,
    RULE_GROUP,
    RULE_GROUP_DIV,
    RULE_CODE,
    RULE_DTYPE,
    RULE_SHAPE,
    RULE_PARALLEL,
    RULE_TP_SIZE,
    RULE_TP_RANK,
    RULE_TP_DIV_N,
    RULE_TP_DIV_K,
    RULE_COLUMNS,
)

_U8 = np.dtype(np.uint8)
_U16 = np.dtype("<u2")
_U32 = np.dtype("<u4")
_U64 = np.dtype("<u8")
_I32 = np.dtype("<i4")
_SHIFT4 = np.uint64(4)
_SHIFT8 = np.uint64(8)
_NIBBLE_MASK = np.uint64(0x0F0F0F0F0F0F0F0F)
_ODD_BYTE_SWAP_MASK = np.uint64(0x00FF00FF00FF00FF)


class CodecError(ValueError):
    """A shape, dtype or parameter that the codec rejects.

    ``rule`` is one of :data:`RULES`, a short stable string naming the rule broken; the
    message names the rule and the values found.
    """

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"{rule}: {message}")
        self.rule = rule


# ---------------------------------------------------------------------------------------------
# Small helpers and validation.


def pack_factor(bits: int) -> int:
    """Codes per int32 word, ``32 // bits``. Raises CodecError(``bits in {4, 8}``)."""
    _check_bits(bits)
    return marlin.pack_factor(bits)


def num_groups(k: int, group_size: int) -> int:
    """``G = k // group_size``, or 1 when ``group_size == -1``.

    Raises CodecError when ``group_size`` is not -1 or a positive divisor of ``k``.
    """
    if group_size == -1:
        return 1
    if group_size <= 0:
        raise CodecError(RULE_GROUP, f"group_size = {group_size}")
    if k % group_size != 0:
        raise CodecError(RULE_GROUP_DIV, f"k = {k} is not a multiple of group_size = {group_size}")
    return k // group_size


def is_channelwise(k: int, group_size: int) -> bool:
    """True when the scales of a layer (or shard) with this ``k`` use the channelwise map.

    That is ``group_size == -1`` or ``group_size >= k`` (vLLM ``marlin_permute_scales``,
    which is called with the shard's k, ``input_size_per_partition``).
    """
    return group_size == -1 or group_size >= k


def validate_marlin(k: int, n: int, bits: int, group_size: int) -> None:
    """Raise CodecError unless the Marlin GEMM accepts a layer (or shard) of this shape.

    Rules, checked in this order: ``bits in {4, 8}``, ``n % 64 == 0``, ``k % 128 == 0``,
    ``group_size in {-1, 32, 64, 128}``, ``group_size divides k`` (when grouped).
    """
    _check_bits(bits)
    if n <= 0 or n % TILE_N != 0:
        raise CodecError(RULE_N64, f"n = {n}")
    if k <= 0 or k % GEMM_MIN_K != 0:
        raise CodecError(RULE_K128, f"k = {k}")
    if group_size not in MARLIN_GROUP_SIZES:
        raise CodecError(
            RULE_GROUP, f"group_size = {group_size} (the Marlin GEMM takes -1/32/64/128)"
        )
    num_groups(k, group_size)


def marlin_compatible(k: int, n: int, bits: int, group_size: int) -> bool:
    """True when :func:`validate_marlin` accepts ``(k, n, bits, group_size)``."""
    try:
        validate_marlin(k, n, bits, group_size)
    except CodecError:
        return False
    return True


def _check_bits(bits: int) -> None:
    if bits not in QUANT_BITS:
        raise CodecError(RULE_BITS, f"bits = {bits!r}")


def _check_group(k: int, group_size: int) -> int:
    """Codec-level group rule: -1, 32, 64, 128 or k itself, dividing k. Returns G."""
    if group_size not in MARLIN_GROUP_SIZES and group_size != k:
        raise CodecError(RULE_GROUP, f"group_size = {group_size} with k = {k}")
    return num_groups(k, group_size)


def _check_array(name: str, a: object, ndim: int) -> NDArray[Any]:
    if not isinstance(a, np.ndarray):
        raise CodecError(RULE_DTYPE, f"{name} must be a numpy array, got {type(a).__name__}")
    if a.ndim != ndim:
        raise CodecError(RULE_SHAPE, f"{name} must have {ndim} dimensions, got shape {a.shape}")
    return a


def _check_codes(name: str, a: object, bits: int) -> NDArray[np.uint8]:
    arr = _check_array(name, a, 2)
    if arr.dtype != _U8:
        raise CodecError(RULE_DTYPE, f"{name} must be uint8 codes, got {arr.dtype}")
    codes: NDArray[np.uint8] = np.ascontiguousarray(arr, dtype=_U8)
    if bits < 8 and codes.size:
        top = int(codes.max())
        if top >= (1 << bits):
            raise CodecError(RULE_CODE, f"{name} holds code {top}, bits = {bits}")
    return codes


def _check_words(name: str, a: object, shape: tuple[int, int]) -> NDArray[np.int32]:
    arr = _check_array(name, a, 2)
    if arr.dtype not in (np.dtype(np.int32), np.dtype(np.uint32)):
        raise CodecError(RULE_DTYPE, f"{name} must be int32 words, got {arr.dtype}")
    if arr.shape != shape:
        raise CodecError(RULE_SHAPE, f"{name} has shape {arr.shape}, expected {shape}")
    words: NDArray[np.int32] = np.ascontiguousarray(arr).view(_I32)
    return words


def _check_n(n: int) -> None:
    if n <= 0 or n % TILE_N != 0:
        raise CodecError(RULE_N64, f"n = {n}")


def _check_k(k: int) -> None:
    if k <= 0 or k % TILE_K != 0:
        raise CodecError(RULE_K16, f"k = {k}")


def _check_scales(name: str, a: object, g: int, n: int | None) -> NDArray[Any]:
    arr = _check_array(name, a, 2)
    if not np.issubdtype(arr.dtype, np.floating):
        raise CodecError(RULE_DTYPE, f"{name} must be floating point, got {arr.dtype}")
    if arr.shape[0] != g or (n is not None and arr.shape[1] != n):
        want = (g, n if n is not None else arr.shape[1])
        raise CodecError(RULE_SHAPE, f"{name} has shape {arr.shape}, expected {want}")
    return arr


# ---------------------------------------------------------------------------------------------
# AWQ v1 packing (also the packing of Marlin zeros).


def _pack_words(fields: NDArray[np.uint8], bits: int) -> NDArray[np.int32]:
    """``fields[..., m, pf]`` (field i last) -> little-endian int32 words ``[..., m]``."""
    pf = 32 // bits
    out = np.zeros(fields.shape[:-1], dtype=_U32)
    for i in range(pf):  # constant number of fields
        out |= fields[..., i].astype(_U32) << np.uint32(bits * i)
    return out.view(_I32)


def _word_bytes(words: NDArray[np.int32]) -> NDArray[np.uint8]:
    """The bytes of int32 words ``[r, m]`` in file order, ``uint8[r, m, 4]`` (a view on a
    little-endian machine): byte ``b`` holds fields ``2b`` (low nibble) and ``2b + 1``."""
    rows, m = words.shape
    little: NDArray[np.uint32] = words.astype("<u4", copy=False)
    return little.view(_U8).reshape(rows, m, 4)


def _unpack_words(words: NDArray[np.int32], bits: int) -> NDArray[np.uint8]:
    """Little-endian int32 words ``[r, m]`` -> ``fields[r, m, pf]`` (uint8)."""
    pf = 32 // bits
    if bits == 4:  # two nibbles a byte: two passes over the bytes, no 32-bit temporaries
        raw = _word_bytes(words)
        nibbles = np.empty((*raw.shape, 2), dtype=_U8)
        np.bitwise_and(raw, np.uint8(0x0F), out=nibbles[..., 0])
        np.right_shift(raw, np.uint8(4), out=nibbles[..., 1])
        return nibbles.reshape(*words.shape, pf)
    w = words.view(_U32)
    out = np.empty((*w.shape, pf), dtype=_U8)
    mask = np.uint32((1 << bits) - 1)
    for i in range(pf):  # constant number of fields
        out[..., i] = (w >> np.uint32(bits * i)) & mask
    return out


def awq_pack(q: NDArray[np.uint8], bits: int) -> NDArray[np.int32]:
    """Pack codes ``uint8[k, n]`` into AWQ v1 GEMM words ``int32[k, n // pf]``.

    Field ``i`` of word ``(r, c)`` holds ``q[r, pf*c + AWQ_ORDER[bits][i]]``. Also packs zeros.
    Raises CodecError: ``bits in {4, 8}``, ``dtype``, ``shape``, ``n % pf == 0``,
    ``code < 2**bits``.
    """
    pf = pack_factor(bits)
    codes = _check_codes("q", q, bits)
    rows, n = codes.shape
    if n % pf != 0:
        raise CodecError(RULE_NPF, f"n = {n}, pf = {pf}")
    order = np.asarray(AWQ_ORDER[bits], dtype=np.intp)
    fields = codes.reshape(rows, n // pf, pf)[:, :, order]
    return _pack_words(fields, bits)


def awq_unpack(
    qweight: NDArray[np.int32], bits: int, *, out: NDArray[np.uint8] | None = None
) -> NDArray[np.uint8]:
    """Inverse of :func:`awq_pack`: ``int32[k, n // pf]`` -> ``uint8[k, n]``.

    ``out``, if given, is a C-contiguous ``uint8[k, n]`` to write into and is returned.
    Raises CodecError: ``bits in {4, 8}``, ``dtype``, ``shape``.
    """
    pf = pack_factor(bits)
    arr = _check_array("qweight", qweight, 2)
    words = _check_words("qweight", arr, arr.shape)
    rows, m = words.shape
    shape = (rows, m * pf)
    dst = np.empty(shape, dtype=_U8) if out is None else _check_out(out, shape, _U8)
    if bits == 4:
        _awq_unpack4(words, dst)
        return dst
    dst.reshape(rows, m, pf)[:, :, np.asarray(AWQ_ORDER[bits], dtype=np.intp)] = _unpack_words(
        words, bits
    )
    return dst


#: :func:`awq_unpack` for 4 bits, word by word: output columns ``0..3`` and ``4..7`` of a word,
#: one per byte of a little-endian u32, as ``(shift right, mask)`` pairs over the word (a
#: negative shift is to the left).  With AWQ_ORDER[4] = (0, 2, 4, 6, 1, 3, 5, 7), column ``c``
#: is nibble ``AWQ_ORDER[4].index(c)``: columns 0, 1, 2, 3 are nibbles 0, 4, 1, 5 (bits 0, 16,
#: 4, 20) and go to bits 0, 8, 16, 24; columns 4, 5, 6, 7 are nibbles 2, 6, 3, 7.
_AWQ4_COLUMNS = (
    ((0, 0x0000000F), (8, 0x00000F00), (-12, 0x000F0000), (-4, 0x0F000000)),
    ((8, 0x0000000F), (16, 0x00000F00), (-4, 0x000F0000), (4, 0x0F000000)),
)


def _awq_unpack4(words: NDArray[np.int32], dst: NDArray[np.uint8]) -> None:
    """:func:`awq_unpack` for 4 bits into ``dst`` (``uint8[rows, 8 * m]``), with 32-bit shifts
    and masks in place (a few passes over the words, no per-field temporaries), each half of
    the output row a byte per column; in blocks of rows (:func:`_row_blocks`)."""
    rows, m = words.shape
    for r0, r1 in _row_blocks(rows, m * 4):
        x = words[r0:r1].view(_U32)
        out = dst[r0:r1].view(_U32).reshape(r1 - r0, m, 2)
        acc = scratch.empty("awq_unpack4.acc", (r1 - r0, m), _U32)
        part = scratch.empty("awq_unpack4.part", (r1 - r0, m), _U32)
        for half, pieces in enumerate(_AWQ4_COLUMNS):
            for i, (shift, mask) in enumerate(pieces):
                target = acc if i == 0 else part
                if shift >= 0:
                    np.right_shift(x, np.uint32(shift), out=target)
                else:
                    np.left_shift(x, np.uint32(-shift), out=target)
                np.bitwise_and(target, np.uint32(mask), out=target)
                if i:
                    np.bitwise_or(acc, part, out=acc)
            out[:, :, half] = acc


#: Bytes of input per block of :func:`_row_blocks`: the passes over a block and its
#: temporaries stay in the processor's caches instead of going to memory once per pass (the
#: 4-bit unpacking and swizzle of a 2048 x 5632 layer: 0.092 s whole, 0.064 s in blocks of
#: about 1 MiB, one thread; 0.120 s and 0.091 s for two threads at once; blocks of 256 KiB
#: were slower with two threads, the per-call overhead and the GIL then dominating).
_BLOCK_BYTES = 1 << 20


def _row_blocks(rows: int, row_bytes: int, multiple: int = 1) -> list[tuple[int, int]]:
    """``[r0, r1)`` ranges covering ``rows``, each about :data:`_BLOCK_BYTES` of rows of
    ``row_bytes``, a whole number of ``multiple`` rows (the last may be shorter)."""
    step = max(1, _BLOCK_BYTES // max(1, row_bytes * multiple)) * multiple
    return [(r0, min(rows, r0 + step)) for r0 in range(0, rows, step)]


def ct_pack(q: NDArray[np.uint8], bits: int) -> NDArray[np.int32]:
    """Pack codes ``uint8[r, m]`` into compressed-tensors ``pack-quantized`` words
    ``int32[r, m // pf]``: field ``i`` of word ``(r, c)`` holds ``q[r, pf*c + i]`` (consecutive
    columns, the first in the low bits). Raises CodecError like :func:`awq_pack`."""
    pf = pack_factor(bits)
    codes = _check_codes("q", q, bits)
    rows, m = codes.shape
    if m % pf != 0:
        raise CodecError(RULE_NPF, f"n = {m}, pf = {pf}")
    return _pack_words(codes.reshape(rows, m // pf, pf), bits)


def ct_unpack(words: NDArray[np.int32], bits: int) -> NDArray[np.uint8]:
    """Inverse of :func:`ct_pack`: ``int32[r, c]`` -> ``uint8[r, c * pf]``."""
    pf = pack_factor(bits)
    arr = _check_array("words", words, 2)
    fields = _unpack_words(_check_words("words", arr, arr.shape), bits)
    return fields.reshape(arr.shape[0], arr.shape[1] * pf)


# ---------------------------------------------------------------------------------------------
# Marlin qweight.
#
# Axis names (per 16-row block R): hk, l4 = L % 4, dk (the k bits, outer to inner), T, S, blk,
# c = L // 4 (the n bits, outer to inner); c2 c1 c0 are the bits of c. S1 S0 are the bits of S.


def _u16_gather(bits: int, n: int) -> NDArray[np.intp]:
    """Per-Marlin-row gather: Marlin 16-bit unit ``j`` = pre-gather unit ``gather[j]``."""
    return _qweight_plan(bits, n)[0]


def _u16_scatter(bits: int, n: int) -> NDArray[np.intp]:
    """Inverse of :func:`_u16_gather` (its argsort)."""
    return _qweight_plan(bits, n)[1]


@functools.lru_cache(maxsize=32)
def _qweight_plan(bits: int, n: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Index plan of one Marlin row in little-endian 16-bit units, cached by ``(bits, n)``.

    Before the gather, after the byte swap, a row's 16-bit units are laid out as
    ``(c0, l4, dk, T, S1, S0, c2, c1)`` with the byte pair ``blk`` inside (4-bit), or
    ``(c0, l4, dk, T, S, blk, c2, c1)`` with ``hk`` inside (8-bit). In the Marlin row they are
    ``(T, c2, c1, c0, l4, S1, S0, dk)`` / ``(T, c2, c1, c0, l4, S, blk, dk)``: the word index
    ``4L + S`` (or ``8L + 2S + blk``) with ``L = 4c + l4``, then the field bits above the byte.
    """
    t = n // TILE_N
    if bits == 4:
        src: dict[str, int] = {
            "c0": 2, "l4": 4, "dk": 2, "T": t, "S1": 2, "S0": 2, "c2": 2, "c1": 2,
        }  # fmt: skip
        dst = ("T", "c2", "c1", "c0", "l4", "S1", "S0", "dk")
    else:
        src = {"c0": 2, "l4": 4, "dk": 2, "T": t, "S": 4, "blk": 2, "c2": 2, "c1": 2}
        dst = ("T", "c2", "c1", "c0", "l4", "S", "blk", "dk")
    names = list(src)
    size = int(np.prod(list(src.values())))
    grid = np.arange(size, dtype=np.intp).reshape(tuple(src.values()))
    gather = np.ascontiguousarray(grid.transpose([names.index(a) for a in dst]).reshape(-1))
    scatter = np.empty_like(gather)
    scatter[gather] = np.arange(size, dtype=np.intp)
    gather.setflags(write=False)
    scatter.setflags(write=False)
    return gather, scatter


def _byte_swap_pairs(
    a_in: NDArray[np.uint64],
    b_in: NDArray[np.uint64],
    a_out: NDArray[np.uint64],
    b_out: NDArray[np.uint64],
    tmp: NDArray[np.uint64],
) -> None:
    """SWAR delta swap of byte bit 0 with the pair axis (a, b): a's odd bytes <-> b's even bytes.

    Element (pair = x, byte bit 0 = y) moves to (pair = y, byte bit 0 = x). An involution.
    Outputs may alias the inputs (in place) or be fresh buffers; ``tmp`` may be ``a_out`` when
    that is not ``a_in`` (it is written last, from ``a_in`` and ``tmp``).
    """
    np.right_shift(a_in, _SHIFT8, out=tmp)
    np.bitwise_xor(tmp, b_in, out=tmp)
    np.bitwise_and(tmp, _ODD_BYTE_SWAP_MASK, out=tmp)
    np.bitwise_xor(b_in, tmp, out=b_out)
    np.left_shift(tmp, _SHIFT8, out=tmp)
    np.bitwise_xor(a_in, tmp, out=a_out)


def _check_out(out: object, shape: tuple[int, int], dtype: np.dtype[Any]) -> NDArray[Any]:
    arr = _check_array("out", out, 2)
    if arr.dtype != dtype:
        raise CodecError(RULE_DTYPE, f"out must be {dtype}, got {arr.dtype}")
    if arr.shape != shape:
        raise CodecError(RULE_SHAPE, f"out has shape {arr.shape}, expected {shape}")
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise CodecError(RULE_SHAPE, "out must be a writeable C-contiguous array")
    return arr


def _scratch(buf: NDArray[Any], rows: int, cols: int) -> NDArray[np.uint64]:
    """A ``uint64[rows, cols]`` scratch view over the first bytes of ``buf``."""
    flat: NDArray[np.uint64] = buf.reshape(-1).view(_U64)[: rows * cols]
    return flat.reshape(rows, cols)


def swizzle_qweight(
    q: NDArray[np.uint8], bits: int, *, out: NDArray[np.int32] | None = None
) -> NDArray[np.int32]:
    """Codes ``uint8[k, n]`` -> Marlin qweight ``int32[k // 16, n * 16 // pf]``.

    Byte-identical to vLLM ``awq_marlin_repack`` of ``awq_pack(q)``. ``out``, if given, is a
    C-contiguous ``int32[k // 16, n * 16 // pf]`` to write into (a memory map, say) and is
    returned. Raises CodecError: ``bits in {4, 8}``, ``dtype``, ``shape``, ``k % 16 == 0``,
    ``n % 64 == 0``, ``code < 2**bits``.
    """
    _check_bits(bits)
    codes = _check_codes("q", q, bits)
    k, n = codes.shape
    _check_k(k)
    _check_n(n)
    rows = k // TILE_K
    shape = (rows, n * 16 * bits // 32)
    dst = np.empty(shape, dtype=_I32) if out is None else _check_out(out, shape, _I32)
    for r0, r1 in _row_blocks(rows, 16 * n):  # Marlin rows are independent of one another
        _swizzle_rows(codes[r0 * TILE_K : r1 * TILE_K], bits, dst[r0:r1])
    return dst


def _swizzle_rows(codes: NDArray[np.uint8], bits: int, dst: NDArray[np.int32]) -> None:
    """:func:`swizzle_qweight` of whole Marlin rows (``16 * rows`` rows of codes)."""
    rows, n = dst.shape[0], codes.shape[1]
    x = codes.reshape(rows, 16 * n).view(_U64)  # per row: (hk, l4, dk, T, S, blk) x 8 bytes c
    if bits == 4:
        # Merge the nibble pair hk into one byte, writing the pair axis blk outermost.
        half = n // 2  # u64 units per (row, hk, blk)
        lo = x[:, :n].reshape(rows, half, 2).transpose(0, 2, 1)
        hi = x[:, n:].reshape(rows, half, 2).transpose(0, 2, 1)
        # (R, blk, l4 dk T S1 S0) x bytes c; a temporary (the gather below reads it)
        pre = scratch.empty("swizzle.pre", (rows, 2, half), _U64)
        np.left_shift(hi, _SHIFT4, out=pre)
        np.bitwise_or(pre, lo, out=pre)
        tmp = _scratch(dst, rows, half)  # dst is written only by the gather below
        _byte_swap_pairs(pre[:, 0], pre[:, 1], pre[:, 0], pre[:, 1], tmp)
    else:
        pairs = x.reshape(rows, 2, n)  # (R, hk, l4 dk T S blk) x bytes c
        pre = scratch.empty("swizzle.pre", (rows, 2, n), _U64)
        _byte_swap_pairs(pairs[:, 0], pairs[:, 1], pre[:, 0], pre[:, 1], pre[:, 0])
    units = pre.reshape(rows, -1).view(_U16)
    np.take(units, _u16_gather(bits, n), axis=1, out=dst.view(_U16), mode="clip")


def unswizzle_qweight(
    mq: NDArray[np.int32], k: int, n: int, bits: int, *, out: NDArray[np.uint8] | None = None
) -> NDArray[np.uint8]:
    """Inverse of :func:`swizzle_qweight`: ``int32[k // 16, n * 16 // pf]`` -> ``uint8[k, n]``.

    ``out``, if given, is a C-contiguous ``uint8[k, n]`` to write into and is returned.
    Raises CodecError: ``bits in {4, 8}``, ``k % 16 == 0``, ``n % 64 == 0``, ``dtype``,
    ``shape``.
    """
    _check_bits(bits)
    _check_k(k)
    _check_n(n)
    rows = k // TILE_K
    words = _check_words("mq", mq, (rows, n * 16 * bits // 32))
    codes = np.empty((k, n), dtype=_U8) if out is None else _check_out(out, (k, n), _U8)
    width = (n // 2) if bits == 4 else n
    pre = np.empty((rows, 2, width), dtype=_U64)
    np.take(
        words.view(_U16),
        _u16_scatter(bits, n),
        axis=1,
        out=pre.reshape(rows, -1).view(_U16),
        mode="clip",
    )
    x = codes.reshape(rows, 16 * n).view(_U64)
    if bits == 4:
        tmp = _scratch(codes, rows, width)  # codes are written only after the swap
        _byte_swap_pairs(pre[:, 0], pre[:, 1], pre[:, 0], pre[:, 1], tmp)
        lo = x[:, :n].reshape(rows, width, 2).transpose(0, 2, 1)
        hi = x[:, n:].reshape(rows, width, 2).transpose(0, 2, 1)
        np.bitwise_and(pre, _NIBBLE_MASK, out=lo)
        np.right_shift(pre, _SHIFT4, out=hi)
        np.bitwise_and(hi, _NIBBLE_MASK, out=hi)
    else:
        pairs = x.reshape(rows, 2, n)
        _byte_swap_pairs(pre[:, 0], pre[:, 1], pairs[:, 0], pairs[:, 1], pairs[:, 0])
    return codes


# ---------------------------------------------------------------------------------------------
# Marlin scales and zeros.


def _transpose8x8(a: NDArray[Any]) -> NDArray[Any]:
    """Each run of 64 columns: ``out[64b + 8i + j] = a[64b + 8j + i]`` (an involution)."""
    g, n = a.shape
    run = SCALE_RUN_GROUPED
    return np.ascontiguousarray(a.reshape(g, n // run, 8, 8).transpose(0, 1, 3, 2)).reshape(g, n)


def _channel_map(a: NDArray[Any]) -> NDArray[Any]:
    """Each run of 32 columns: ``out[32b + 8a + 2p + r] = in[32b + 8p + 2a + r]`` (involution)."""
    g, n = a.shape
    run = SCALE_RUN_CHANNEL
    blocks = a.reshape(g, n // run, 4, 4, 2).transpose(0, 1, 3, 2, 4)
    return np.ascontiguousarray(blocks).reshape(g, n)


def swizzle_scales(s: NDArray[np.floating], k: int, group_size: int) -> NDArray[np.floating]:
    """Scales ``[G, n]`` -> Marlin scales ``[G, n]``, dtype kept (vLLM ``marlin_permute_scales``).

    Grouped map when ``group_size != -1 and group_size < k``, else the channelwise map; ``k`` is
    the k the kernel runs on (a shard's k under row parallelism). Raises CodecError: ``dtype``,
    ``shape``, ``n % 64 == 0``, ``group_size in {-1, 32, 64, 128, k}``, ``group_size divides k``.
    """
    g = _check_group(k, group_size)
    arr = _check_scales("s", s, g, None)
    _check_n(arr.shape[1])
    if is_channelwise(k, group_size):
        return _channel_map(arr)
    return _transpose8x8(arr)


def unswizzle_scales(ms: NDArray[np.floating], k: int, group_size: int) -> NDArray[np.floating]:
    """Inverse of :func:`swizzle_scales` (both maps are involutions). Same errors."""
    return swizzle_scales(ms, k, group_size)


def swizzle_zeros(z: NDArray[np.uint8], bits: int) -> NDArray[np.int32]:
    """Zero points ``uint8[G, n]`` -> Marlin zeros ``int32[G, n // pf]``.

    The 64-column 8x8 transpose, then AWQ packing (vLLM ``marlin_zero_points``). Raises
    CodecError: ``bits in {4, 8}``, ``dtype``, ``shape``, ``n % 64 == 0``, ``code < 2**bits``.
    """
    _check_bits(bits)
    codes = _check_codes("z", z, bits)
    _check_n(codes.shape[1])
    return awq_pack(_transpose8x8(codes), bits)


def unswizzle_zeros(mz: NDArray[np.int32], n: int, bits: int) -> NDArray[np.uint8]:
    """Inverse of :func:`swizzle_zeros`: ``int32[G, n // pf]`` -> ``uint8[G, n]``.

    Raises CodecError: ``bits in {4, 8}``, ``n % 64 == 0``, ``dtype``, ``shape``.
    """
    pf = pack_factor(bits)
    _check_n(n)
    arr = _check_array("mz", mz, 2)
    _check_words("mz", arr, (arr.shape[0], n // pf))
    return _transpose8x8(awq_unpack(arr, bits))


# ---------------------------------------------------------------------------------------------
# Dequantisation and the AWQ v1 -> Marlin repack.


def dequantize(
    q: NDArray[np.uint8], z: NDArray[np.uint8], s: NDArray[np.floating], group_size: int
) -> NDArray[np.float32]:
    """``w[k, n] = (q - z[k // gs]) * s[k // gs]`` in float32 (unswizzled inputs).

    ``q`` is ``uint8[k, n]``, ``z`` ``uint8[G, n]``, ``s`` ``[G, n]`` float. Any AWQ group size
    is accepted (-1 or a positive divisor of k, not only Marlin's). Raises CodecError:
    ``dtype``, ``shape``, ``group_size in {-1, 32, 64, 128, k}`` (zero or negative other than
    -1), ``group_size divides k``.
    """
    qa = _check_array("q", q, 2)
    k, n = qa.shape
    g = num_groups(k, group_size)
    za = _check_array("z", z, 2)
    for name, a in (("q", qa), ("z", za)):
        if a.dtype != _U8:
            raise CodecError(RULE_DTYPE, f"{name} must be uint8 codes, got {a.dtype}")
    if za.shape != (g, n):
        raise CodecError(RULE_SHAPE, f"z has shape {za.shape}, expected {(g, n)}")
    sa = _check_scales("s", s, g, n)
    rows = k // g
    qf = qa.astype(np.float32).reshape(g, rows, n)
    zf = za.astype(np.float32)[:, None, :]
    sf = sa.astype(np.float32)[:, None, :]
    w: NDArray[np.float32] = ((qf - zf) * sf).reshape(k, n)
    return w


def awq_to_marlin(
    qweight: NDArray[np.int32],
    qzeros: NDArray[np.int32],
    scales: NDArray[np.floating],
    *,
    bits: int,
    group_size: int,
) -> tuple[NDArray[np.int32], NDArray[np.floating], NDArray[np.int32]]:
    """Repack AWQ v1 tensors to Marlin, as an engine does at load time.

    ``qweight int32[k, n // pf]``, ``qzeros int32[G, n // pf]``, ``scales [G, n]`` ->
    ``(marlin qweight int32[k // 16, n * 16 // pf], marlin scales [G, n], marlin zeros
    int32[G, n // pf])``; ``k = qweight.shape[0]`` is the k whose scale map is used. Raises
    CodecError as :func:`swizzle_qweight`, :func:`swizzle_scales`, :func:`swizzle_zeros`.
    """
    q = awq_unpack(qweight, bits)
    k, n = q.shape
    g = _check_group(k, group_size)
    za = _check_array("qzeros", qzeros, 2)
    if za.shape != (g, qweight.shape[1]):
        raise CodecError(
            RULE_SHAPE, f"qzeros has shape {za.shape}, expected {(g, qweight.shape[1])}"
        )
    _check_scales("scales", scales, g, n)
    z = awq_unpack(za, bits)
    return swizzle_qweight(q, bits), swizzle_scales(scales, k, group_size), swizzle_zeros(z, bits)


# ---------------------------------------------------------------------------------------------
# Tensor-parallel shards of stored Marlin tensors.


def _check_stored(
    qweight: NDArray[np.int32], scales: NDArray[np.floating], qzeros: NDArray[np.int32], *,
    k: int, n: int, bits: int, group_size: int,
) -> int:  # fmt: skip
    """A whole stored Marlin layer's shape rules and tensor shapes; returns ``pf``."""
    pf = pack_factor(bits)
    _check_k(k)
    _check_n(n)
    g = _check_group(k, group_size)
    _check_words("qweight", qweight, (k // TILE_K, n * 16 // pf))
    _check_words("qzeros", qzeros, (g, n // pf))
    _check_scales("scales", scales, g, n)
    return pf


def shard_marlin(
    qweight: NDArray[np.int32],
    scales: NDArray[np.floating],
    qzeros: NDArray[np.int32],
    *,
    k: int,
    n: int,
    bits: int,
    group_size: int,
    tp_rank: int,
    tp_size: int,
    parallel: Literal["column", "row"],
) -> tuple[NDArray[np.int32], NDArray[np.floating], NDArray[np.int32], int, int]:
    """One tensor-parallel shard of a Marlin layer, cut from the stored Marlin tensors.

    Inputs are the full layer's Marlin ``qweight int32[k // 16, n * 16 // pf]``,
    ``scales [G, n]`` (permuted for the full k) and ``qzeros int32[G, n // pf]``. Returns the
    shard's ``(qweight, scales, qzeros, k_shard, n_shard)``, equal to swizzling the shard of the
    unswizzled tensors.

    - ``column`` (split n, ``n_shard = n // tp_size``): Marlin qweight columns
      ``[r, r + 1) * n_shard * 16 // pf`` (tile ``T`` owns columns ``T * 1024 // pf`` onward),
      scale columns ``[r, r + 1) * n_shard``, zero columns ``[r, r + 1) * n_shard // pf``.
    - ``row`` (split k, ``k_shard = k // tp_size``): qweight rows ``[r, r + 1) * k_shard // 16``;
      grouped scales and zeros take group rows ``[r, r + 1) * k_shard // group_size``;
      channelwise (``group_size == -1``) scales and zeros apply to every k, so every rank gets
      all of them. When the full layer is grouped but the shard is channelwise
      (``group_size >= k_shard``, i.e. ``k_shard == group_size``), the shard's scale row is
      re-permuted from the grouped to the channelwise map.

    Slices are views of the inputs (not contiguous for ``column``); re-permuted scales are new.
    Raises CodecError: ``parallel in {column, row}``, ``tp_size >= 1``,
    ``0 <= tp_rank < tp_size``, ``tp_size divides n`` / ``tp_size divides k``, the Marlin GEMM
    rules on the shard (``n % 64 == 0``, ``k % 128 == 0``, ``group_size in {-1, 32, 64, 128}``,
    ``group_size divides k``), and ``dtype`` / ``shape`` for tensors that do not match.
    """
    if parallel not in ("column", "row"):
        raise CodecError(RULE_PARALLEL, f"parallel = {parallel!r}")
    if not isinstance(tp_size, int) or tp_size < 1:
        raise CodecError(RULE_TP_SIZE, f"tp_size = {tp_size!r}")
    if not isinstance(tp_rank, int) or not 0 <= tp_rank < tp_size:
        raise CodecError(RULE_TP_RANK, f"tp_rank = {tp_rank!r}, tp_size = {tp_size}")
    pf = _check_stored(qweight, scales, qzeros, k=k, n=n, bits=bits, group_size=group_size)

    if parallel == "column":
        if n % tp_size != 0:
            raise CodecError(RULE_TP_DIV_N, f"n = {n}, tp_size = {tp_size}")
        k_shard, n_shard = k, n // tp_size
        _check_shard(k_shard, n_shard, bits, group_size)
        c0, c1 = tp_rank * n_shard, (tp_rank + 1) * n_shard
        return (*_columns(qweight, scales, qzeros, c0, c1, pf), k_shard, n_shard)

    if k % tp_size != 0:
        raise CodecError(RULE_TP_DIV_K, f"k = {k}, tp_size = {tp_size}")
    k_shard, n_shard = k // tp_size, n
    _check_shard(k_shard, n_shard, bits, group_size)
    r0, r1 = tp_rank * k_shard, (tp_rank + 1) * k_shard
    shard_q = qweight[r0 // TILE_K : r1 // TILE_K]
    if group_size == -1:
        return shard_q, scales, qzeros, k_shard, n_shard
    g0, g1 = r0 // group_size, r1 // group_size
    shard_s = scales[g0:g1]
    if is_channelwise(k_shard, group_size) and not is_channelwise(k, group_size):
        shard_s = _regroup_scales(shard_s)
    return shard_q, shard_s, qzeros[g0:g1], k_shard, n_shard


def _columns(
    qweight: NDArray[np.int32], scales: NDArray[np.floating], qzeros: NDArray[np.int32],
    c0: int, c1: int, pf: int,
) -> tuple[NDArray[np.int32], NDArray[np.floating], NDArray[np.int32]]:  # fmt: skip
    """Output columns ``c0 .. c1`` (multiples of 64) of Marlin tensors: qweight columns
    ``c * 16 // pf`` (tile ``T`` owns words ``T * 1024 // pf`` onward), scale columns ``c``
    (both scale maps permute within runs of 64 or 32 columns), zero columns ``c // pf`` (the
    8x8 transpose permutes within runs of 64)."""
    return (
        qweight[:, c0 * 16 // pf : c1 * 16 // pf],
        scales[:, c0:c1],
        qzeros[:, c0 // pf : c1 // pf],
    )


def columns_marlin(
    qweight: NDArray[np.int32],
    scales: NDArray[np.floating],
    qzeros: NDArray[np.int32],
    *,
    k: int,
    n: int,
    bits: int,
    group_size: int,
    start: int,
    stop: int,
) -> tuple[NDArray[np.int32], NDArray[np.floating], NDArray[np.int32]]:
    """Output columns ``start .. stop`` of a Marlin layer as a Marlin layer of its own (views):
    one part of a fused layer [LAY-11].  Equal to swizzling those columns of the unswizzled
    tensors, because every Marlin permutation stays within a run of 64 columns (a qweight
    tile, the grouped scale map, the zero points' transpose) or 32 (the channelwise scale
    map), and ``k`` is unchanged.  Raises CodecError: ``start`` and ``stop`` multiples of 64
    with ``0 <= start < stop <= n``, and the checks of the whole layer's tensors."""
    pf = _check_stored(qweight, scales, qzeros, k=k, n=n, bits=bits, group_size=group_size)
    if not (0 <= start < stop <= n and start % TILE_N == 0 and stop % TILE_N == 0):
        raise CodecError(RULE_COLUMNS, f"start = {start}, stop = {stop}, n = {n}")
    return _columns(qweight, scales, qzeros, start, stop, pf)


def _regroup_scales(ms: NDArray[np.floating]) -> NDArray[np.floating]:
    """Grouped-map scale rows -> channelwise-map scale rows (both maps are involutions)."""
    return _channel_map(_transpose8x8(ms))


def _check_shard(k_shard: int, n_shard: int, bits: int, group_size: int) -> None:
    try:
        validate_marlin(k_shard, n_shard, bits, group_size)
    except CodecError as err:
        raise CodecError(err.rule, f"shard (k = {k_shard}, n = {n_shard}): {err}") from err
