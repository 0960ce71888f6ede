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
    eight in bits ``4t``, as an ``int32`` tensor."""
    if axis == 1:
        return torch.from_numpy(codec.ct_pack(np.ascontiguousarray(fields), BITS))
    words = codec.ct_pack(np.ascontiguousarray(fields.T), BITS)
    return torch.from_numpy(np.ascontiguousarray(words.T))


def plain_scales(scales: np.ndarray, k: int, group_size: int, dtype: str) -> torch.Tensor:
    """Marlin scales back to ``[G, n]``, as the stored ``dtype`` (``"F16"``, ``"BF16"``,
    ``"F32"``): the permutation moves bit patterns, nothing is computed on them (NumPy has no
    bfloat16; its bits travel as float16 ones)."""
    raw = raw_bits(scales)
    as_float = raw.view(np.float16 if raw.itemsize == 2 else np.float32)
    plain = np.ascontiguousarray(codec.unswizzle_scales(as_float, k, group_size))
    bits = torch.from_numpy(plain.view(np.int16 if raw.itemsize == 2 else np.int32))
    return bits.view(_TORCH[dtype])
