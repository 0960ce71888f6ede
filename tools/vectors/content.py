"""What a conformance vector's file holds, drawn and written: the contents (dense tensors,
quantised layers drawn from a seed, metadata), :func:`build` (the reference writer's bytes and
the expected content, computed from the drawn values), the base files the must-reject
mutations start from, and :class:`Vector`.  Both the file vectors
(:mod:`tools.vectors.generate`) and the file-set vectors (:mod:`tools.vectors.sets`) are made
of these."""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import reference
from conformance import exactjson
from spec.algorithms import bucket_bits_for, bucket_of, fnv1a_64
from spec.registry import DTYPES
from tools.vectors.mutations import Mutation
from tools.vectors.surgery import FileEditor


def sha256(data: bytes | np.ndarray) -> str:
    raw = np.ascontiguousarray(data).tobytes() if isinstance(data, np.ndarray) else data
    return hashlib.sha256(raw).hexdigest()


# ------------------------------------------------------------------------------ file contents


@dataclass
class Layer:
    """One quantised layer as drawn: codes, zero points, plain scales (stored dtype), bias."""

    prefix: str
    q: np.ndarray
    z: np.ndarray
    s: np.ndarray
    bits: int
    group_size: int
    scale_dtype: str = "F16"
    bias: np.ndarray | None = None

    def dequantized(self) -> np.ndarray:
        """``float32((q - z[g]) * s[g])``, each operation in float32 (spec: codec chapter)."""
        k = self.q.shape[0]
        rows = k if self.group_size == -1 else self.group_size
        s = self.s
        if self.scale_dtype == "BF16":
            s = (s.astype(np.uint32) << np.uint32(16)).view(np.float32)
        g = np.arange(k) // rows
        qf = self.q.astype(np.float32)
        return (qf - self.z.astype(np.float32)[g]) * s.astype(np.float32)[g]

    def expected(self, layout: str) -> dict[str, Any]:
        k, n = self.q.shape
        return {
            "prefix": self.prefix,
            "layout": layout,
            "k": k,
            "n": n,
            "bits": self.bits,
            "group_size": self.group_size,
            "scale_dtype": self.scale_dtype,
            "codes_sha256": sha256(self.q.astype(np.uint8)),
            "zeros_sha256": sha256(self.z.astype(np.uint8)),
            "scales_sha256": sha256(self.s),
            "dequantized_sha256": sha256(self.dequantized().astype("<f4")),
        }


@dataclass
class Content:
    dense: list[tuple[str, np.ndarray, str | None]] = field(default_factory=list)
    layers: list[Layer] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    #: metadata bytes exactly as the file holds them, in place of the writer's canonical
    #: encoding of ``metadata``: numbers, escapes and key order as written here [ADP-1]
    metadata_raw: bytes | None = None


