"""Small compressed-tensors ``pack-quantized`` checkpoints, written for the tests from the
library's documented layout, independently of ``reference.sources.compressed``.

The layout, as compressed-tensors writes it (``compressors/pack_quantized/helpers.py:
pack_to_int32`` and ``base.py: PackedQuantizationCompressor.compress``):

* signed 4-bit codes ``q`` in [-8, 7] are stored as ``q + 8``;
* ``weight_packed[o, c]`` holds input columns ``8c .. 8c + 7`` of output ``o``, column
  ``8c + i`` in bits ``4i .. 4i + 3`` (the last word padded with zero fields);
* ``weight_zero_point[r, g]`` holds the zero points of outputs ``8r .. 8r + 7`` in group ``g``,
  the same way (asymmetric layers only);
* ``weight_scale[o, g]``, ``weight_shape = [out, in]`` (int64).

The library's own dequantisation is ``(q - zp) * scale`` per group (``_dequantize``);
:func:`expected_weight` computes it exactly in float32 from the signed values drawn here.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

_ST_NAMES = {np.dtype(np.int32): "I32", np.dtype(np.int64): "I64", np.dtype(np.float16): "F16",
             np.dtype(np.float32): "F32", np.dtype(np.uint16): "BF16"}  # fmt: skip


def pack_rows(values: np.ndarray) -> np.ndarray:
    """Unsigned 4-bit fields ``[r, m]`` -> int32 ``[r, ceil(m / 8)]``, column ``8c + i`` of a row
    in bits ``4i`` of word ``c`` (zero fields pad the last word)."""
    rows, m = values.shape
    words = np.zeros((rows, -(-m // 8)), dtype=np.uint64)
    for j in range(m):
        words[:, j // 8] |= values[:, j].astype(np.uint64) << np.uint64(4 * (j % 8))
    return words.astype(np.uint32).view(np.int32)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values that are bfloat16 values -> their uint16 bits."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    assert not (bits & 0xFFFF).any(), "not bfloat16 values"
    return (bits >> 16).astype(np.uint16)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file (BF16 as uint16 bits), written byte by byte."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name, a in tensors.items():
        data = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": _ST_NAMES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}  # fmt: skip
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


@dataclass
class CtLayer:
    """One quantised layer's signed codes, zero points and scales (float32 values)."""

    q: np.ndarray  # int8 [out, in], in [-8, 7]
    zp: np.ndarray | None  # int8 [out, groups] or None (symmetric)
    scale: np.ndarray  # float32 [out, groups], values of the scale dtype
    group_size: int  # -1: channel

    def expected(self) -> np.ndarray:
        """float32 ``[out, in]``: ``(q - zp) * scale``, exact."""
        k = self.q.shape[1]
        size = k if self.group_size == -1 else self.group_size
        cols = np.arange(k) // size
        zp = self.zp if self.zp is not None else np.zeros_like(self.scale, dtype=np.int8)
        diff = self.q.astype(np.float32) - zp[:, cols].astype(np.float32)
        return diff * self.scale[:, cols]

    def unsigned_codes(self) -> np.ndarray:
        """``q + 8``: the AWQ codes ``[out, in]``."""
        return (self.q.astype(np.int16) + 8).astype(np.uint8)

    def unsigned_zeros(self) -> np.ndarray:
        """``zp + 8`` (8 when symmetric): the AWQ zero points ``[out, groups]``."""
        if self.zp is None:
            return np.full(self.scale.shape, 8, dtype=np.uint8)
        return (self.zp.astype(np.int16) + 8).astype(np.uint8)


