"""Deterministic AutoAWQ-format example checkpoints (AWQ v1), for tests, docs and benchmarks.

``python -m reference.examples OUT [--shards N] [--layers L] [--hidden H] ...`` writes a
folder exactly as AutoAWQ's ``save_quantized`` lays out a Llama checkpoint: tensor names
(``model.layers.N.self_attn.q_proj.qweight`` ...), dtypes (int32 ``qweight``/``qzeros``,
fp16 ``scales`` and unquantised weights), GEMM packing (:func:`reference.quant.codec.awq_pack`),
``config.json`` with ``quantization_config``, and, with ``--shards``, the
``model-0000i-of-0000N.safetensors`` files plus ``model.safetensors.index.json``.
The random codes come from ``numpy.random.default_rng(seed)``, so the bytes are
the same on every run.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from reference.quant import codec

LINEARS = (
    ("self_attn", "q_proj", "hidden", "q"),
    ("self_attn", "k_proj", "hidden", "kv"),
    ("self_attn", "v_proj", "hidden", "kv"),
    ("self_attn", "o_proj", "q", "hidden"),
    ("mlp", "gate_proj", "hidden", "intermediate"),
    ("mlp", "up_proj", "hidden", "intermediate"),
    ("mlp", "down_proj", "intermediate", "hidden"),
)


@dataclass(frozen=True)
class LlamaShape:
    """Dimensions of a Llama-style decoder (defaults: the tiny two-layer example)."""

    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    vocab_size: int = 512
    bits: int = 4
    group_size: int = 128
    attention_bias: bool = False
    seed: int = 0

    def dim(self, which: str) -> int:
        head = self.hidden_size // self.num_attention_heads
        return {
            "hidden": self.hidden_size,
            "intermediate": self.intermediate_size,
            "q": self.num_attention_heads * head,
            "kv": self.num_key_value_heads * head,
        }[which]

    def config(self) -> dict[str, object]:
        """``config.json`` as AutoAWQ saves it for a Llama model."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "attention_bias": self.attention_bias,
            "tie_word_embeddings": False,
            "torch_dtype": "float16",
            "quantization_config": {
                "quant_method": "awq",
                "bits": self.bits,
                "group_size": self.group_size,
                "zero_point": True,
                "version": "gemm",
                "modules_to_not_convert": None,
            },
        }


def quantised_layer(
    rng: np.random.Generator, k: int, n: int, bits: int, group_size: int
) -> dict[str, np.ndarray]:
    """AutoAWQ GEMM tensors of one linear layer: qweight, qzeros (int32), scales (fp16)."""
    groups = 1 if group_size == -1 else k // group_size
    q = rng.integers(0, 2**bits, size=(k, n), dtype=np.uint8)
    z = rng.integers(0, 2**bits, size=(groups, n), dtype=np.uint8)
    s = (rng.random((groups, n), dtype=np.float32) * 0.02 + 0.001).astype(np.float16)
    return {"qweight": codec.awq_pack(q, bits), "qzeros": codec.awq_pack(z, bits), "scales": s}


def tensors(shape: LlamaShape) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the checkpoint, in AutoAWQ's order, generated one at a time."""
    rng = np.random.default_rng(shape.seed)
    h = shape.hidden_size
    yield (
        "model.embed_tokens.weight",
        rng.standard_normal((shape.vocab_size, h), np.float32).astype(np.float16),
    )
    for i in range(shape.num_hidden_layers):
        yield f"model.layers.{i}.input_layernorm.weight", np.ones(h, np.float16)
        for block, proj, k_dim, n_dim in LINEARS:
            k, n = shape.dim(k_dim), shape.dim(n_dim)
            prefix = f"model.layers.{i}.{block}.{proj}"
            for part, array in quantised_layer(rng, k, n, shape.bits, shape.group_size).items():
                yield f"{prefix}.{part}", array
            if shape.attention_bias and proj in ("q_proj", "k_proj", "v_proj"):
                yield (
                    f"{prefix}.bias",
                    (rng.standard_normal(n, np.float32) * 0.01).astype(np.float16),
                )
        yield f"model.layers.{i}.post_attention_layernorm.weight", np.ones(h, np.float16)
    yield "model.norm.weight", np.ones(h, np.float16)
    yield (
        "lm_head.weight",
        rng.standard_normal((shape.vocab_size, h), np.float32).astype(np.float16),
    )


def write_checkpoint(
    folder: str | Path, shape: LlamaShape | None = None, *, shards: int = 1
) -> Path:
    """Write the checkpoint folder; returns it.  ``shards > 1`` splits by layer."""
    shape = shape or LlamaShape()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(shape.config(), indent=2) + "\n", encoding="utf-8")
    items = list(tensors(shape))
    if shards == 1:
        save_file(dict(items), str(out / "model.safetensors"), metadata={"format": "pt"})
        return out
    per = -(-len(items) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        chunk = dict(items[s * per : (s + 1) * per])
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_file(chunk, str(out / name), metadata={"format": "pt"})
        weight_map.update({t: name for t in chunk})
        total += sum(a.nbytes for a in chunk.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(
        json.dumps(index, indent=2) + "\n", encoding="utf-8"
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reference.examples",
        description="Write a deterministic AutoAWQ-format (AWQ v1) Llama-shaped checkpoint.",
    )
    parser.add_argument("out", type=Path, help="folder to write")
    parser.add_argument("--shards", type=int, default=1)
    defaults = LlamaShape()
    for field, value in asdict(defaults).items():
        kind = (
            (lambda v: v.lower() in ("1", "true", "yes"))
            if isinstance(value, bool)
            else type(value)
        )
        parser.add_argument(f"--{field.replace('_', '-')}", type=kind, default=value)
    args = vars(parser.parse_args(argv))
    out, shards = args.pop("out"), args.pop("shards")
    write_checkpoint(out, LlamaShape(**args), shards=shards)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
