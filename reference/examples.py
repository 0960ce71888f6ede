"""Deterministic AutoAWQ-format example checkpoints (AWQ v1), for tests, docs and benchmarks.

``python -m reference.examples OUT [--shards N] [--num-hidden-layers L] [--hidden-size H] ...``
writes a folder exactly as AutoAWQ's ``save_quantized`` lays out a Llama checkpoint: tensor names
(``model.layers.N.self_attn.q_proj.qweight`` ...), dtypes (int32 ``qweight``/``qzeros``,
fp16 ``scales`` and unquantised weights), GEMM packing (:func:`reference.quant.codec.awq_pack`),
``config.json`` with ``quantization_config``, and, with ``--shards``, the
``model-0000i-of-0000N.safetensors`` files plus ``model.safetensors.index.json``.
The random codes come from ``numpy.random.default_rng(seed)``, so the bytes are
the same on every run.

The command reports its progress on stderr (``--quiet``: none): a bar over the layers when
stderr is a terminal, otherwise a line when it starts, every few seconds while it generates
layers, and one per file it writes.  Exit status: 0 written, 2 usage error, 130 interrupted
(Ctrl-C; the files written so far are left in OUT).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TextIO

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

#: ``--help`` text of each :class:`LlamaShape` field (its command-line option).
FIELD_HELP = {
    "hidden_size": "the model dimension (config hidden_size)",
    "intermediate_size": "the MLP's inner dimension (config intermediate_size)",
    "num_hidden_layers": "decoder layers, seven quantised linear layers each",
    "num_attention_heads": "query heads; the head size is hidden size / heads",
    "num_key_value_heads": "key and value heads (fewer than the query heads: grouped-query "
    "attention)",
    "vocab_size": "rows of the embedding and of lm_head",
    "bits": "bits per quantised weight",
    "group_size": "input rows sharing one scale and zero point (-1: one group of all rows)",
    "attention_bias": "give q_proj, k_proj and v_proj a bias (true or false)",
    "seed": "seed of numpy.random.default_rng: the same seed, the same bytes",
}
#: Seconds between two progress lines when stderr is not a terminal.
PROGRESS_INTERVAL = 5.0
#: The exit status of an interrupted command (128 + SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 130


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


def tensors(
    shape: LlamaShape, on_layer: Callable[[int], None] | None = None
) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the checkpoint, in AutoAWQ's order, generated one at a time;
    ``on_layer(i)`` is called once the tensors of decoder layer ``i`` have been generated."""
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
        if on_layer is not None:
            on_layer(i)
    yield "model.norm.weight", np.ones(h, np.float16)
    yield (
        "lm_head.weight",
        rng.standard_normal((shape.vocab_size, h), np.float32).astype(np.float16),
    )


def write_checkpoint(
    folder: str | Path,
    shape: LlamaShape | None = None,
    *,
    shards: int = 1,
    progress: Progress | None = None,
) -> Path:
    """Write the checkpoint folder; returns it.  ``shards > 1`` splits by layer.
    ``progress`` is told of each layer generated and each file written; the bytes written
    are the same with or without it."""
    shape = shape or LlamaShape()
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(shape.config(), indent=2) + "\n", encoding="utf-8")
    if progress is not None:
        progress.start(shape.num_hidden_layers)
    items = list(tensors(shape, progress.layer_done if progress is not None else None))
    if progress is not None:
        progress.generated(sum(a.nbytes for _, a in items))
    if shards == 1:
        _save(dict(items), out / "model.safetensors", progress)
        return out
    per = -(-len(items) // shards)
    weight_map, total = {}, 0
    for s in range(shards):
        chunk = dict(items[s * per : (s + 1) * per])
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        _save(chunk, out / name, progress)
        weight_map.update({t: name for t in chunk})
        total += sum(a.nbytes for a in chunk.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(
        json.dumps(index, indent=2) + "\n", encoding="utf-8"
    )
    return out


def _save(chunk: dict[str, np.ndarray], path: Path, progress: Progress | None) -> None:
    if progress is not None:
        progress.writing(path, sum(a.nbytes for a in chunk.values()))
    save_file(chunk, str(path), metadata={"format": "pt"})


class Progress:
    """What :func:`write_checkpoint` reports on ``stream`` (stderr): a tqdm bar over the
    layers when ``bar`` (stderr is a terminal), otherwise plain lines: one at the start, one
    at most every :data:`PROGRESS_INTERVAL` seconds while layers are generated, and one per
    file written."""

    def __init__(self, stream: TextIO, *, bar: bool) -> None:
        self.stream, self.bar = stream, bar
        self.total, self.last = 0, 0.0
        self._tqdm: Any = None

    def start(self, layers: int) -> None:
        self.total, self.last = layers, time.monotonic()
        if self.bar:
            from tqdm import tqdm

            self._tqdm = tqdm(total=layers, unit="layer", desc="generating", file=self.stream,
                              leave=False)  # fmt: skip
        else:
            self._say(f"generating {layers} layers")

    def layer_done(self, index: int) -> None:
        if self._tqdm is not None:
            self._tqdm.update(1)
        elif time.monotonic() - self.last >= PROGRESS_INTERVAL:
            self._say(f"generated layer {index + 1} of {self.total}")

    def generated(self, nbytes: int) -> None:
        self.close()
        self._say(f"generated {self.total} layers, {nbytes:,} bytes of tensors")

    def writing(self, path: Path, nbytes: int) -> None:
        self._say(f"writing {path.name}, {nbytes:,} bytes of tensors")

    def close(self) -> None:
        """Take the bar off the terminal, if there is one (also when interrupted)."""
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None

    def _say(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
        self.last = time.monotonic()


def _flag(text: str) -> bool:
    """A boolean option's value: true for 1, true or yes (any case), false otherwise."""
    return text.lower() in ("1", "true", "yes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m reference.examples",
        description="Write a deterministic AutoAWQ-format (AWQ v1) Llama-shaped checkpoint: "
        "config.json and model.safetensors (or --shards files and their index), the same bytes "
        "on every run. Progress goes to stderr.",
        epilog="exit status: 0 written, 2 usage error, 130 interrupted (files written so far "
        "are left in OUT)",
    )
    parser.add_argument("out", type=Path, metavar="OUT", help="the folder to write (made if "
                        "missing; files of the same names are replaced)")  # fmt: skip
    parser.add_argument("--shards", type=int, default=1, metavar="N", help="split the tensors "
                        "into N safetensors files with a model.safetensors.index.json (default: "
                        "1, one model.safetensors)")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    for field in fields(LlamaShape):
        value = getattr(LlamaShape(), field.name)
        kind = _flag if isinstance(value, bool) else type(value)
        default = str(value).lower() if isinstance(value, bool) else value
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=kind, default=value,
                            metavar="BOOL" if isinstance(value, bool) else "N",
                            help=f"{FIELD_HELP[field.name]} (default: {default})")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    out, shards, quiet = args.pop("out"), args.pop("shards"), args.pop("quiet")
    if shards < 1:
        parser.error(f"--shards must be at least 1, got {shards}")
    progress = None if quiet else Progress(sys.stderr, bar=sys.stderr.isatty())
    try:
        write_checkpoint(out, LlamaShape(**args), shards=shards, progress=progress)
    except KeyboardInterrupt:
        if progress is not None:
            progress.close()
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
