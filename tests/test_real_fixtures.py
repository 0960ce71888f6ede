"""The committed real-library fixtures (``tests/fixtures/real/``) are whole and consistent.

They were written by llm-compressor / compressed-tensors and AutoAWQ themselves
(``tools/fixtures/real_checkpoints.py``); this test needs none of those libraries, only
NumPy and the files.  It checks that ``expected.json`` lists every quantised layer of
``model.safetensors`` and nothing else, that ``expected.safetensors`` holds one array per
listed layer with the stated shape and dtype, that the stored tensors have the shapes the
libraries' layouts give for the listed k, n and group size, and, for the formats whose
layout the generator's docstring states, that decoding the stored codes by those stated
facts (dense little-endian packing with an offset of 8 for compressed-tensors; AutoAWQ's
nibble order [0, 2, 4, 6, 1, 3, 5, 7]) and rounding the exact product once to the scales'
dtype gives the library's own dequantisation bit for bit.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
#: The issue's size budget for one fixture folder.
MAX_FIXTURE_BYTES = 1_500_000
#: AutoAWQ's GEMM order: nibble i of a word holds column 8w + AWQ_ORDER[i].
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
NUMPY_DTYPES = {"I8": "<i1", "I32": "<i4", "I64": "<i8", "F16": "<f2", "BF16": "<u2", "F32": "<f4"}


def read_safetensors(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Every tensor of a safetensors file as (dtype name, array); BF16 as its raw 16 bits."""
    data = path.read_bytes()
    (length,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8 : 8 + length])
    header.pop("__metadata__", None)
    body = memoryview(data)[8 + length :]
    tensors = {}
    for name, info in header.items():
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtype=NUMPY_DTYPES[info["dtype"]])
        tensors[name] = (info["dtype"], array.reshape(info["shape"]))
    return tensors


def to_float32(dtype: str, array: np.ndarray) -> np.ndarray:
    if dtype == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float32)


def round_once(dtype: str, exact: np.ndarray) -> np.ndarray:
    """The float32 value rounded to nearest even in ``dtype``, as raw bits for BF16."""
    if dtype == "BF16":
        bits = exact.astype(np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return exact.astype(np.float16)


def unpack_rows(words: np.ndarray, bits: int) -> np.ndarray:
    """Dense little-endian unpacking along the last axis: code i at bit i * bits."""
    per_word = 32 // bits
    shifts = np.arange(per_word, dtype=np.uint32) * bits
    codes = (words.astype(np.uint32)[..., None] >> shifts) & ((1 << bits) - 1)
    return codes.reshape(*words.shape[:-1], -1).astype(np.int32)


def load(name: str) -> tuple[dict, dict, dict]:
    folder = FIXTURES / name
    record = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    return (
        record,
        read_safetensors(folder / "model.safetensors"),
        read_safetensors(folder / "expected.safetensors"),
    )


def quantised_prefixes(record: dict, tensors: dict) -> set[str]:
    marker = ".qweight" if record["library"] == "autoawq" else ".weight_scale"
    return {k[: -len(marker)] for k in tensors if k.endswith(marker)}


def test_the_fixtures_are_there() -> None:
    assert "ct_awq_w4a16_asym_g128" in NAMES and "autoawq_gemm_g128" in NAMES, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_folder_is_whole_and_small(name: str) -> None:
    folder = FIXTURES / name
    files = {p.name for p in folder.iterdir()}
    needed = {"config.json", "model.safetensors", "expected.json", "expected.safetensors"}
    assert needed <= files, f"{name}: missing {sorted(needed - files)}"
    assert {"tokenizer.json", "tokenizer_config.json"} <= files, f"{name}: no tokenizer files"
    size = sum(p.stat().st_size for p in folder.iterdir())
    assert size <= MAX_FIXTURE_BYTES, f"{name}: {size} bytes, over {MAX_FIXTURE_BYTES}"


@pytest.mark.parametrize("name", NAMES)
def test_expected_lists_every_quantised_layer(name: str) -> None:
    record, tensors, expected = load(name)
    listed = set(record["layers"])
    assert listed == quantised_prefixes(record, tensors), name
    assert set(expected) == listed, name
    orientation = record["expected"]["orientation"]
    for prefix, layer in record["layers"].items():
        dtype, array = expected[prefix]
        k, n = layer["k"], layer["n"]
        shape = (k, n) if orientation.startswith("[in, out]") else (n, k)
        assert array.shape == shape, f"{name} {prefix}: {array.shape}, expected {shape}"
        assert dtype == {"float16": "F16", "bfloat16": "BF16"}[record["model"]["dtype"]]
        assert layer["k"] % 128 == 0 and layer["n"] % 64 == 0, f"{prefix} is not Marlin-legal"


def assert_same_bits(name: str, prefix: str, decoded: np.ndarray, expected: np.ndarray) -> None:
    got, want = decoded.view(np.uint16), expected.view(np.uint16)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{name} {prefix}: {len(bad)} values differ, first at {tuple(bad[0])}: "
        f"decoded 0x{got[tuple(bad[0])]:04x}, library 0x{want[tuple(bad[0])]:04x}"
    )


