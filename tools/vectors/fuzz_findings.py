# ruff: noqa: E501  (one finding per line, like tools/vectors/mutations.py)
"""Inputs that the fuzzer found crashing the reference reader, kept as vectors.

The fuzzer is ``python -m tools.fuzz`` (``tools/fuzz/``); the findings below name the single
file it was when they were found, ``bench/fuzz.py``, with the seed and input numbers of
that run.

Every input the fuzzer ever finds that makes the reader raise anything but ``FormatError``
(or ``KeyError`` for an absent name) is reduced to the smallest edit that still triggers
it, fixed, and listed here, so that it stays fixed:

* :data:`FUZZ_FINDINGS`: AWQ-v2 must-reject vectors, :class:`tools.vectors.mutations.Mutation`
  entries of the same form as :data:`tools.vectors.mutations.MUTATIONS` (an edit of a base
  file, the error code, the requirements, the check level);
* :data:`V1_FINDINGS`: AWQ v1 checkpoints (safetensors, read by ``reference.open`` through
  its v1 path [V1-1]), as raw recipes: the files of a checkpoint folder and the outcome.

``python -m tools.vectors.generate`` writes every :data:`FUZZ_FINDINGS` entry as the
must-reject vector ``n_<id>`` (``n_fuzz_*``) of the manifest, so every loader is run on
it; ``tests/test_hostile.py`` runs the committed vectors through the reference reader's
lazy path too, and checks every :data:`V1_FINDINGS` recipe.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from spec.geometry import DIM_SIZE, pack_dims
from tools.vectors.mutations import Mutation, dims_at
from tools.vectors.surgery import FileEditor


def _set_dim(name: str, j: int, value: int) -> Callable[[FileEditor], object]:
    """Set dimension ``j`` of the entry called ``name`` (its length is not changed)."""

    def edit(ed: FileEditor) -> object:
        at = dims_at(ed, ed.entry_of(name)) + DIM_SIZE * j
        return ed.set_bytes(at, pack_dims([value])).refresh()

    return edit


M = Mutation
FUZZ_FINDINGS: tuple[Mutation, ...] = (
    # bench/fuzz.py --seed 1, inputs 453 and 1170: "entry[8] dim 1 = 2**64 - 1 / 2**62 + 1
    # (length follows)" on the sample's empty int64 tensor [0, 7].  The payload length is
    # 0 x ... = 0, so every check passed, and tensor() raised ValueError from NumPy
    # ("Maximum allowed dimension exceeded" / "array is too big"): NumPy cannot describe a
    # shape whose non-zero dimensions x itemsize exceed 2**63 - 1, even with no elements.
    # Fixed in reference/format/rules.py check_payload (BAD_SHAPE, for the reader and the writer).
    M("fuzz_empty_tensor_dim_2_64", _set_dim("empty", 1, (1 << 64) - 1), "BAD_SHAPE", ("ENT-5",), "validate", "zero-element tensor [0, 2**64 - 1]: not representable"),
    M("fuzz_empty_tensor_extent_2_63", _set_dim("empty", 1, (1 << 62) + 1), "BAD_SHAPE", ("ENT-5",), "validate", "zero-element int64 tensor [0, 2**62 + 1]: 8 x (2**62 + 1) bytes of extent"),
)  # fmt: skip


# ----------------------------------------------------------------------------- AWQ v1 recipes


def safetensors_bytes(header: dict[str, Any], buffer: bytes) -> bytes:
    """A safetensors file: u64 header length, the JSON header (space-padded to 8), the data."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + buffer


def _dense(**override: Any) -> dict[str, bytes]:
    """Two F16 tensors, a [2, 2] and a [3]; ``override`` replaces header entries."""
    header: dict[str, Any] = {
        "__metadata__": {"format": "pt"},
        "a": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
        "b": {"dtype": "F16", "shape": [3], "data_offsets": [8, 14]},
    }
    header.update(override)
    buffer = np.arange(7, dtype="<f2").tobytes()
    return {"model.safetensors": safetensors_bytes(header, buffer), "config.json": b"{}"}


def _layer(**quantization: Any) -> dict[str, bytes]:
    """One 4-bit AutoAWQ GEMM layer (k = 128, n = 64, group size 64) and its config.json."""
    rng = np.random.default_rng(0)
    qweight = rng.integers(-(2**31), 2**31, (128, 8), dtype=np.int64).astype("<i4").tobytes()
    qzeros = rng.integers(-(2**31), 2**31, (2, 8), dtype=np.int64).astype("<i4").tobytes()
    scales = np.full((2, 64), 0.01, "<f2").tobytes()
    header: dict[str, Any] = {}
    buffer = b""
    for part, dtype, shape, raw in (("qweight", "I32", [128, 8], qweight),
                                    ("qzeros", "I32", [2, 8], qzeros),
                                    ("scales", "F16", [2, 64], scales)):  # fmt: skip
        header[f"proj.{part}"] = {"dtype": dtype, "shape": shape,
                                  "data_offsets": [len(buffer), len(buffer) + len(raw)]}  # fmt: skip
        buffer += raw
    q = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True,
         "version": "gemm", **quantization}  # fmt: skip
    config = json.dumps({"hidden_size": 128, "quantization_config": q}).encode()
    return {"model.safetensors": safetensors_bytes(header, buffer), "config.json": config}


