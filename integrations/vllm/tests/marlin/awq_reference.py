"""vLLM 0.33's layers on the CPU, and what vLLM's own AWQ path holds after loading.

``reference_awq_layer`` builds a layer with vLLM's ``AutoAWQConfig``, loads the AWQ v1
tensors through the layer's own weight loaders (vLLM's TP slicing and merged shards), then
runs vLLM's own ``AutoAWQMarlinLinearMethod`` post-processing: ``_convert_awq_to_standard_format``
(``auto_awq.py:92``) and ``MarlinLinearKernel.process_weights_after_loading``
(``kernels/linear/mixed_precision/marlin.py:74``), with the one CUDA-only op,
``ops.gptq_marlin_repack`` (marlin.py:101), replaced by vLLM's CPU reference of the same
repack: ``marlin_weights`` with ``get_weight_perm`` (``utils/marlin_utils_test.py:53, 72``),
which vLLM's kernel tests compare with the CUDA repack.  Everything else (scales, zero
points, bias, padding decisions) is vLLM's own code, run as is.

The plugin's Marlin path is forced on the CPU platform with ``AWQ2_VLLM_KERNEL=marlin``
(``marlin/conftest.py``).  On the CPU platform ``AutoAWQConfig.get_quant_method`` still returns
``AutoAWQMarlinLinearMethod`` (``auto_awq.py:307``), whose kernel is the CPU one; the
``MarlinLinearKernel`` is built here with the same ``MPLinearLayerConfig``.  Its
``can_implement`` says no off CUDA, but ``MPLinearKernel.__init__`` only asserts the returned
tuple (``MPLinearKernel.py:51``), which is always true, so it can be built on the CPU.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

LINEAR_KINDS = ("qkv", "gate_up", "o", "down")
MAPPING = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}


def init_distributed(rank: int = 0, world: int = 1, port: int = 29533) -> None:
    """vLLM's process groups on gloo (``init_distributed_environment``,
    ``initialize_model_parallel``), tensor parallel over ``world`` ranks."""
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )

    if model_parallel_is_initialized():
        return
    init_distributed_environment(world_size=world, rank=rank, local_rank=rank,
                                 distributed_init_method=f"tcp://127.0.0.1:{port}",
                                 backend="gloo")  # fmt: skip
    initialize_model_parallel(tensor_model_parallel_size=world)


@contextlib.contextmanager
def vllm_context():
    from vllm.config import VllmConfig, set_current_vllm_config

    with set_current_vllm_config(VllmConfig()):
        yield


def build(kind: str, shape: dict[str, Any], quant_config: Any, layer: int = 0) -> Any:
    """vLLM's module for one of the four linear kinds of a Llama decoder layer."""
    from vllm.model_executor.layers.linear import (
        MergedColumnParallelLinear,
        QKVParallelLinear,
        RowParallelLinear,
    )

    h, inter = shape["hidden_size"], shape["intermediate_size"]
    heads, kv = shape["num_attention_heads"], shape["num_key_value_heads"]
    bias = bool(shape.get("attention_bias"))
    attn, mlp = f"model.layers.{layer}.self_attn", f"model.layers.{layer}.mlp"
    dt = getattr(torch, os.environ.get("AWQ2_TEST_DTYPE", "float16"))
    if kind == "qkv":
        return QKVParallelLinear(h, h // heads, heads, kv, bias=bias, params_dtype=dt,
                                 quant_config=quant_config, prefix=f"{attn}.qkv_proj")  # fmt: skip
    if kind == "gate_up":
        return MergedColumnParallelLinear(
            h, [inter, inter], bias=False, params_dtype=dt, quant_config=quant_config,
            prefix=f"{mlp}.gate_up_proj",
        )  # fmt: skip
    if kind == "o":
        return RowParallelLinear(h, h, bias=False, params_dtype=dt, quant_config=quant_config,
                                 prefix=f"{attn}.o_proj")  # fmt: skip
    return RowParallelLinear(inter, h, bias=False, params_dtype=dt, quant_config=quant_config,
                             prefix=f"{mlp}.down_proj")  # fmt: skip


def stored_parts(kind: str, layer: int = 0) -> list[tuple[str, Any]]:
    """(file prefix, vLLM shard id) of each stored part of a kind."""
    attn, mlp = f"model.layers.{layer}.self_attn", f"model.layers.{layer}.mlp"
    return {
        "qkv": [(f"{attn}.q_proj", "q"), (f"{attn}.k_proj", "k"), (f"{attn}.v_proj", "v")],
        "gate_up": [(f"{mlp}.gate_proj", 0), (f"{mlp}.up_proj", 1)],
        "o": [(f"{attn}.o_proj", None)],
        "down": [(f"{mlp}.down_proj", None)],
    }[kind]


