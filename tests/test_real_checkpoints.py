"""Checkpoints written by the real libraries (``tests/fixtures/real/``, made by
``tools/fixtures/real_checkpoints.py``): read, convert, and compare every layer with the
library's own dequantisation, bit for bit in the library's dtype (CT-1, CT-6, V1-5).

The reader and the converted file give ``(code - zero) * scale`` exactly in float32; the
library computes ``(q - zp) * scale`` in the scale's dtype (compressed-tensors
``forward_helpers.py: _dequantize``; AutoAWQ ``packing_utils.py: dequantize_gemm``): the
integer difference is exact there, the product rounded once.  So our float32 result rounded
once to that dtype (round to nearest, ties to even) must equal the library's values.
Refusal fixtures must be refused with their code and nothing written.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

import reference
from reference.convert import main as convert_main
from reference.quant import codec
from reference.sources.checkpoint import read_safetensors_header
from reference.write.writer import PARTIAL_SUFFIX

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real"
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").is_file())
AWQ_ORDER_4BIT = [0, 2, 4, 6, 1, 3, 5, 7]  # docs/spec/codec.md, "AWQ v1"

#: Fixtures refused, with the code (CT-2). ``ct_w4a16_actorder`` (actorder "weight") is NOT
#: here: that ordering changes only calibration and stores nothing different (compressed-
#: tensors ``ActivationOrdering`` docstring; no ``weight_g_idx``), so it reads exactly.
REFUSED = {
    "ct_w8a16": ("CT_UNSUPPORTED", "num_bits"),
    "ct_w4a8": ("CT_UNSUPPORTED", "int-quantized"),
    "ct_w8a8": ("CT_UNSUPPORTED", "int-quantized"),
}
ACCEPTED = [n for n in NAMES if n not in REFUSED]
ROWS: list[tuple[str, ...]] = []


def _expected(name: str) -> tuple[dict, dict[str, np.ndarray], dict[str, str]]:
    path = FIXTURES / name / "expected.safetensors"
    dtypes = {n: t.dtype for n, t in read_safetensors_header(path)[0].items()}
    arrays = {}
    for n, t in read_safetensors_header(path)[0].items():
        raw = np.fromfile(path, dtype=np.uint8, count=t.length, offset=t.offset)
        arrays[n] = raw.view({"BF16": np.uint16, "F16": np.float16, "F32": np.float32}[t.dtype])
        arrays[n] = arrays[n].reshape(t.shape)
    return json.loads((FIXTURES / name / "expected.json").read_text()), arrays, dtypes


def _round_once(w: np.ndarray, dtype: str) -> np.ndarray:
    """float32 -> the library's dtype, one round to nearest even (BF16 as its uint16 bits)."""
    if dtype == "F32":
        return w
    if dtype == "F16":
        return w.astype(np.float16)
    bits = w.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _as_float(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "BF16":
        return (values.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return values.astype(np.float64)


def _stored_codes(name: str, prefix: str, library: str, k: int) -> tuple[np.ndarray, ...]:
    """Codes q[k, n] and zero points z[G, n] read from the fixture with the libraries'
    documented packing (not through the reader)."""
    tensors, shapes = {}, {}
    for file in (FIXTURES / name).glob("model*.safetensors"):
        with safe_open(str(file), framework="numpy") as f:
            for n, t in read_safetensors_header(file)[0].items():
                shapes[n] = t.shape
                if n.startswith(prefix + ".") and t.dtype == "I32":
                    tensors[n] = f.get_tensor(n)

    def unpack(words: np.ndarray, order: list[int]) -> np.ndarray:
        w = words.view(np.uint32)
        out = np.zeros((w.shape[0], w.shape[1] * 8), dtype=np.uint8)
        for i, col in enumerate(order):
            out[:, col::8] = (w >> np.uint32(4 * i)) & np.uint32(15)
        return out

    if library == "ct":
        q = unpack(tensors[f"{prefix}.weight_packed"], list(range(8)))[:, :k].T
        groups = shapes[f"{prefix}.weight_scale"][1]
        if f"{prefix}.weight_zero_point" in tensors:
            z = unpack(tensors[f"{prefix}.weight_zero_point"].T, list(range(8)))
        else:  # symmetric: stored codes carry the offset 8, the zero point is 8
            z = np.full((groups, q.shape[1]), 8, dtype=np.uint8)
        return q, z
    return unpack(tensors[f"{prefix}.qweight"], AWQ_ORDER_4BIT), unpack(
        tensors[f"{prefix}.qzeros"], AWQ_ORDER_4BIT
    )


def _compare(name: str, source, label: str, expected, arrays, dtypes) -> tuple[float, int]:
    """Every layer of ``source`` against the library's arrays; (max |difference|, layers)."""
    worst = 0.0
    orientation = expected["expected"].get("orientation", "")
    for prefix, shape in expected["layers"].items():
        lin = source.linear(prefix)
        assert (lin.k, lin.n, lin.group_size) == (shape["k"], shape["n"], shape["group_size"])
        ours = _round_once(source.dequantize(prefix), dtypes[prefix])
        theirs = arrays[prefix].T if orientation.startswith("[out, in]") else arrays[prefix]
        worst = max(worst, float(np.abs(_as_float(ours, dtypes[prefix])
                                        - _as_float(theirs, dtypes[prefix])).max()))  # fmt: skip
        bad = np.argwhere(ours.view(np.uint16 if ours.itemsize == 2 else np.uint32)
                          != theirs.view(np.uint16 if ours.itemsize == 2 else np.uint32))  # fmt: skip
        assert not bad.size, f"{name} {label} {prefix}: first difference at [k, n] = {bad[0]}"
    return worst, len(expected["layers"])


@pytest.mark.parametrize("name", ACCEPTED)
def test_every_layer_equals_the_librarys_dequantisation(tmp_path, name):
    """CT-1, CT-6 (V1-1, V1-5 for AutoAWQ): reader and converted file, bit for bit in the
    library's dtype; the converted Marlin bytes are the codec's encoding of the stored codes."""
    expected, arrays, dtypes = _expected(name)
    src = FIXTURES / name
    dst = tmp_path / f"{name}.awq2"
    assert convert_main([str(src), str(dst), "--quiet"]) == 0
    with reference.open(src) as ck, reference.open(dst, validate=True) as v2:
        worst_src, layers = _compare(name, ck, "reader", expected, arrays, dtypes)
        worst_v2, _ = _compare(name, v2, "converted", expected, arrays, dtypes)
        marlin = 0
        for prefix, shape in expected["layers"].items():
            q, z = _stored_codes(name, prefix, expected.get("library", "ct"), shape["k"])
            layer = v2.linear(prefix)
            if layer.layout != "MARLIN":
                np.testing.assert_array_equal(layer.qweight, codec.awq_pack(q, 4))
                continue
            marlin += 1
            np.testing.assert_array_equal(layer.qweight, codec.swizzle_qweight(q, 4))
            np.testing.assert_array_equal(layer.qzeros, codec.swizzle_zeros(z, 4))
        for n in ck.names():  # dense tensors (embeddings, norms, ignored lm_head) unchanged
            if ck.entry(n).layout == "DENSE":
                np.testing.assert_array_equal(v2.tensor(n), ck.tensor(n))
    groups = sorted({s["group_size"] for s in expected["layers"].values()})
    versions = ", ".join(f"{k} {v}" for k, v in sorted(expected.get("versions", {}).items()))
    ROWS.append((name, str(layers), str(marlin), ",".join(map(str, groups)),
                 "/".join(sorted(set(dtypes.values()))), f"{max(worst_src, worst_v2):g}",
                 versions))  # fmt: skip
    assert worst_src == worst_v2 == 0.0


@pytest.mark.parametrize("name", sorted(set(REFUSED) & set(NAMES)))
def test_refusal_fixtures_are_refused(tmp_path, capsys, name):
    """CT-2: the library's W8A16, W4A8 and W8A8 checkpoints are refused, nothing written."""
    code, says = REFUSED[name]
    dst = tmp_path / "out.awq2"
    assert convert_main([str(FIXTURES / name), str(dst)]) == 1
    err = capsys.readouterr().err
    assert f"[{code}]" in err and says in err, err
    assert not dst.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
    ROWS.append((name, "-", "-", "-", "-", f"refused {code}", ""))


def test_print_the_per_fixture_table():
    """The closing table (run with -s to see it): layers, Marlin layers, group sizes, dtype,
    largest |difference| from the library's values, library versions."""
    assert NAMES, "no fixtures under tests/fixtures/real"
    header = ("fixture", "layers", "marlin", "group sizes", "dtype", "max |diff|", "versions")
    rows = [header, *sorted(ROWS)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
