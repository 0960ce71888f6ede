"""DT-1: BF16, F8_E4M3 and F8_E5M2 reach NumPy as ``ml_dtypes`` arrays (``bfloat16``,
``float8_e4m3fn``, ``float8_e5m2``), zero-copy, with their stored bits one ``.view`` away;
the writer takes those arrays and infers the dtype.

Expected values come from the formats' definitions (spec data-type table), worked by hand:
bfloat16 is the top half of a binary32, so ``0x3F80`` is 1.0 and ``0xC000`` is -2.0; E4M3FN
has bias 7 and no infinities, so ``0x38`` (0.0111.000) is 1.0, ``0x7E`` (0.1111.110) is
1.75 * 2^8 = 448 and ``0x7F`` (0.1111.111) is NaN; E5M2 has bias 15 and IEEE 754 specials,
so ``0x3C`` (0.01111.00) is 1.0, ``0x7C`` (0.11111.00) is +inf and ``0x7E`` is NaN.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from ct_checkpoints import write_ct_checkpoint

import reference
from reference.dump import main as dump_main
from reference.format.layers import dequantize_layer, encode_linear
from reference.quant.dtypes import numpy_dtype, raw_bits
from spec.registry import DTYPES

BF16_BITS = np.array([0x3F80, 0xC000, 0x0000, 0x8000], dtype=np.uint16)
BF16_VALUES = [1.0, -2.0, 0.0, -0.0]
E4M3_BITS = np.array([0x38, 0x7E, 0xFE, 0x7F], dtype=np.uint8)
E4M3_VALUES = [1.0, 448.0, -448.0, np.nan]
E5M2_BITS = np.array([0x3C, 0x7C, 0xFC, 0x7E], dtype=np.uint8)
E5M2_VALUES = [1.0, np.inf, -np.inf, np.nan]

#: registry name, ml_dtypes type, stored bits, the values those bits mean
CASES = [
    ("BF16", ml_dtypes.bfloat16, BF16_BITS, BF16_VALUES),
    ("F8_E4M3", ml_dtypes.float8_e4m3fn, E4M3_BITS, E4M3_VALUES),
    ("F8_E5M2", ml_dtypes.float8_e5m2, E5M2_BITS, E5M2_VALUES),
]
IDS = [c[0] for c in CASES]


def _check_array(array: np.ndarray, ml_type: type, bits: np.ndarray, values: list[float]) -> None:
    """The array is of the ml_dtypes type, means ``values`` and holds ``bits``, unconverted."""
    assert array.dtype == np.dtype(ml_type)
    np.testing.assert_array_equal(array.astype(np.float64), np.array(values, dtype=np.float64))
    np.testing.assert_array_equal(array.view(bits.dtype), bits)
    assert np.signbit(array.astype(np.float32)).tolist() == np.signbit(values).tolist()


def _write_raw(path: Path) -> Path:
    """Every case stored from its raw bits with an explicit dtype, as before ml_dtypes."""
    with reference.Writer(path) as w:
        for name, _, bits, _ in CASES:
            w.add(name, bits, dtype=name)
    return path


def test_registry_names_the_ml_dtypes_types():
    """DT-1: the registry's NumPy name of each type NumPy lacks is the ml_dtypes one."""
    want = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
    for d in DTYPES:
        assert numpy_dtype(d.name).itemsize == d.itemsize, d.name
        if d.name in want:
            assert d.numpy == want[d.name]
            assert numpy_dtype(d.name) == np.dtype(getattr(ml_dtypes, want[d.name]))


@pytest.mark.parametrize(("name", "ml_type", "bits", "values"), CASES, ids=IDS)
def test_reader_returns_ml_dtypes_views_with_raw_bits_underneath(
    tmp_path, name, ml_type, bits, values
):
    """DT-1: tensor(), view(), tensors(), read_into() and read_many_into() give the ml_dtypes
    array, mapped or copied; ``.view(np.uintN)`` of it is the stored bits, zero-copy."""
    path = _write_raw(tmp_path / "t.awq2")
    for copy in (False, True):
        with reference.open(path, validate=True, copy=copy) as f:
            info = f.entry(name)
            assert info.dtype == name
            mapped = f.tensor(name)
            _check_array(mapped, ml_type, bits, values)
            assert not mapped.flags.writeable
            raw = mapped.view(bits.dtype)
            assert np.shares_memory(raw, mapped)  # the bits are the same memory, not a copy
            np.testing.assert_array_equal(raw_bits(mapped), bits)
            _check_array(f.view(info), ml_type, bits, values)
            _check_array(dict((i.name, a) for i, a in f.tensors())[name], ml_type, bits, values)
            buf = bytearray(info.length)
            _check_array(f.read_into(name, buf), ml_type, bits, values)
            (many,) = f.read_many_into([(info, bytearray(info.length))])
            _check_array(many, ml_type, bits, values)