def draw_layer(
    prefix: str,
    k: int,
    n: int,
    bits: int,
    group_size: int,
    seed: int,
    *,
    scale_dtype: str = "F16",
    bias: bool = False,
) -> Layer:
    rng = np.random.default_rng(seed)
    groups = 1 if group_size == -1 else k // group_size
    q = rng.integers(0, 2**bits, (k, n), dtype=np.uint8)
    z = rng.integers(0, 2**bits, (groups, n), dtype=np.uint8)
    s32 = (rng.random((groups, n), dtype=np.float32) * 0.05 + 0.001).astype(np.float32)
    s: np.ndarray
    if scale_dtype == "BF16":
        s = (s32.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    else:
        s = s32.astype({"F16": np.float16, "F32": np.float32}[scale_dtype])
    b = rng.standard_normal(n).astype(np.float16) if bias else None
    return Layer(prefix, q, z, s, bits, group_size, scale_dtype, b)


def build(content: Content) -> tuple[bytes, dict[str, Any]]:
    """Write a file with the reference writer; return its bytes and the expected content."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v.awq2"
        families = {}
        with reference.Writer(path, metadata=content.metadata) as w:
            for name, array, dtype in content.dense:
                w.add(name, array, dtype=dtype)
            for layer in content.layers:
                families[layer.prefix] = w.add_linear(
                    layer.prefix,
                    q=layer.q,
                    z=layer.z,
                    scales=layer.s,
                    bits=layer.bits,
                    group_size=layer.group_size,
                    bias=layer.bias,
                    scale_dtype=layer.scale_dtype,
                )
        data = path.read_bytes()
    if content.metadata_raw is not None:
        data = FileEditor(data).replace_metadata(content.metadata_raw).refresh().bytes()
    return data, expected_content(data, content, families)


def expected_content(data: bytes, content: Content, families: dict[str, str]) -> dict[str, Any]:
    """Entry list (dtype, shape, layout, payload hash) plus the layers' value hashes."""
    ed = FileEditor(data)
    dense = {name: (array, dtype) for name, array, dtype in content.dense}
    tensors = []
    for i, e in enumerate(ed.entries()):
        start, end = ed.name_range(i)
        name = bytes(ed.data[start:end]).decode()
        off, length = int(e["data_offset"]), int(e["data_length"])
        payload = data[off : off + length]
        if name in dense:  # independent of the writer: the input's own bytes
            array = np.ascontiguousarray(dense[name][0])
            assert array.astype(array.dtype.newbyteorder("<")).tobytes() == payload, name
        dims_start = ed.dims_offset + 8 * int(e["dims_index"])
        shape = np.frombuffer(data, "<u8", int(e["ndim"]), dims_start).tolist()
        assert name not in dense or tuple(shape) == dense[name][0].shape, name
        dtype = next(d.name for d in DTYPES if d.code == int(e["dtype"]))
        layout = reference_layout_name(int(e["layout"]))
        tensors.append(
            {
                "name": name,
                "dtype": dtype,
                "shape": shape,
                "layout": layout,
                "sha256": sha256(payload),
            }
        )
    tensors.sort(key=lambda t: t["name"])
    layers = [layer.expected(families[layer.prefix]) for layer in content.layers]
    return {"tensors": tensors, "layers": layers, "metadata": expected_metadata(content)}


def expected_metadata(content: Content) -> Any:
    """The metadata with every number as the file writes it [ADP-1]: the raw text given, or
    the JSON text of the metadata drawn (how the writer spells a number: ``json.dumps``)."""
    if content.metadata_raw is not None:
        return exactjson.loads(content.metadata_raw)
    return exactjson.loads(json.dumps(content.metadata or {}))


def reference_layout_name(code: int) -> str:
    from spec.registry import LAYOUT_BY_CODE

    return LAYOUT_BY_CODE[code].name


# ------------------------------------------------------------------------------ base files


def sample_content() -> Content:
    """The base of most must-reject vectors (see tools.vectors.mutations)."""
    rng = np.random.default_rng(2024)
    return Content(
        dense=[
            ("model.embed_tokens.weight", rng.standard_normal((64, 32)).astype(np.float16), None),
            ("model.norm.weight", np.ones(32, dtype=np.float32), None),
            ("model.layers.0.mlp.big", rng.integers(-99, 99, (300, 100), dtype=np.int32), None),
            ("empty", np.zeros((0, 7), dtype=np.int64), None),
            ("scalar", np.array(2.5, dtype=np.float64), None),
        ],
        layers=[draw_layer("model.layers.0.self_attn.q_proj", 128, 64, 4, 64, 1, bias=True)],
        metadata={"config": {"hidden_size": 32}, "note": "conformance sample"},
    )


def pair_content() -> Content:
    """Two same-length names in one bucket (for the duplicate-name vector)."""
    names = [f"t{i:02d}" for i in range(100)]
    bits = bucket_bits_for(2)
    bucket = bucket_of(fnv1a_64(names[0].encode()), bits)
    twin = next(n for n in names[1:] if bucket_of(fnv1a_64(n.encode()), bits) == bucket)
    return Content(
        dense=[(names[0], np.zeros(2, np.int8), None), (twin, np.ones(2, np.int8), None)]
    )


def many_content(count: int = 100) -> Content:
    return Content(dense=[(f"layer.{i}.w", np.zeros(0, np.float16), None) for i in range(count)])


def zero_size_content() -> Content:
    """Zero-size tensors whose dims the 64-bit boundary vectors set (tools.vectors.mutations)."""
    return Content(
        dense=[
            ("u8", np.zeros((0, 1), np.uint8), None),
            ("f16", np.zeros((0, 1), np.float16), None),
            ("u8.3d", np.zeros((0, 1, 1), np.uint8), None),
        ]
    )


BASES: dict[str, Callable[[], Content]] = {
    "sample": sample_content,
    "pair": pair_content,
    "many": many_content,
    "zero_size": zero_size_content,
}


def base_bytes(base: str) -> bytes:
    return build(BASES[base]())[0]


def mutated(mutation: Mutation, base: bytes) -> bytes:
    ed = FileEditor(base)
    mutation.edit(ed)
    return ed.bytes()


# ------------------------------------------------------------------------------ vectors


@dataclass
class Vector:
    id: str
    expect: str  # "accept", "reject" or "either"
    requirements: tuple[str, ...]
    description: str
    data: bytes
    content: dict[str, Any] | None = None
    error_code: str | None = None
    either_codes: tuple[str, ...] = ()
    level: str | None = None
    #: a folder vector (a file set): its files by name, in place of ``data``
    folder_files: dict[str, bytes] | None = None


#: An expert's projections as most checkpoints name them, and as Mixtral's original ones do
#: (``w1`` gate, ``w3`` up, ``w2`` down), in the order gate, up, down [LAY-12].
EXPERT_ROLES = ("gate_proj", "up_proj", "down_proj")
MIXTRAL_EXPERT_ROLES = ("w1", "w3", "w2")


def expert_layers(experts: str, roles: tuple[str, str, str], count: int, hidden: int,
                  intermediate: int, *, seed: int) -> list[Layer]:  # fmt: skip
    """An expert set [LAY-12]: ``<experts>.<e>.<role>`` for experts ``0 .. count - 1``, each a
    4-bit layer of group size 128; gate and up ``[hidden -> intermediate]``, down
    ``[intermediate -> hidden]``."""
    shapes = ((hidden, intermediate), (hidden, intermediate), (intermediate, hidden))
    return [
        draw_layer(f"{experts}.{e}.{role}", k, n, 4, 128, seed + 3 * e + i)
        for e in range(count)
        for i, (role, (k, n)) in enumerate(zip(roles, shapes, strict=True))
    ]