def make_layer(rng: np.random.Generator, out: int, k: int, group_size: int, *,
               symmetric: bool, bf16: bool) -> CtLayer:  # fmt: skip
    groups = 1 if group_size == -1 else k // group_size
    q = rng.integers(-8, 8, size=(out, k)).astype(np.int8)
    zp = None if symmetric else rng.integers(-8, 8, size=(out, groups)).astype(np.int8)
    scale = rng.uniform(0.001, 0.05, size=(out, groups)).astype(np.float32)
    if bf16:
        scale = (scale.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    else:
        scale = scale.astype(np.float16).astype(np.float32)
    return CtLayer(q, zp, scale, group_size)


def layer_tensors(prefix: str, layer: CtLayer, *, bf16: bool) -> dict[str, np.ndarray]:
    out, k = layer.q.shape
    scale = to_bf16_bits(layer.scale) if bf16 else layer.scale.astype(np.float16)
    tensors = {
        f"{prefix}.weight_packed": pack_rows(layer.unsigned_codes()),
        f"{prefix}.weight_scale": scale,
        f"{prefix}.weight_shape": np.array([out, k], dtype=np.int64),
    }
    if layer.zp is not None:
        tensors[f"{prefix}.weight_zero_point"] = pack_rows(layer.unsigned_zeros().T).T.copy()
    return tensors


#: (prefix, out, in): two Marlin-legal projections, one layer Marlin refuses (out 72).
LAYERS = (
    ("model.layers.0.self_attn.q_proj", 256, 256),
    ("model.layers.0.mlp.down_proj", 256, 512),
    ("model.layers.0.mlp.odd_proj", 72, 256),
)


@dataclass
class CtCheckpoint:
    folder: Path
    layers: dict[str, CtLayer] = field(default_factory=dict)
    dense: dict[str, np.ndarray] = field(default_factory=dict)


def weights_args(group_size: int, symmetric: bool) -> dict[str, Any]:
    """``QuantizationArgs`` as ``model_dump`` writes them for W4A16 / W4A16_ASYM."""
    return {
        "num_bits": 4, "type": "int", "symmetric": symmetric,
        "group_size": None if group_size == -1 else group_size,
        "strategy": "channel" if group_size == -1 else "group",
        "block_structure": None, "dynamic": False, "actorder": None,
        "observer": "minmax", "observer_kwargs": {},
    }  # fmt: skip


def write_ct_checkpoint(
    folder: Path,
    *,
    group_size: int = 128,
    symmetric: bool = False,
    bf16: bool = False,
    shards: int = 1,
    layers: tuple[tuple[str, int, int], ...] = LAYERS,
    seed: int = 0,
) -> CtCheckpoint:
    """A tiny checkpoint as ``save_pretrained(..., save_compressed=True)`` lays it out."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    ck = CtCheckpoint(folder)
    tensors: dict[str, np.ndarray] = {}
    model_dtype = np.uint16 if bf16 else np.float16
    ck.dense["model.embed_tokens.weight"] = rng.integers(0, 1 << 14, (64, 256)).astype(model_dtype)
    for prefix, out, k in layers:
        ck.layers[prefix] = make_layer(rng, out, k, group_size, symmetric=symmetric, bf16=bf16)
        tensors.update(layer_tensors(prefix, ck.layers[prefix], bf16=bf16))
    ck.dense["model.layers.0.input_layernorm.weight"] = np.ones(256, dtype=model_dtype)
    ck.dense["lm_head.weight"] = rng.integers(0, 1 << 14, (64, 256)).astype(model_dtype)
    tensors.update(ck.dense)
    q_config = {
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights_args(
            group_size, symmetric), "input_activations": None, "output_activations": None,
            "format": None}},
        "format": "pack-quantized", "global_compression_ratio": None, "ignore": ["lm_head"],
        "kv_cache_scheme": None, "quant_method": "compressed-tensors",
        "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
        "version": "0.12.2",
    }  # fmt: skip
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "model_type": "llama",
              "torch_dtype": "bfloat16" if bf16 else "float16",
              "quantization_config": q_config}  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    names = list(tensors)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", tensors)
        return ck
    weight_map = {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        write_safetensors(folder / file, part)
        weight_map.update(dict.fromkeys(part, file))
    index = {"metadata": {"total_size": 0}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return ck