@pytest.mark.parametrize(("name", "ml_type", "bits", "values"), CASES, ids=IDS)
def test_writer_infers_the_dtype_of_ml_dtypes_arrays(tmp_path, name, ml_type, bits, values):
    """DT-1: an ml_dtypes array needs no ``dtype=``; the file holds the same bytes as the raw
    bits written with ``dtype=`` (little-endian bits), and reading it back keeps the type."""
    array = np.array(values, dtype=ml_type)
    typed = reference.save(tmp_path / "typed.awq2", {name: array})
    with reference.Writer(tmp_path / "raw.awq2") as w:
        w.add(name, bits, dtype=name)
    assert typed.read_bytes() == (tmp_path / "raw.awq2").read_bytes()
    with reference.open(typed, validate=True) as f:
        assert f.entry(name).dtype == name
        _check_array(f.tensor(name), ml_type, bits, values)
    assert bits.astype(bits.dtype.newbyteorder("<")).tobytes() in typed.read_bytes()


def test_writer_refuses_a_dtype_of_another_item_size(tmp_path):
    """An ml_dtypes float8 array cannot be declared BF16 (1-byte items, 2-byte type)."""
    with reference.Writer(tmp_path / "x.awq2") as w:
        with pytest.raises(ValueError, match="2-byte items"):
            w.add("x", E4M3_BITS.view(ml_dtypes.float8_e4m3fn), dtype="BF16")
        w.abort()


def _scale_bits(groups: int, n: int) -> np.ndarray:
    """bfloat16 bits of 2^-e * (1 + m/128): exponent byte 118..125, mantissa 0..127."""
    rng = np.random.default_rng(7)
    exponent = rng.integers(118, 126, (groups, n)).astype(np.uint16)
    mantissa = rng.integers(0, 128, (groups, n)).astype(np.uint16)
    return (exponent << np.uint16(7)) | mantissa


