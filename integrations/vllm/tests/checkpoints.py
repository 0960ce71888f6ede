"""The tiny checkpoints the tests use: an AWQ v1 Llama from ``reference.examples`` (with q/k/v
biases, so the bias path is covered) and its servable AWQ-v2 folder made by
``python -m reference.convert SRC DST/`` [CONV-1]."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reference.examples import LlamaShape, write_checkpoint

SHAPE = LlamaShape(attention_bias=True)


def make(tmp: Path) -> tuple[Path, Path]:
    """(v1 folder, converted folder)."""
    v1 = write_checkpoint(tmp / "v1", SHAPE)
    served = tmp / "served"
    subprocess.run([sys.executable, "-m", "reference.convert", str(v1), f"{served}/", "--quiet"],
                   check=True)  # fmt: skip
    return v1, served


def awq_moe(fixture: Path, out: Path, seed: int = 7) -> Path:
    """An AutoAWQ GEMM MoE checkpoint (asymmetric, group size 128) with the architecture of
    the llm-compressor ``fixture`` (``tests/fixtures/breadth/qwen3_moe`` or ``mixtral``):
    every quantised layer replaced by random AutoAWQ tensors of the same shape
    (``reference.examples.quantised_layer``), every other tensor kept; ``config.json``'s
    ``quantization_config`` is AutoAWQ's, the routers left unquantised
    (``modules_to_not_convert``, read by vLLM's ``is_layer_skipped_awq``)."""
    import json
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    from reference.examples import quantised_layer

    out.mkdir(parents=True)
    shutil.copy(fixture / "generation_config.json", out / "generation_config.json")
    config = json.loads((fixture / "config.json").read_text())
    router = "block_sparse_moe.gate" if "mixtral" in config["model_type"] else "mlp.gate"
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                     "zero_point": True, "version": "gemm",
                                     "modules_to_not_convert": [router]}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2))
    rng = np.random.default_rng(seed)
    tensors = {}
    for name, array in load_file(str(fixture / "model.safetensors")).items():
        if name.endswith(".weight_packed"):
            prefix = name.removesuffix(".weight_packed")
            n, k = array.shape[0], array.shape[1] * 8
            for part, values in quantised_layer(rng, k, n, 4, 128).items():
                tensors[f"{prefix}.{part}"] = values
        elif not name.endswith((".weight_scale", ".weight_shape", ".weight_zero_point")):
            tensors[name] = array
    save_file(tensors, str(out / "model.safetensors"))
    return out
