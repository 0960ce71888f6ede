"""The plugin's call of vLLM's Marlin GEMM binds to the installed ``apply_gptq_marlin_linear``
(issue 37): vLLM 0.34 dropped its ``input_dtype`` parameter, which no CPU run of the kernel
would notice (the GEMM needs CUDA).  Every argument the plugin passes must be a parameter of
the installed function, and every parameter without a default must be passed."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch
from awq2_vllm.method import marlin_arguments


@pytest.mark.parametrize("symmetric", [False, True])
def test_the_kernel_call_binds_to_the_installed_signature(symmetric):
    from vllm.model_executor.layers.quantization.utils.marlin_utils import (
        apply_gptq_marlin_linear,
    )

    layer = SimpleNamespace(qweight=torch.empty(8, 64, dtype=torch.int32),
                            scales=torch.empty(1, 128, dtype=torch.float16),
                            qzeros=torch.empty(1, 16, dtype=torch.int32), awq2_n=128,
                            awq2_k=128, awq2_act_dtype=torch.float16)  # fmt: skip
    arguments = marlin_arguments(layer, torch.empty(2, 128), None, symmetric)
    signature = inspect.signature(apply_gptq_marlin_linear)
    bound = signature.bind(**arguments)  # raises TypeError on an unknown or missing argument
    required = {name for name, p in signature.parameters.items()
                if p.default is inspect.Parameter.empty}  # fmt: skip
    assert required <= set(bound.arguments), required - set(bound.arguments)
    assert ("input_dtype" in arguments) == ("input_dtype" in signature.parameters)