@pytest.mark.parametrize(("k", "n", "family"), [(128, 64, "MARLIN"), (64, 32, "AWQ")])
def test_bf16_scaled_layer_scales_are_bfloat16_and_dequantise_exactly(tmp_path, k, n, family):
    """DT-1, LAY-6: a BF16-scaled layer's scales come back as bfloat16 (bits as written);
    dequantize() is float32 ``(q - z) * s``, each bfloat16 scale widened exactly, the same
    whether the layer was written from bfloat16 scales or from their uint16 bits."""
    rng = np.random.default_rng(1)
    gs = 32
    q = rng.integers(0, 16, (k, n), dtype=np.uint8)
    z = rng.integers(0, 16, (k // gs, n), dtype=np.uint8)
    bits = _scale_bits(k // gs, n)
    # the scale's value from its fields alone: sign 0, 2^(e - 127) * (1 + m / 128)
    e, m = (bits >> 7).astype(np.int64), (bits & 0x7F).astype(np.float64)
    s = (np.ldexp(1.0 + m / 128.0, e - 127)).astype(np.float32)
    g = np.arange(k) // gs
    want = (q.astype(np.float32) - z.astype(np.float32)[g]) * s[g]
    paths = []
    for label, scales, dtype in (
        ("typed", bits.view(ml_dtypes.bfloat16), None),
        ("bits", bits, "BF16"),
    ):
        got_family, stored = encode_linear("p", q=q, z=z, scales=scales, bits=4, group_size=gs,
                                           scale_dtype=dtype)  # fmt: skip
        assert got_family == family
        path = tmp_path / f"{label}.awq2"
        with reference.Writer(path) as w:
            for t in stored:
                w.add(t.name, t.array, **t.fields)
        paths.append(path)
        with reference.open(path, validate=True) as f:
            layer = f.linear("p")
            assert layer.scale_dtype == "BF16"
            assert layer.scales.dtype == np.dtype(ml_dtypes.bfloat16)
            out = f.dequantize("p")
            assert out.dtype == np.float32
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(dequantize_layer(layer), want)
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_v1_reader_returns_ml_dtypes_arrays(tmp_path):
    """DT-1: the AWQ v1 reader (safetensors, which has no NumPy bfloat16/float8) gives the
    same ml_dtypes arrays, and their bits are the file's bytes."""
    folder = tmp_path / "ck"
    folder.mkdir()
    header, blob = {}, b""
    for name, _, bits, _ in CASES:
        data = bits.astype(bits.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": name, "shape": [len(bits)],
                        "data_offsets": [len(blob), len(blob) + len(data)]}  # fmt: skip
        blob += data
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (folder / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + blob)
    (folder / "config.json").write_text("{}")
    with reference.open(folder) as ck:
        for name, ml_type, bits, values in CASES:
            assert ck.entry(name).dtype == name
            _check_array(ck.tensor(name), ml_type, bits, values)
            _check_array(ck.view(ck.entry(name)), ml_type, bits, values)


def test_compressed_reader_bf16_scales_and_dense_tensors(tmp_path):
    """DT-1: a bf16 compressed-tensors checkpoint: dense BF16 tensors and the layers' scales
    are bfloat16 (bits as stored), before and after conversion."""
    ck = write_ct_checkpoint(tmp_path / "ck", group_size=32, bf16=True)
    with reference.open(ck.folder) as ct:
        for name, bits in ck.dense.items():
            array = ct.tensor(name)
            assert array.dtype == np.dtype(ml_dtypes.bfloat16)
            np.testing.assert_array_equal(array.view(np.uint16), bits)
        for prefix in ct.layers():
            assert ct.linear(prefix).scales.dtype == np.dtype(ml_dtypes.bfloat16)
            assert ct.tensor(f"{prefix}.scales").dtype == np.dtype(ml_dtypes.bfloat16)


def test_dump_tensor_statistics_use_the_values(tmp_path, capsys):
    """DT-1: ``dump --tensor`` of a BF16 tensor gives the statistics of its values and shows
    them as bfloat16; an F8_E4M3 NaN is counted apart from the others, without warnings."""
    path = tmp_path / "d.awq2"
    bf = np.array([0x3F80, 0xC000, 0x4040, 0x4080], dtype=np.uint16)  # 1, -2, 3, 4
    with reference.Writer(path) as w:
        w.add("bf", bf, dtype="BF16")
        w.add("e4", E4M3_BITS, dtype="F8_E4M3")  # 1, 448, -448, NaN
        w.add("e5", E5M2_BITS[:1], dtype="F8_E5M2")  # 1
        w.add("nan", np.array([0x7F, 0xFF], dtype=np.uint8), dtype="F8_E4M3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dump_main([str(path), "--tensor", "bf"]) == 0
        out = capsys.readouterr().out
        # mean 6/4 = 1.5; std sqrt(((-0.5)^2 + 3.5^2 + 1.5^2 + 2.5^2) / 4) = sqrt(5.25)
        assert f"min -2  max 4  mean 1.5  std {5.25**0.5:.6g}  elements 4" in out
        assert "array([1, -2, 3, 4], dtype=dtype(bfloat16))" in out  # the values, not bits
        assert dump_main([str(path), "--tensor", "e4"]) == 0
        out = capsys.readouterr().out
        assert "min -448  max 448  mean 0.333333  std" in out  # (1 + 448 - 448) / 3
        assert "NaN 1  elements 4" in out
        assert "array([1, 448, -448, nan], dtype=dtype(float8_e4m3fn))" in out
        assert dump_main([str(path), "--tensor", "e5"]) == 0
        assert "min 1  max 1  mean 1  std 0  elements 1" in capsys.readouterr().out
        assert dump_main([str(path), "--tensor", "nan"]) == 0
        assert "all 2 values NaN  elements 2" in capsys.readouterr().out
