"""A stored Marlin layer back in the plain orders vLLM's other methods take: the CPU WNA16
kernel's input (``cpu.py``) and the MoE methods' checkpoint buffers (``moe.py``).

Each is the reference codec's exact inverse of what the converter stored
(``unswizzle_qweight``, ``unswizzle_zeros``, ``unswizzle_scales``), packed with
compressed-tensors' sequential order (``codec.ct_pack``: field ``i`` of a word in bits
``4i``) where a method takes packed codes in that order."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from reference.quant import codec
from reference.quant.dtypes import raw_bits

BITS = 4
PACK = 8  # 4-bit fields per int32 word
#: A 32-bit word of eight 4-bit zero points, every one 8 (the same under any nibble order).
ALL_EIGHTS = -2004318072  # 0x88888888 as int32
_TORCH = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}


def is_symmetric(qzeros: Any) -> bool:
    """Whether every stored zero point is 8: a symmetric layer (vLLM's ``uint4b8``) [CT-1]; the
    file does not record symmetry, and a word of eights is one under any permutation."""
    if isinstance(qzeros, torch.Tensor):
        return bool(torch.all(qzeros == ALL_EIGHTS))
    return bool(np.all(np.asarray(qzeros) == ALL_EIGHTS))


def packed_along(fields: np.ndarray, axis: int) -> torch.Tensor:
    """4-bit ``fields`` (2-D) packed eight to a word along ``axis``, value ``t`` of a run of
    eight in bits ``4t``, as an ``int32`` tensor.  Along the rows (``axis=0``, the CPU
    kernel's ``qweight``: word ``(i, j)`` holds rows ``8i .. 8i + 7`` of column ``j``) the
    eight rows of a run are shifted and merged whole, row block by row block, with no
    transposed copy of the layer: the same words as ``codec.ct_pack`` of the transpose,
    transposed back (``tests/cpu/test_generate.py`` compares the kernel's tensors with
    vLLM's own path)."""
    if axis == 1:
        return torch.from_numpy(codec.ct_pack(np.ascontiguousarray(fields), BITS))
    rows, cols = fields.shape
    if rows % PACK or fields.dtype != np.uint8 or (fields.size and int(fields.max()) > 15):
        words = codec.ct_pack(np.ascontiguousarray(fields.T), BITS)  # refuses what is not codes
        return torch.from_numpy(np.ascontiguousarray(words.T))
    runs = fields.reshape(rows // PACK, PACK, cols)
    words = runs[:, 0, :].astype(np.uint32)
    shifted = np.empty_like(words)
    for t in range(1, PACK):
        np.left_shift(runs[:, t, :], BITS * t, out=shifted, dtype=np.uint32)
        np.bitwise_or(words, shifted, out=words)
    return torch.from_numpy(words.view(np.int32))


def plain_scales(scales: np.ndarray, k: int, group_size: int, dtype: str) -> torch.Tensor:
    """Marlin scales back to ``[G, n]``, as the stored ``dtype`` (``"F16"``, ``"BF16"``,
    ``"F32"``): the permutation moves bit patterns, nothing is computed on them (NumPy has no
    bfloat16; its bits travel as float16 ones)."""
    raw = raw_bits(scales)
    as_float = raw.view(np.float16 if raw.itemsize == 2 else np.float32)
    plain = np.ascontiguousarray(codec.unswizzle_scales(as_float, k, group_size))
    bits = torch.from_numpy(plain.view(np.int16 if raw.itemsize == 2 else np.int32))
    return bits.view(_TORCH[dtype])
