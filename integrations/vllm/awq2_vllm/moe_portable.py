"""``AWQv2PortableMoEMethod``: MoE experts [LAY-12] through torch's int4 GEMM
(:mod:`awq2_vllm.portable`), where vLLM's CPU build has no WNA16 MoE backend.

vLLM 0.32's CPU build serves 4-bit experts only through ``CPUExpertsInt4``
(``fused_moe/experts/cpu_moe.py``), which needs AMX tiles and takes symmetric experts; without
AMX, stock vLLM says "No WNA16 MoE backend supports the deployment configuration", and so did
the plugin (``MOE_UNSUPPORTED``).  This method computes the experts itself, with the kernel the
dense layers use there:

* ``create_weights`` makes per-expert buffers in torch's packed layout: ``w13_qweight uint8
  [E, 2 I, H // 2]`` (each expert's gate rows, then its up rows; ``I`` this rank's
  ``intermediate_size_per_partition``), ``w2_qweight uint8 [E, H, I // 2]``, and
  ``w13_scales_zeros [E, G13, 2 I, 2]`` / ``w2_scales_zeros [E, G2, H, 2]`` in the model dtype;
  the weights stay 4-bit in memory;
* :func:`awq2_vllm.moe.load_experts` fills them through :meth:`fill`, each expert's stored
  Marlin layers cut as vLLM cuts them (a rank set's already cut [SET-11]), unswizzled with the
  reference codec and packed per projection (torch's packing keeps rows apart: gate and up
  pack into their own rows of ``w13``);
* ``apply`` (vLLM's modular path: the runner has chosen ``topk_ids`` / ``topk_weights`` with
  the model's own router, runs shared experts and the tensor-parallel all-reduce itself) runs,
  for each expert with tokens, ``silu(x W_gate) * (x W_up)`` then ``W_down``, scaled by the
  routing weights and summed per token in float32.

Symmetric and asymmetric experts alike (a zero point is an offset, :func:`portable.for_torch`),
channelwise too (its scale repeated over groups of 128).  Only the gated SiLU activation
(Mixtral, Qwen-MoE, DeepSeek, ...) is served; another is refused naming it.
"""

from __future__ import annotations

from typing import Any

import torch
from vllm.model_executor.layers.fused_moe import FusedMoEMethodBase

from awq2_vllm.errors import PluginError
from awq2_vllm.portable import for_torch, group_for_torch, mm
from reference.quant import codec