def _cpu_gptq_marlin_repack(b_q_weight, size_k, size_n, num_bits, is_a_8bit=False):
    """``ops.gptq_marlin_repack`` on the CPU: unpack the GPTQ rows (``pack_rows`` order,
    ``quant_utils.py:819``: value ``i`` of a word in bits ``num_bits * i``) and hand the codes
    to vLLM's reference ``marlin_weights``."""
    from vllm.model_executor.layers.quantization.utils.marlin_utils_test import (
        get_weight_perm,
        marlin_weights,
    )

    pf = 32 // num_bits
    shifts = torch.arange(0, 32, num_bits, dtype=torch.int32)
    q = (b_q_weight.unsqueeze(1) >> shifts[None, :, None]) & ((1 << num_bits) - 1)
    q = q.reshape(size_k, size_n)
    assert q.shape[0] == b_q_weight.shape[0] * pf
    if "is_a_8bit" not in inspect.signature(get_weight_perm).parameters:
        # vLLM 0.34 removed 8-bit activations, and the argument with them
        assert not is_a_8bit
        return marlin_weights(q, size_k, size_n, num_bits, get_weight_perm(num_bits))
    return marlin_weights(q, size_k, size_n, num_bits, get_weight_perm(num_bits, is_a_8bit),
                          is_a_8bit=is_a_8bit)  # fmt: skip


def reference_awq_layer(kind: str, v1_folder: Path, layer_index: int = 0) -> Any:
    """The layer as vLLM 0.33's own AWQ path holds it after process_weights_after_loading."""
    from vllm import _custom_ops as ops
    from vllm.model_executor.kernels.linear.mixed_precision.marlin import MarlinLinearKernel
    from vllm.model_executor.layers.quantization.auto_awq import (
        AutoAWQConfig,
        _convert_awq_to_standard_format,
    )

    config = json.loads((v1_folder / "config.json").read_text())
    quant = AutoAWQConfig.from_config(config["quantization_config"])
    quant.packed_modules_mapping = dict(MAPPING)
    module = build(kind, config, quant, layer_index)
    tensors = load_file(str(v1_folder / "model.safetensors"))
    for prefix, shard in stored_parts(kind, layer_index):
        for name in ("qweight", "qzeros", "scales", "bias"):
            param = getattr(module, name, None)
            key = f"{prefix}.{name}"
            if param is None or key not in tensors:
                continue
            if shard is None:
                param.weight_loader(param, tensors[key])
            else:
                param.weight_loader(param, tensors[key], shard)
    _convert_awq_to_standard_format(module, "qweight", "qzeros", 4)
    kernel = MarlinLinearKernel(module.quant_method.kernel.config, w_q_param_name="qweight",
                                w_s_param_name="scales", w_zp_param_name="qzeros")  # fmt: skip
    real = ops.gptq_marlin_repack
    ops.gptq_marlin_repack = _cpu_gptq_marlin_repack
    try:
        kernel.process_weights_after_loading(module)
    finally:
        ops.gptq_marlin_repack = real
    return module


def plugin_layer(kind: str, folder: Path, layer_index: int = 0) -> Any:
    """The layer built with the plugin's method and filled by the plugin's loader code, as the
    worker of this process's tensor-parallel rank reads the folder (one file, or this rank's
    members of a rank set)."""
    from awq2_vllm.config import AWQv2Config
    from awq2_vllm.loader import load_layer, open_source

    config = json.loads((folder / "config.json").read_text())
    quant = AWQv2Config.from_config(config["quantization_config"])
    quant.packed_modules_mapping = dict(MAPPING)
    quant.maybe_update_config(str(folder))
    module = build(kind, config, quant, layer_index)
    source = open_source(folder, module.tp_rank, module.tp_size)
    try:
        load_layer(module, source)
    finally:
        source.close()
    module.quant_method.process_weights_after_loading(module)
    module.awq2_report = source.report()
    return module


def compare(plugin: Any, reference: Any) -> list[tuple[str, bool, str]]:
    """(parameter, equal bit for bit, where the first difference is) for every parameter of
    the reference layer that the kernel reads."""
    out = []
    for name in ("qweight", "scales", "qzeros", "bias"):
        ref = getattr(reference, name, None)
        if ref is None:
            continue
        got = getattr(plugin, name)
        a, b = _bits(got.data), _bits(ref.data)
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(
                (
                    name,
                    False,
                    f"shape/dtype {tuple(a.shape)} {a.dtype} != {tuple(b.shape)} {b.dtype}",
                )
            )
            continue
        diff = (a != b).nonzero()
        where = (
            ""
            if len(diff) == 0
            else f"first at {tuple(diff[0].tolist())}: "
            f"{int(a[tuple(diff[0])]):#x} != {int(b[tuple(diff[0])]):#x}"
        )
        out.append((name, len(diff) == 0, where))
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def ports() -> int:
    return 29500 + os.getpid() % 400
