"""``AWQv2LinearMethod``: Marlin-shaped parameters, no repack, vLLM 0.33's Marlin GEMM.

What vLLM 0.33.0's own AWQ path holds after loading, read in its installed code, and what
this method creates instead (same shapes, dtypes and bytes; the file already holds them):

* ``AutoAWQMarlinLinearMethod.create_weights`` (``auto_awq.py:418``) makes AWQ v1-shaped
  ``qweight`` / ``qzeros`` / ``scales``; ``process_weights_after_loading`` (line 506)
  converts them to the GPTQ order (``_convert_awq_to_standard_format``, line 92) and hands
  them to ``MarlinLinearKernel.process_weights_after_loading``
  (``vllm/model_executor/kernels/linear/mixed_precision/marlin.py:74``): ``gptq_marlin_repack``
  of the weight (line 101), ``marlin_permute_scales`` (line 115, with the partition's k,
  ``utils/marlin_utils.py:524``), ``marlin_zero_points`` of the unpacked zero points
  (line 151, ``marlin_utils.py:566``) and ``marlin_permute_bias`` of the bias (line 177,
  ``marlin_utils.py:537``).  Here ``qweight`` is created ``int32 [k // 16, n * 16 // pf]``,
  ``scales`` ``[G, n]`` in the model dtype, ``qzeros`` ``int32 [G, n // pf]``, filled by
  :mod:`awq2_vllm.loader` from the file; ``process_weights_after_loading`` only permutes the
  bias (the file keeps it plain [LAY-10]).
* ``apply`` calls ``apply_gptq_marlin_linear`` (``marlin_utils.py:752``) exactly as
  ``MarlinLinearKernel.apply_weights`` does (marlin.py:189): ``workspace=None`` (0.33 has no
  ``marlin_make_workspace``; ``_marlin_gemm``, marlin_utils.py:440, takes the stream's
  workspace from ``get_marlin_workspace``, line 418), no ``g_idx`` argument (0.33 has none),
  ``wtype`` ``uint4`` (AWQ is asymmetric: zero points).  The GEMM needs a CUDA GPU; it is not
  run by this package's tests.
* The parameter classes are vLLM's (``vllm/model_executor/parameter.py``):
  ``PackedvLLMParameter`` with ``marlin_tile_size=16`` (line 342; its shard offsets scale by
  the tile, line 586) for ``qweight``, ``GroupQuantScaleParameter`` (line 237) for ``scales``,
  ``PackedvLLMParameter`` for ``qzeros``, so vLLM's weight loaders could slice whole-layer
  Marlin tensors too; the plugin's loader writes them itself (:mod:`awq2_vllm.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from vllm.model_executor.layers.linear import (
    LinearMethodBase,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from vllm.model_executor.layers.quantization.utils.marlin_utils import (
    apply_gptq_marlin_linear,
    marlin_permute_bias,
)
from vllm.model_executor.parameter import GroupQuantScaleParameter, PackedvLLMParameter
from vllm.scalar_type import scalar_types

from awq2_vllm.errors import PluginError
from reference.layers import Parallel
from spec.marlin import pack_factor

MARLIN_TILE = 16  # rows of k per Marlin qweight row (spec: Marlin qweight)


@dataclass(frozen=True)
class Part:
    """One stored layer that fills columns ``offset .. offset + n`` of a vLLM module, as the
    shard ``rank`` of ``count`` (``parallel`` None when whole)."""

    prefix: str
    offset: int
    n: int
    rank: int
    count: int
    parallel: Parallel | None


def plan(layer: Any, parts: list[str]) -> list[Part]:
    """Which shard of which stored layer fills which columns of ``layer`` on this rank, the way
    vLLM's own weight loaders cut AWQ tensors (``linear.py``: ``QKVParallelLinear`` shard
    offsets line 1101, kv heads replicated when tp >= kv heads, line 1068)."""
    rank, size = getattr(layer, "tp_rank", 0), getattr(layer, "tp_size", 1)
    if isinstance(layer, RowParallelLinear):
        return [Part(parts[0], 0, layer.output_size_per_partition, rank, size,
                     "row" if size > 1 else None)]  # fmt: skip
    if isinstance(layer, QKVParallelLinear):
        reps = layer.num_kv_head_replicas
        sizes = [layer.num_heads * layer.head_size, layer.num_kv_heads * layer.head_size,
                 layer.num_kv_heads * layer.v_head_size]  # fmt: skip
        shards = [(rank, size), (rank // reps, size // reps), (rank // reps, size // reps)]
    elif isinstance(layer, MergedColumnParallelLinear):
        sizes = [s // size for s in layer.output_sizes]
        shards = [(rank, size)] * len(sizes)
    else:
        sizes = [layer.output_size_per_partition]
        shards = [(rank, size)]
    if len(parts) != len(sizes):
        raise PluginError("PART_MISSING", parts[0], f"{len(sizes)} stored parts", len(parts))
    out, offset = [], 0
    for prefix, n, (r, c) in zip(parts, sizes, shards, strict=True):
        out.append(Part(prefix, offset, n, r, c, "column" if c > 1 else None))
        offset += n
    return out


class AWQv2LinearMethod(LinearMethodBase):
    """A linear layer whose stored parts are MARLIN_* entries of 4-bit codes."""

    def __init__(self, config: Any, prefix: str, parts: list[str]) -> None:
        self.config = config
        self.prefix = prefix
        self.parts = parts
        self.bits = 4
        self.group_size = config.group_size_of(parts[0])
        for part in parts[1:]:
            if config.group_size_of(part) != self.group_size:
                raise PluginError("GROUP_SIZE_MIXED", prefix, "one group size for the parts",
                                  [config.group_size_of(p) for p in parts])  # fmt: skip

    def create_weights(
        self,
        layer: torch.nn.Module,
        input_size_per_partition: int,
        output_partition_sizes: list[int],
        input_size: int,
        output_size: int,
        params_dtype: torch.dtype,
        **extra_weight_attrs: Any,
    ) -> None:
        k, n = input_size_per_partition, sum(output_partition_sizes)
        gs, pf = self.group_size, pack_factor(self.bits)
        self._check_shard(k, output_partition_sizes)
        groups = 1 if gs == -1 else k // gs
        loader = extra_weight_attrs.get("weight_loader")
        qweight = PackedvLLMParameter(
            data=torch.empty(k // MARLIN_TILE, n * MARLIN_TILE // pf, dtype=torch.int32),
            input_dim=0, output_dim=1, packed_dim=1, packed_factor=pf,
            marlin_tile_size=MARLIN_TILE, weight_loader=loader,
        )  # fmt: skip
        scales = GroupQuantScaleParameter(
            data=torch.empty(groups, n, dtype=params_dtype),
            input_dim=0, output_dim=1, weight_loader=loader,
        )  # fmt: skip
        qzeros = PackedvLLMParameter(
            data=torch.empty(groups, n // pf, dtype=torch.int32),
            input_dim=0, output_dim=1, packed_dim=1, packed_factor=pf, weight_loader=loader,
        )  # fmt: skip
        layer.register_parameter("qweight", qweight)
        layer.register_parameter("scales", scales)
        layer.register_parameter("qzeros", qzeros)
        layer.awq2_k, layer.awq2_n = k, n

    def _check_shard(self, k: int, sizes: list[int]) -> None:
        """Marlin's rules on this rank's shard (spec: Tensor-parallel slicing)."""
        gs = self.group_size
        ok = k % 128 == 0 and all(s % 64 == 0 for s in sizes) and (gs == -1 or k % gs == 0)
        if not ok:
            raise PluginError("SHARD_UNSUPPORTED", self.prefix,
                              "k % 128 == 0, every part's n % 64 == 0, group_size divides k",
                              f"k = {k}, n parts = {sizes}, group_size = {gs}")  # fmt: skip

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        """No repack: the file holds Marlin's bytes.  Only the bias is permuted, as
        MarlinLinearKernel does (marlin.py:176)."""
        bias = getattr(layer, "bias", None)
        if bias is not None:
            bias.data = marlin_permute_bias(bias.data)

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        return apply_gptq_marlin_linear(
            input=x,
            weight=layer.qweight,
            weight_scale=layer.scales,
            weight_zp=layer.qzeros,
            workspace=None,
            wtype=scalar_types.uint4,
            output_size_per_partition=layer.awq2_n,
            input_size_per_partition=layer.awq2_k,
            bias=bias,
        )