def _float8() -> dict[str, bytes]:
    header = {
        "e4m3": {"dtype": "F8_E4M3", "shape": [2, 3], "data_offsets": [0, 6]},
        "e5m2": {"dtype": "F8_E5M2", "shape": [3], "data_offsets": [6, 9]},
    }
    return {"model.safetensors": safetensors_bytes(header, bytes(range(9))), "config.json": b"{}"}


@dataclass(frozen=True)
class V1Finding:
    """A checkpoint folder (file name -> bytes) and what ``reference.open`` of it must do.

    ``expect`` is ``"reject"`` (a FormatError with ``code``; ``level`` ``"open"`` when
    opening raises it, ``"tensor"`` when reading a tensor does) or ``"accept"``.
    """

    id: str
    files: Callable[[], dict[str, bytes]]
    expect: str
    code: str | None
    level: str
    description: str


V = V1Finding
V1_FINDINGS: tuple[V1Finding, ...] = (
    # bench/fuzz.py --seed 2 (AWQ v1 seeds); before the fixes in reference/sources/v1.py each of
    # these raised TypeError, KeyError, ValueError, AttributeError or SafetensorError.
    V("fuzz_v1_entry_not_object", lambda: _dense(a=1), "reject", "V1_INCOMPLETE", "open", "header entry is a number (TypeError)"),
    V("fuzz_v1_entry_empty_object", lambda: _dense(a={}), "reject", "V1_INCOMPLETE", "open", "header entry {} (KeyError data_offsets)"),
    V("fuzz_v1_no_dtype", lambda: _dense(a={"shape": [2, 2], "data_offsets": [0, 8]}), "reject", "V1_INCOMPLETE", "open", "no dtype (KeyError)"),
    V("fuzz_v1_no_shape", lambda: _dense(a={"dtype": "F16", "data_offsets": [0, 8]}), "reject", "V1_INCOMPLETE", "open", "no shape (KeyError)"),
    V("fuzz_v1_shape_null", lambda: _dense(a={"dtype": "F16", "shape": None, "data_offsets": [0, 8]}), "reject", "V1_INCOMPLETE", "open", "shape null (TypeError)"),
    V("fuzz_v1_three_offsets", lambda: _dense(a={"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 2, 4]}), "reject", "V1_INCOMPLETE", "open", "three data_offsets (ValueError)"),
    V("fuzz_v1_offsets_string", lambda: _dense(a={"dtype": "F16", "shape": [2, 2], "data_offsets": "xy"}), "reject", "V1_INCOMPLETE", "open", "data_offsets a string (TypeError)"),
    V("fuzz_v1_dtype_object", lambda: _dense(a={"dtype": {"a": 1}, "shape": [2, 2], "data_offsets": [0, 8]}), "reject", "V1_INCOMPLETE", "open", "dtype an object (TypeError: unhashable)"),
    V("fuzz_v1_metadata_string", lambda: _dense(__metadata__="x"), "reject", "V1_INCOMPLETE", "open", "__metadata__ a string (ValueError)"),
    V("fuzz_v1_metadata_list", lambda: _dense(__metadata__=[1]), "reject", "V1_INCOMPLETE", "open", "__metadata__ a list (TypeError)"),
    V("fuzz_v1_bf16_length_not_shape", lambda: _dense(a={"dtype": "BF16", "shape": [3], "data_offsets": [0, 2]}), "reject", "V1_INCOMPLETE", "open", "BF16 [3] in 2 bytes (ValueError in reshape)"),
    V("fuzz_v1_offsets_safetensors_refuses", lambda: _dense(a={"dtype": "F16", "shape": [2], "data_offsets": [1, 5]}), "reject", "V1_INCOMPLETE", "tensor", "a gap before the first payload (SafetensorError)"),
    V("fuzz_v1_config_bits_float", lambda: _layer(bits=4.0), "reject", "V1_UNSUPPORTED", "open", "bits 4.0 in config.json (TypeError in the codec)"),
    V("fuzz_v1_config_skip_not_names", lambda: _layer(modules_to_not_convert=[1]), "reject", "V1_BAD_CONFIG", "open", "modules_to_not_convert [1] (TypeError)"),
    # bench/fuzz.py --seed 9, input 1191: the AWQ v1 twin of fuzz_empty_tensor_* (ValueError)
    V("fuzz_v1_empty_tensor_extent", lambda: _dense(a={"dtype": "I16", "shape": [1 << 62, 0, 2], "data_offsets": [0, 0]}, b={"dtype": "F16", "shape": [7], "data_offsets": [0, 14]}), "reject", "V1_INCOMPLETE", "open", "zero-element I16 [2**62, 0, 2]: not representable (ValueError)"),
    V("fuzz_v1_empty_bf16_dim_2_63", lambda: _dense(a={"dtype": "BF16", "shape": [0, 1 << 63], "data_offsets": [0, 0]}, b={"dtype": "F16", "shape": [7], "data_offsets": [0, 14]}), "reject", "V1_INCOMPLETE", "open", "zero-element BF16 [0, 2**63], read raw (ValueError)"),
    V("fuzz_v1_float8_tensors", _float8, "accept", None, "open", "F8_E4M3 and F8_E5M2 tensors, read as raw bytes (AttributeError: NumPy has no float8)"),
)  # fmt: skip

__all__ = ["FUZZ_FINDINGS", "V1_FINDINGS", "V1Finding", "safetensors_bytes"]
