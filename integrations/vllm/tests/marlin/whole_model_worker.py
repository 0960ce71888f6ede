"""The whole tiny Llama through vLLM: ``python whole_model_worker.py V1 SERVED OUT``.

``EngineArgs(quantization="awq_v2", load_format="awq_v2").create_engine_config()`` then the
registered loader's ``load_model`` (``base_loader.py:63``) builds vLLM's
``LlamaForCausalLM`` on the CPU and loads it from the served folder.  Every quantised module
is compared with vLLM's own AWQ path for the v1 checkpoint (tests/awq_reference.py), every
unquantised parameter with the v1 tensor of the same name; rows go to OUT as JSON."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).parent))

import awq_reference
import torch


def main() -> None:
    import vllm.plugins
    from safetensors.torch import load_file
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model_loader

    v1, served, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    vllm.plugins.load_general_plugins()
    args = EngineArgs(model=str(served), quantization="awq_v2", load_format="awq_v2",
                      dtype="float16", enforce_eager=True, max_model_len=256)  # fmt: skip
    cfg = args.create_engine_config()
    rows = []
    with set_current_vllm_config(cfg):
        awq_reference.init_distributed(0, 1, awq_reference.ports() + 11)
        model = get_model_loader(cfg.load_config).load_model(cfg, cfg.model_config)
        modules = dict(model.named_modules())
        names = {"qkv": "self_attn.qkv_proj", "gate_up": "mlp.gate_up_proj",
                 "o": "self_attn.o_proj", "down": "mlp.down_proj"}  # fmt: skip
        for i in range(cfg.model_config.hf_config.num_hidden_layers):
            for kind, name in names.items():
                got = modules[f"model.layers.{i}.{name}"]
                ref = awq_reference.reference_awq_layer(kind, v1, i)
                for param, equal, where in awq_reference.compare(got, ref):
                    rows.append([i, kind, param, equal, where])
        plain = load_file(str(v1 / "model.safetensors"))
        for name, param in model.named_parameters():
            if name in plain and name.rpartition(".")[2] not in ("qweight", "scales", "qzeros"):
                rows.append([-1, "dense", name, bool(torch.equal(param.data, plain[name])), ""])
    out.write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
