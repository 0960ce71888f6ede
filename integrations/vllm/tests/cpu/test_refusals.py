"""What vLLM's CPU build is refused, with the plugin's code and both sides named, before any
model is built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from serving import convert

from reference.examples import LlamaShape, write_checkpoint

START = """
import sys
from vllm import LLM
LLM(model=sys.argv[1], quantization="awq_v2", load_format="awq_v2", dtype="float16",
    enforce_eager=True, max_model_len=128, skip_tokenizer_init=True,
    tensor_parallel_size=int(sys.argv[2]))
"""


def _start(model, tp=1):
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run([sys.executable, "-c", START, str(model), str(tp)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_a_rank_set_cut_for_another_tp_size_is_refused_naming_both(tmp_path):
    v1 = write_checkpoint(tmp_path / "v1", LlamaShape())
    ranked = convert(v1, tmp_path / "tp2", "--tp", "2")
    code, log = _start(ranked, tp=1)
    assert code != 0
    assert "[TP_MISMATCH]" in log, log[-3000:]
    line = next(x for x in log.splitlines() if "[TP_MISMATCH]" in x)
    assert "tensor_parallel_size 1" in line and "tp_size 2" in line, line
    assert "awq2_vllm: TP rank" not in log  # nothing was read


def test_a_folder_without_weights_is_refused_at_configuration(tmp_path):
    v1 = write_checkpoint(tmp_path / "v1", LlamaShape())
    served = convert(v1, tmp_path / "served")
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(served / "config.json", empty / "config.json")
    assert json.loads((empty / "config.json").read_text())["quantization_config"][
        "quant_method"] == "awq_v2"  # fmt: skip
    code, log = _start(empty)
    assert code != 0
    line = next((x for x in log.splitlines() if "[NO_WEIGHTS]" in x), None)
    assert line is not None and str(empty) in line, log[-3000:]
    assert "Starting to load model" not in log  # refused while the engine is configured


def _asymmetric_moe(fixture, out):
    """The symmetric MoE fixture made asymmetric as compressed-tensors writes it: ``symmetric:
    false`` and a ``weight_zero_point`` (``int32 [n // 8, G]``, packed along n) beside every
    packed weight, every zero point 8 but one of expert 0's gate."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    out.mkdir(parents=True)
    shutil.copy(fixture / "generation_config.json", out / "generation_config.json")
    config = json.loads((fixture / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = False
    (out / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(fixture / "model.safetensors"))
    for name in [k for k in tensors if k.endswith(".weight_packed")]:
        prefix = name.removesuffix(".weight_packed")
        n, groups = tensors[f"{prefix}.weight_scale"].shape
        zeros = np.full((n // 8, groups), 0x88888888, dtype=np.uint32)
        if prefix.endswith("layers.0.mlp.experts.0.gate_proj"):
            zeros[0, 0] = 0x88888887
        tensors[f"{prefix}.weight_zero_point"] = zeros.view(np.int32)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def test_asymmetric_moe_experts_are_refused_as_stock_fails_on_them(tmp_path):
    """[LAY-12] vLLM's CPU build has no WNA16 MoE backend for experts with zero points (its
    ``CPUExpertsInt4`` takes symmetric int4 only: ``fused_moe/experts/cpu_moe.py``); stock
    fails to build such a model, and the plugin refuses it naming the module and why."""
    from serving import CHECKOUT

    src = _asymmetric_moe(CHECKOUT / "tests" / "fixtures" / "breadth" / "qwen3_moe",
                          tmp_path / "src")  # fmt: skip
    served = convert(src, tmp_path / "served")
    stock = subprocess.run([sys.executable, "-c", START.replace(
        'quantization="awq_v2", load_format="awq_v2", ', ""), str(src), "1"],
        env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"},
        capture_output=True, text=True, timeout=300)  # fmt: skip
    assert stock.returncode != 0
    assert "No WNA16 MoE backend" in stock.stdout + stock.stderr, (stock.stderr)[-3000:]
    code, log = _start(served)
    assert code != 0
    line = next((x for x in log.splitlines() if "[MOE_UNSUPPORTED]" in x), None)
    assert line is not None, log[-3000:]
    assert "model.layers.0.mlp.experts" in line and "asymmetric" in line, line
