"""Beside vLLM 0.33 the plugin leaves stock models alone: with its entry point loaded, an
unquantised Llama is configured and loaded by vLLM's default loader as without the plugin
(every parameter the checkpoint's tensor).  vLLM 0.33's CUDA build cannot generate on a CPU,
so this is the whole-model load; ``tests/cpu/test_host.py`` runs a stock model beside an
unsupported vLLM, and ``tests/cpu/test_generate.py`` beside 0.32."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from safetensors.torch import save_file

WORKER = r"""
import json, sys
import awq_reference, torch
import vllm.plugins
from safetensors.torch import load_file
from vllm.config import set_current_vllm_config
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.layers import quantization as q
from vllm.model_executor.model_loader import get_model_loader

vllm.plugins.load_general_plugins()
cfg = EngineArgs(model=sys.argv[1], dtype="float16", enforce_eager=True,
                 max_model_len=128).create_engine_config()
with set_current_vllm_config(cfg):
    awq_reference.init_distributed(0, 1, awq_reference.ports() + 41)
    model = get_model_loader(cfg.load_config).load_model(cfg, cfg.model_config)
plain = load_file(sys.argv[1] + "/model.safetensors")
params = dict(model.named_parameters())
print(json.dumps({
    "registered": "awq_v2" in q.QUANTIZATION_METHODS,
    "quantization": cfg.model_config.quantization,
    "loader": type(get_model_loader(cfg.load_config)).__name__,
    "embed": bool(torch.equal(params["model.embed_tokens.weight"],
                              plain["model.embed_tokens.weight"])),
    "lm_head": bool(torch.equal(params["lm_head.weight"], plain["lm_head.weight"])),
}))
"""


def _dense_llama(folder):
    h, inter, layers, heads, kv, vocab = 128, 256, 2, 4, 2, 256
    head = h // heads
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(torch.float16)

    tensors = {"model.embed_tokens.weight": rand(vocab, h), "lm_head.weight": rand(vocab, h),
               "model.norm.weight": torch.ones(h, dtype=torch.float16)}  # fmt: skip
    for i in range(layers):
        p = f"model.layers.{i}"
        tensors.update({
            f"{p}.input_layernorm.weight": torch.ones(h, dtype=torch.float16),
            f"{p}.post_attention_layernorm.weight": torch.ones(h, dtype=torch.float16),
            f"{p}.self_attn.q_proj.weight": rand(heads * head, h),
            f"{p}.self_attn.k_proj.weight": rand(kv * head, h),
            f"{p}.self_attn.v_proj.weight": rand(kv * head, h),
            f"{p}.self_attn.o_proj.weight": rand(h, heads * head),
            f"{p}.mlp.gate_proj.weight": rand(inter, h),
            f"{p}.mlp.up_proj.weight": rand(inter, h),
            f"{p}.mlp.down_proj.weight": rand(h, inter),
        })  # fmt: skip
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
              "intermediate_size": inter, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": vocab,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "torch_dtype": "float16",
              "tie_word_embeddings": False}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_stock_model_loads_as_without_the_plugin(tmp_path):
    from pathlib import Path

    model = _dense_llama(tmp_path / "dense")
    done = subprocess.run([sys.executable, "-c", WORKER, str(model)], capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).parent)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {"registered": True, "quantization": None, "loader": "DefaultModelLoader",
                   "embed": True, "lm_head": True}  # fmt: skip