class AWQv2PortableMoEMethod(FusedMoEMethodBase):
    """4-bit experts through torch's int4 GEMM, one expert at a time."""

    def __init__(self, experts: Any, bits: int, group_size: int, moe: Any, prefix: str,
                 why: str) -> None:  # fmt: skip
        super().__init__(moe)
        self.experts = experts
        self.group_size = group_size
        self.prefix = prefix
        #: Why vLLM's own MoE method does not serve these experts here (the log line).
        self.why = why
        self.groups = {"w13": 0, "w2": 0}

    def create_weights(self, layer: torch.nn.Module, num_experts: int, hidden_size: int,
                       intermediate_size_per_partition: int, params_dtype: torch.dtype,
                       **extra_weight_attrs: Any) -> None:  # fmt: skip
        e, h, i = num_experts, hidden_size, intermediate_size_per_partition
        for name, k in (("w13", h), ("w2", i)):
            group = group_for_torch(self.group_size, k)
            if group is None or k % 2:
                raise PluginError("MOE_UNSUPPORTED", self.prefix, "experts torch's int4 GEMM "
                                  "takes (group size 32, 64, 128, 256 dividing k, or -1 with "
                                  "k % 128 == 0)", f"group size {self.group_size}, k = {k} "
                                  f"for {name}")  # fmt: skip
            self.groups[name] = group
        buffers = {
            "w13_qweight": torch.zeros(e, 2 * i, h // 2, dtype=torch.uint8),
            "w2_qweight": torch.zeros(e, h, i // 2, dtype=torch.uint8),
            "w13_scales_zeros": torch.zeros(e, h // self.groups["w13"], 2 * i, 2,
                                            dtype=params_dtype),
            "w2_scales_zeros": torch.zeros(e, i // self.groups["w2"], h, 2, dtype=params_dtype),
        }  # fmt: skip
        for name, data in buffers.items():
            layer.register_parameter(name, torch.nn.Parameter(data, requires_grad=False))
        self.dtype = params_dtype

    def fill(self, module: Any, e: int, role: int, row0: int, layer: Any, where: str) -> None:
        """Expert ``e``'s projection ``role`` (0 gate, 1 up: rows ``row0 ..`` of w13; 2 down:
        w2), this rank's piece ``layer``, in torch's packed layout."""
        from awq2_vllm.moe import _scales

        codes = codec.unswizzle_qweight(layer.qweight, layer.k, layer.n, layer.bits)  # [k, n]
        zeros = codec.unswizzle_zeros(layer.qzeros, layer.n, layer.bits)  # [G, n]
        packed, scales_and_zeros, _ = for_torch(
            torch.from_numpy(codes.T.astype("int32")), _scales(layer),
            torch.from_numpy(zeros.astype("int32")), layer.group_size, self.dtype)  # fmt: skip
        target = "w2" if role == 2 else "w13"
        rows = slice(None) if role == 2 else slice(row0, row0 + layer.n)
        weights = getattr(module, f"{target}_qweight").data[e, rows]
        offsets = getattr(module, f"{target}_scales_zeros").data[e, :, rows]
        for buffer, values in ((weights, packed), (offsets, scales_and_zeros)):
            if tuple(buffer.shape) != tuple(values.shape):
                raise PluginError("SHAPE_MISMATCH", where, f"the buffer's {tuple(buffer.shape)}",
                                  tuple(values.shape))  # fmt: skip
            buffer.copy_(values)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        activation = getattr(layer, "activation", None)
        name = str(getattr(activation, "value", activation)).lower()
        if name != "silu":
            raise PluginError("MOE_UNSUPPORTED", self.prefix, "gated SiLU experts (torch's "
                              "int4 GEMM path)", f"activation {name}")  # fmt: skip

    def get_fused_moe_quant_config(self, layer: torch.nn.Module) -> Any:
        return None  # no modular kernel: apply computes the experts itself

    def apply(self, layer: Any, x: torch.Tensor, topk_weights: torch.Tensor,
              topk_ids: torch.Tensor, shared_experts: Any,
              shared_experts_input: Any) -> torch.Tensor:  # fmt: skip
        tokens, top = topk_ids.shape
        inter = layer.w2_qweight.shape[2] * 2
        out = torch.zeros(x.shape[0], layer.w2_qweight.shape[1], dtype=torch.float32)
        flat_ids = topk_ids.reshape(-1)
        flat_weights = topk_weights.reshape(-1, 1).float()
        owner = torch.arange(tokens, device=x.device).repeat_interleave(top)
        on_input = bool(getattr(layer, "apply_router_weight_on_input", False))
        expert_map = getattr(layer, "expert_map", None)
        for expert in torch.unique(flat_ids).tolist():
            local = int(expert_map[expert]) if expert_map is not None else expert
            if local < 0:
                continue  # another rank's expert (expert parallelism is refused at load)
            picks = (flat_ids == expert).nonzero().squeeze(1)
            rows = owner[picks]
            xs = x[rows]
            if on_input:
                xs = (xs.float() * flat_weights[picks]).to(x.dtype)
            h = mm(xs, layer.w13_qweight[local], self.groups["w13"], layer.w13_scales_zeros[local])
            a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
            y = mm(a, layer.w2_qweight[local], self.groups["w2"], layer.w2_scales_zeros[local])
            y = y.float() if on_input else y.float() * flat_weights[picks]
            out.index_add_(0, rows, y)
        return out.to(x.dtype)