def per_column(groups: np.ndarray, k: int) -> np.ndarray:
    """[n, groups] -> [n, k]: each group's value over its k / groups columns."""
    return np.repeat(groups, k // groups.shape[1], axis=1)


def decode_pack_quantized(tensors: dict, prefix: str, weights: dict, k: int, n: int) -> tuple:
    """compressed-tensors ``pack-quantized``, by the facts of the generator's docstring."""
    bits = weights["num_bits"]
    _, shape = tensors[prefix + ".weight_shape"]
    assert shape.tolist() == [n, k], f"{prefix}.weight_shape {shape.tolist()}"
    packed_dtype, packed = tensors[prefix + ".weight_packed"]
    assert packed_dtype == "I32" and packed.shape == (n, k * bits // 32), packed.shape
    scale_dtype, scale = tensors[prefix + ".weight_scale"]
    groups = 1 if weights["strategy"] == "channel" else k // weights["group_size"]
    assert scale.shape == (n, groups), f"{prefix}.weight_scale {scale.shape}"
    codes = unpack_rows(packed, bits)
    if weights["symmetric"]:
        assert prefix + ".weight_zero_point" not in tensors, "a symmetric scheme stores no zp"
        zero = np.full((n, groups), 1 << (bits - 1), dtype=np.int32)
    else:
        zp_dtype, zp = tensors[prefix + ".weight_zero_point"]
        assert zp_dtype == "I32" and zp.shape == (-(-n * bits // 32), groups), zp.shape
        zero = unpack_rows(zp.T, bits).T[:n]
    exact = (codes - per_column(zero, k)).astype(np.float32) * per_column(
        to_float32(scale_dtype, scale), k
    )
    return scale_dtype, exact


def decode_int_quantized(tensors: dict, prefix: str, weights: dict, k: int, n: int) -> tuple:
    """compressed-tensors ``int-quantized``: int8 codes, symmetric, times the scale."""
    assert weights["symmetric"]
    weight_dtype, weight = tensors[prefix + ".weight"]
    assert weight_dtype == "I8" and weight.shape == (n, k), weight.shape
    scale_dtype, scale = tensors[prefix + ".weight_scale"]
    scale32 = per_column(to_float32(scale_dtype, scale), k)
    return scale_dtype, weight.astype(np.float32) * scale32


def decode_autoawq(tensors: dict, prefix: str, group_size: int, k: int, n: int) -> tuple:
    """AutoAWQ GEMM: [k, n / 8] words in AWQ_ORDER, qzeros the same way, fp16 scales."""
    columns = (np.arange(n) // 8) * 8 + np.asarray(AWQ_ORDER)[np.arange(n) % 8]

    def unpack(words: np.ndarray) -> np.ndarray:
        codes = np.empty((words.shape[0], n), dtype=np.int32)
        codes[:, columns] = unpack_rows(words, 4)
        return codes

    _, qweight = tensors[prefix + ".qweight"]
    _, qzeros = tensors[prefix + ".qzeros"]
    scale_dtype, scales = tensors[prefix + ".scales"]
    assert qweight.shape == (k, n // 8) and qzeros.shape == (k // group_size, n // 8)
    assert scales.shape == (k // group_size, n)
    zero = np.repeat(unpack(qzeros), group_size, axis=0)
    scale = np.repeat(to_float32(scale_dtype, scales), group_size, axis=0)
    return scale_dtype, (unpack(qweight) - zero).astype(np.float32) * scale


@pytest.mark.parametrize("name", NAMES)
def test_stated_layout_decodes_to_the_library_dequantisation(name: str) -> None:
    record, tensors, expected = load(name)
    for prefix, layer in sorted(record["layers"].items()):
        k, n = layer["k"], layer["n"]
        if record["library"] == "autoawq":
            dtype, exact = decode_autoawq(tensors, prefix, layer["group_size"], k, n)
        elif record["expected"]["format"] == "pack-quantized":
            weights = record["expected"]["scheme"]["weights"]
            dtype, exact = decode_pack_quantized(tensors, prefix, weights, k, n)
            exact = exact.reshape(n, k)
        else:
            assert record["expected"]["format"] == "int-quantized", record["expected"]["format"]
            weights = record["expected"]["scheme"]["weights"]
            dtype, exact = decode_int_quantized(tensors, prefix, weights, k, n)
        assert_same_bits(name, prefix, round_once(dtype, exact), expected[prefix][1])
