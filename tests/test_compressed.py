"""compressed-tensors ``pack-quantized`` checkpoints: reading, converting and refusing (CT-1..6).

The checkpoints come from ``ct_checkpoints`` (written from the library's layout, not from the
reader); expected weights are ``(q - zp) * scale`` of the values drawn there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from ct_checkpoints import LAYERS, pack_rows, write_ct_checkpoint, write_safetensors
from safetensors import safe_open

import reference
from reference.convert import main as convert_main
from reference.dump import main as dump_main
from reference.format.source import TensorSource
from reference.quant import codec
from reference.sources.compressed import CompressedReader
from reference.write.writer import PARTIAL_SUFFIX

MARLIN = {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"}
ODD = "model.layers.0.mlp.odd_proj"


def _convert(src: Path, dst: Path) -> None:
    assert convert_main([str(src), str(dst), "--quiet"]) == 0


def _check_layers(ck, reader, *, group_size: int) -> None:
    """Every layer dequantises to (q - zp) * scale exactly, with the right k, n, group size."""
    for prefix, layer in ck.layers.items():
        np.testing.assert_array_equal(reader.dequantize(prefix), layer.expected().T)
        lin = reader.linear(prefix)
        out, k = layer.q.shape
        assert (lin.k, lin.n, lin.bits, lin.group_size) == (k, out, 4, group_size)
        assert lin.layout == ("MARLIN" if prefix in MARLIN else "AWQ"), prefix


CASES = [
    ("asym g128", dict(group_size=128)),
    ("asym g64", dict(group_size=64)),
    ("asym g32 bf16", dict(group_size=32, bf16=True)),
    ("asym channel", dict(group_size=-1)),
    ("sym g128", dict(group_size=128, symmetric=True)),
    ("sym channel bf16", dict(group_size=-1, symmetric=True, bf16=True)),
    ("asym g128, 3 shards", dict(group_size=128, shards=3)),
]


@pytest.mark.parametrize(("case", "kw"), CASES, ids=[c[0] for c in CASES])
def test_reader_and_converted_file_dequantise_exactly(tmp_path, case, kw):
    """CT-1, CT-6: the checkpoint and its conversion give (q - zp) * scale for every layer
    (zero point 8 when symmetric); Marlin-legal layers are MARLIN, the odd one AWQ (LAY-8);
    dense tensors and the ignored lm_head are copied unchanged."""
    ck = write_ct_checkpoint(tmp_path / "ck", **kw)
    dst = tmp_path / "out.awq2"
    _convert(ck.folder, dst)
    with reference.open(ck.folder) as ct, reference.open(dst, validate=True) as v2:
        assert isinstance(ct, CompressedReader) and isinstance(ct, TensorSource)
        assert sorted(ct.layers()) == sorted(ck.layers)
        assert sorted(ct.names()) == sorted(v2.names())
        _check_layers(ck, ct, group_size=kw["group_size"])
        _check_layers(ck, v2, group_size=kw["group_size"])
        for name, value in ck.dense.items():  # bf16 ones: uint16 bits, read as bfloat16 [DT-1]
            assert v2.entry(name).layout == "DENSE"
            np.testing.assert_array_equal(v2.tensor(name).view(value.dtype), value)
        for name in v2.names():
            assert not name.endswith(("weight_packed", "weight_shape", "weight_zero_point"))
        meta = v2.metadata
        assert meta["quantization_config"]["quant_method"] == "compressed-tensors"
        assert meta["provenance"]["source_format"].startswith("compressed-tensors")


def test_marlin_bytes_are_the_codecs_encoding_of_the_codes(tmp_path):
    """CT-6: MARLIN_* payloads are the codec's swizzle of q + 8 and zp + 8 (transposed to
    [in, out]); AWQ_* payloads the AWQ packing; scales transposed, in their dtype."""
    ck = write_ct_checkpoint(tmp_path / "ck", group_size=128, bf16=True)
    dst = tmp_path / "out.awq2"
    _convert(ck.folder, dst)
    with reference.open(dst) as v2:
        for prefix, layer in ck.layers.items():
            q, z = layer.unsigned_codes().T, layer.unsigned_zeros().T
            s_bits = (layer.scale.view(np.uint32) >> 16).astype(np.uint16).T
            assert v2.entry(f"{prefix}.scales").dtype == "BF16"
            if prefix in MARLIN:
                want_q, want_z = codec.swizzle_qweight(q, 4), codec.swizzle_zeros(z, 4)
                s_float = s_bits.view(np.float16)  # permutation only: any 2-byte view will do
                want_s = codec.swizzle_scales(s_float, q.shape[0], 128).view(np.uint16)
            else:
                want_q, want_z, want_s = codec.awq_pack(q, 4), codec.awq_pack(z, 4), s_bits
            np.testing.assert_array_equal(v2.tensor(f"{prefix}.qweight"), want_q)
            np.testing.assert_array_equal(v2.tensor(f"{prefix}.qzeros"), want_z)
            assert v2.tensor(f"{prefix}.scales").dtype.name == "bfloat16"  # DT-1
            np.testing.assert_array_equal(v2.tensor(f"{prefix}.scales").view(np.uint16), want_s)


def test_single_file_with_config_beside_it(tmp_path):
    """CT-1: a lone model.safetensors is read with the config.json beside it."""
    ck = write_ct_checkpoint(tmp_path / "ck", group_size=64, symmetric=True)
    with reference.open(ck.folder / "model.safetensors") as ct:
        assert isinstance(ct, CompressedReader)
        _check_layers(ck, ct, group_size=64)


def test_input_size_not_a_multiple_of_8_channel(tmp_path):
    """CT-1: the last word of a row is padded; in = 100 reads and converts (AWQ layout)."""
    ck = write_ct_checkpoint(tmp_path / "ck", group_size=-1, layers=(("m.proj", 64, 100),))
    dst = tmp_path / "out.awq2"
    _convert(ck.folder, dst)
    with reference.open(ck.folder) as ct, reference.open(dst, validate=True) as v2:
        want = ck.layers["m.proj"].expected().T
        np.testing.assert_array_equal(ct.dequantize("m.proj"), want)
        np.testing.assert_array_equal(v2.dequantize("m.proj"), want)


def test_weight_actorder_and_identity_g_idx_are_accepted(tmp_path):
    """CT-2: actorder "weight" stores nothing different; a g_idx of column // group_size
    reorders nothing, so both read exactly."""
    ck = write_ct_checkpoint(tmp_path / "ck", group_size=128, layers=LAYERS[:1])
    _edit_weights(ck.folder, actorder="weight")
    _add_tensor(ck.folder, f"{LAYERS[0][0]}.weight_g_idx", np.arange(256, dtype=np.int32) // 128)
    with reference.open(ck.folder) as ct:
        _check_layers(ck, ct, group_size=128)


def test_mixed_precision_with_pack_quantized_groups(tmp_path):
    """CT-2: the global format mixed-precision is fine when each group says pack-quantized."""
    ck = write_ct_checkpoint(tmp_path / "ck", group_size=128)
    _edit_quant(ck.folder, format="mixed-precision")
    _edit_group(ck.folder, format="pack-quantized")
    with reference.open(ck.folder) as ct:
        _check_layers(ck, ct, group_size=128)


def test_dump_explains_the_checkpoint_file(tmp_path, capsys):
    """dump explains what reference.open opens: the checkpoint's safetensors file is a
    compressed-tensors checkpoint, not an AWQ-v2 file, and says how to convert it."""
    ck = write_ct_checkpoint(tmp_path / "ck")
    assert dump_main([str(ck.folder / "model.safetensors")]) == 0
    out = capsys.readouterr().out
    assert "not AWQ-v2" in out and "compressed-tensors" in out and "awq2-convert SRC DST" in out


def test_dry_run_plans_the_layers(tmp_path, capsys):
    ck = write_ct_checkpoint(tmp_path / "ck")
    dst = tmp_path / "out.awq2"
    assert convert_main([str(ck.folder), str(dst), "--dry-run", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["layers"] == 3 and summary["marlin_layers"] == 2
    assert summary["awq_layout_layers"] == [ODD]
    assert not dst.exists()
    _convert(ck.folder, dst)
    assert dst.stat().st_size == summary["file_size"]


# ------------------------------------------------------------------------------------ refusals


def _config(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def _save_config(folder: Path, config: dict) -> None:
    (folder / "config.json").write_text(json.dumps(config))


def _edit_quant(folder: Path, **changes) -> None:
    config = _config(folder)
    config["quantization_config"].update(changes)
    _save_config(folder, config)


def _edit_group(folder: Path, **changes) -> None:
    config = _config(folder)
    config["quantization_config"]["config_groups"]["group_0"].update(changes)
    _save_config(folder, config)


def _edit_weights(folder: Path, **changes) -> None:
    config = _config(folder)
    config["quantization_config"]["config_groups"]["group_0"]["weights"].update(changes)
    _save_config(folder, config)


def _tensors(folder: Path) -> dict[str, np.ndarray]:
    with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
        return {name: f.get_tensor(name) for name in f.keys()}


def _rewrite(folder: Path, edit: Callable[[dict[str, np.ndarray]], None]) -> None:
    tensors = _tensors(folder)
    edit(tensors)
    write_safetensors(folder / "model.safetensors", tensors)


def _add_tensor(folder: Path, name: str, value: np.ndarray) -> None:
    _rewrite(folder, lambda t: t.update({name: value}))


def _drop(part: str, prefix: str = LAYERS[0][0]) -> Callable[[Path], None]:
    return lambda d: _rewrite(d, lambda t: t.pop(f"{prefix}.{part}"))


def _set(part: str, value: np.ndarray, prefix: str = LAYERS[0][0]) -> Callable[[Path], None]:
    return lambda d: _add_tensor(d, f"{prefix}.{part}", value)


def _lone_file_without_config(d: Path) -> None:
    (d / "config.json").unlink()


def _orphan_scale(d: Path) -> None:
    _add_tensor(d, "model.layers.0.mlp.gate_proj.weight_scale", np.ones((256, 2), np.float16))


_Q = LAYERS[0][0]
_REVERSED_G_IDX = (np.arange(256, dtype=np.int32) // 128)[::-1].copy()
_FLOAT_INPUTS = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True,
                 "symmetric": True}  # fmt: skip

REFUSALS = [
    # CT-2: what the format cannot hold exactly
    ("format float-quantized", lambda d: _edit_quant(d, format="float-quantized"), "CT_UNSUPPORTED", "format"),
    ("format unknown", lambda d: _edit_quant(d, format="pack-quantized-v9"), "CT_UNSUPPORTED", "pack-quantized-v9"),
    ("group format naive", lambda d: _edit_group(d, format="naive-quantized"), "CT_UNSUPPORTED", "naive-quantized"),
    ("8-bit", lambda d: _edit_weights(d, num_bits=8), "CT_UNSUPPORTED", "num_bits"),
    ("2-bit", lambda d: _edit_weights(d, num_bits=2), "CT_UNSUPPORTED", "num_bits"),
    ("float weights", lambda d: _edit_weights(d, type="float"), "CT_UNSUPPORTED", "type"),
    ("tensor strategy", lambda d: _edit_weights(d, strategy="tensor", group_size=None), "CT_UNSUPPORTED", "strategy"),
    ("block strategy", lambda d: _edit_weights(d, strategy="block", group_size=None, block_structure=[128, 128]), "CT_UNSUPPORTED", "block"),
    ("dynamic", lambda d: _edit_weights(d, dynamic=True), "CT_UNSUPPORTED", "dynamic"),
    ("actorder group", lambda d: _edit_weights(d, actorder="group"), "CT_UNSUPPORTED", "actorder"),
    ("actorder true", lambda d: _edit_weights(d, actorder=True), "CT_UNSUPPORTED", "actorder"),
    ("g_idx reorders", _set("weight_g_idx", _REVERSED_G_IDX), "CT_UNSUPPORTED", f"{_Q}: activation ordering"),
    ("W4A8 input activations", lambda d: _edit_group(d, input_activations=_FLOAT_INPUTS), "CT_UNSUPPORTED", "input_activations"),
    ("output activations", lambda d: _edit_group(d, output_activations=_FLOAT_INPUTS), "CT_UNSUPPORTED", "output_activations"),
    ("KV cache", lambda d: _edit_quant(d, kv_cache_scheme=_FLOAT_INPUTS), "CT_UNSUPPORTED", "kv_cache_scheme"),
    ("sparsity", lambda d: _edit_quant(d, sparsity_config={"format": "sparse-24-bitmask"}), "CT_UNSUPPORTED", "sparsity_config"),
    ("transforms", lambda d: _edit_quant(d, transform_config={"config_groups": {"u": {}}}), "CT_UNSUPPORTED", "transform_config"),
    ("unknown weight argument", lambda d: _edit_weights(d, codebook="nf4"), "CT_UNSUPPORTED", "codebook"),
    ("out not a multiple of 8", lambda d: _rewrite_as(d, (("m.proj", 60, 128),)), "CT_UNSUPPORTED", "m.proj"),
    # CT-3: configuration
    ("no config_groups", lambda d: _edit_quant(d, config_groups=None), "CT_BAD_CONFIG", "config_groups"),
    ("num_bits a string", lambda d: _edit_weights(d, num_bits="4"), "CT_BAD_CONFIG", "num_bits"),
    ("ignore not a list", lambda d: _edit_quant(d, ignore="lm_head"), "CT_BAD_CONFIG", "ignore"),
    ("no config beside the file", _lone_file_without_config, "CT_BAD_CONFIG", "weight_packed"),
    # CT-4: missing parts
    ("no weight_scale", _drop("weight_scale"), "CT_INCOMPLETE", f"{_Q}: a quantised layer without weight_scale"),
    ("no weight_zero_point", _drop("weight_zero_point"), "CT_INCOMPLETE", "weight_zero_point"),
    ("no weight_shape", _drop("weight_shape"), "CT_INCOMPLETE", "weight_shape"),
    ("scale without weight_packed", _orphan_scale, "CT_INCOMPLETE", "gate_proj: a quantised layer without weight_packed"),
    # CT-5: parts that disagree
    ("scale shape", _set("weight_scale", np.ones((256, 3), np.float16)), "CT_SHAPE_MISMATCH", "weight_scale"),
    ("scale dtype", _set("weight_scale", np.ones((256, 2), np.int32)), "CT_SHAPE_MISMATCH", "weight_scale"),
    ("packed dtype", _set("weight_packed", np.zeros((256, 32), np.int64)), "CT_SHAPE_MISMATCH", "weight_packed"),
    ("zero point shape", _set("weight_zero_point", np.zeros((256, 2), np.int32)), "CT_SHAPE_MISMATCH", "weight_zero_point"),
    ("weight_shape disagrees", _set("weight_shape", np.array([256, 512])), "CT_SHAPE_MISMATCH", "weight_packed"),
    ("group size vs tensors", lambda d: _edit_weights(d, group_size=64), "CT_SHAPE_MISMATCH", "fit no configuration group"),
    ("symmetric config, zero points stored", lambda d: _edit_weights(d, symmetric=True), "CT_SHAPE_MISMATCH", "fit no configuration group"),
    ("quantised layer in ignore", lambda d: _edit_quant(d, ignore=["lm_head", _Q]), "CT_SHAPE_MISMATCH", "ignore"),
]  # fmt: skip


def _rewrite_as(folder: Path, layers) -> None:
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
    write_ct_checkpoint(folder, layers=layers)


@pytest.mark.parametrize(("case", "damage", "code", "says"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_problem_and_write_nothing(tmp_path, capsys, case, damage, code, says):
    """CT-2 (not representable), CT-3 (configuration), CT-4 (missing parts), CT-5 (parts that
    disagree); CT-6: nothing is published."""
    ck = write_ct_checkpoint(tmp_path / "ck", group_size=128)
    damage(ck.folder)
    src = ck.folder / "model.safetensors" if case == "no config beside the file" else ck.folder
    dst = tmp_path / "out.awq2"
    assert convert_main([str(src), str(dst)]) == 1
    err = capsys.readouterr().err
    assert f"[{code}]" in err and says in err, err
    assert not dst.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
    with pytest.raises(reference.LegacyError) as raised:
        reference.open(src)
    assert raised.value.code == code


@pytest.mark.parametrize("shards", [2])
def test_sharded_refusals_write_nothing(tmp_path, capsys, shards):
    """CT-4: a missing shard and a truncated one are refused before anything is written."""
    for damage in ("missing", "truncated"):
        ck = write_ct_checkpoint(tmp_path / damage, shards=shards)
        shard = sorted(ck.folder.glob("model-*.safetensors"))[-1]
        if damage == "missing":
            shard.unlink()
        else:
            shard.write_bytes(shard.read_bytes()[:-1000])
        dst = tmp_path / f"{damage}.awq2"
        assert convert_main([str(ck.folder), str(dst)]) == 1
        err = capsys.readouterr().err
        assert "[CT_INCOMPLETE]" in err and damage in err, err
        assert not dst.exists()


def test_pack_rows_is_the_documented_layout():
    """The test packer itself: word 0 of a row of 0..7 reads 0x76543210."""
    words = pack_rows(np.arange(8, dtype=np.uint8)[None, :])
    assert words.view(np.uint32)[0, 0] == 0x76543210
