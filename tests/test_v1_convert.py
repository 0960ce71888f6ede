"""AWQ v1 checkpoints: the example generator, the v1 reader, the converter and its refusals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open

import reference
from reference.convert import main as convert_main
from reference.examples import LlamaShape, write_checkpoint
from reference.quant import codec
from reference.sources.v1 import V1Reader
from reference.write.writer import PARTIAL_SUFFIX, stale_partials

ROOT = Path(__file__).resolve().parent.parent
AWQ_ORDER_4BIT = [0, 2, 4, 6, 1, 3, 5, 7]  # docs/spec/codec.md, "AWQ v1"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("v1") / "tiny")


@pytest.fixture(scope="module")
def converted(checkpoint, tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("v2") / "tiny.awq2"
    assert convert_main([str(checkpoint), str(dst), "--quiet"]) == 0
    return dst


def test_example_is_written_as_autoawq_writes_it(checkpoint):
    """Names, dtypes, config keys, and the AWQ v1 packing of the codec chapter, bit by bit."""
    config = json.loads((checkpoint / "config.json").read_text())
    q = config["quantization_config"]
    assert q == {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                 "version": "gemm", "modules_to_not_convert": None}  # fmt: skip
    with safe_open(str(checkpoint / "model.safetensors"), framework="numpy") as f:
        names = set(f.keys())
        assert f.metadata() == {"format": "pt"}
        qweight = f.get_tensor("model.layers.1.self_attn.k_proj.qweight")
        qzeros = f.get_tensor("model.layers.1.self_attn.k_proj.qzeros")
        scales = f.get_tensor("model.layers.1.self_attn.k_proj.scales")
    for part in ("qweight", "qzeros", "scales"):
        assert f"model.layers.0.mlp.down_proj.{part}" in names
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= names
    assert qweight.dtype == np.int32 and qweight.shape == (256, 128 // 8)
    assert qzeros.dtype == np.int32 and qzeros.shape == (2, 16)
    assert scales.dtype == np.float16 and scales.shape == (2, 128)
    # unpack by the written rule: field i of word (r, c) holds q[r, 8c + ORDER[i]]
    words = qweight.view(np.uint32)
    q = np.zeros((256, 128), dtype=np.uint8)
    for i, col in enumerate(AWQ_ORDER_4BIT):
        q[:, col::8] = (words >> np.uint32(4 * i)) & np.uint32(15)
    np.testing.assert_array_equal(codec.awq_unpack(qweight, 4), q)


def test_example_generator_is_deterministic(tmp_path):
    a = write_checkpoint(tmp_path / "a") / "model.safetensors"
    b = write_checkpoint(tmp_path / "b") / "model.safetensors"
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize("shards", [1, 3])
def test_v1_and_converted_v2_answer_identically(tmp_path, shards):
    """V1-1, V1-5: same API, same answers: names, dense tensors, linear() and dequantize()."""
    src = write_checkpoint(tmp_path / "ck", LlamaShape(attention_bias=True), shards=shards)
    dst = tmp_path / "out.awq2"
    assert convert_main([str(src), str(dst), "--quiet"]) == 0
    with reference.open(src) as v1, reference.open(dst, validate=True) as v2:
        assert isinstance(v1, V1Reader) and isinstance(v2, reference.Reader)
        assert sorted(v1.names()) == sorted(v2.names())
        assert sorted(v1.layers()) == sorted(v2.layers()) and len(v1.layers()) == 14
        assert v2.metadata["config"] == v1.metadata["config"]
        assert v2.metadata["quantization_config"] == v1.metadata["quantization_config"]
        for name in v1.names():
            if name.rsplit(".", 1)[0] not in v1.layers():
                np.testing.assert_array_equal(v1.tensor(name), v2.tensor(name))
        for prefix in v1.layers():
            a, b = v1.linear(prefix), v2.linear(prefix)
            assert (a.layout, a.k, a.n, a.bits, a.group_size) == (
                b.layout,
                b.k,
                b.n,
                b.bits,
                b.group_size,
            )
            for part in ("qweight", "scales", "qzeros", "bias"):
                x, y = getattr(a, part), getattr(b, part)
                assert (x is None) == (y is None)
                if x is not None:
                    np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(v1.dequantize(prefix), v2.dequantize(prefix))
            # the stored Marlin bytes are the repack an engine computes from the v1 tensors
            mq, ms, mz = codec.awq_to_marlin(v1.tensor(f"{prefix}.qweight"),
                                             v1.tensor(f"{prefix}.qzeros"),
                                             v1.tensor(f"{prefix}.scales"), bits=4, group_size=128)  # fmt: skip
            assert v2.tensor(f"{prefix}.qweight").tobytes() == mq.tobytes()
            assert v2.tensor(f"{prefix}.scales").tobytes() == ms.tobytes()
            assert v2.tensor(f"{prefix}.qzeros").tobytes() == mz.tobytes()


def test_conversion_records_provenance_and_is_deterministic(checkpoint, converted, tmp_path):
    """META-3 (config, quantisation config, provenance) and WR-1 (same input, same bytes)."""
    with reference.open(converted) as f:
        prov = f.metadata["provenance"]
    (source,) = prov["source_files"]
    assert source["name"] == "model.safetensors"
    assert source["size"] == (checkpoint / "model.safetensors").stat().st_size
    assert len(source["sha256"]) == 64
    again = tmp_path / "again.awq2"
    assert convert_main([str(checkpoint), str(again), "--quiet"]) == 0
    assert again.read_bytes() == converted.read_bytes()


def test_dry_run_predicts_the_exact_size_and_writes_nothing(
    checkpoint, converted, tmp_path, capsys
):
    dst = tmp_path / "planned.awq2"
    assert convert_main([str(checkpoint), str(dst), "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["file_size"] == converted.stat().st_size
    assert plan["tensors"] == 49 and plan["layers"] == 14
    assert not dst.exists()


def test_non_marlin_layers_keep_the_v1_layout_and_are_listed(tmp_path, capsys):
    """LAY-8: intermediate 704 -> down_proj k % 128 != 0 -> AWQ layout, named in the summary."""
    src = write_checkpoint(tmp_path / "odd", LlamaShape(intermediate_size=704, group_size=64))
    dst = tmp_path / "odd.awq2"
    assert convert_main([str(src), str(dst), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["awq_layout_layers"] == [f"model.layers.{i}.mlp.down_proj" for i in range(2)]
    with reference.open(src) as v1, reference.open(dst, validate=True) as v2:
        layer = v2.linear("model.layers.0.mlp.down_proj")
        assert layer.layout == "AWQ" and layer.k == 704
        np.testing.assert_array_equal(
            layer.qweight, v1.tensor("model.layers.0.mlp.down_proj.qweight")
        )
        for prefix in v1.layers():
            np.testing.assert_array_equal(v1.dequantize(prefix), v2.dequantize(prefix))


def _edit_config(folder: Path, **changes) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["quantization_config"].update(changes.pop("quant", {}))
    config.update(changes)
    path.write_text(json.dumps(config))


def _break_shard_index(folder: Path) -> None:
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.9.phantom.weight"] = next(iter(index["weight_map"].values()))
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


def _truncate_last_shard(folder: Path) -> None:
    shard = sorted(folder.glob("model-*.safetensors"))[-1]
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) - 1000])


REFUSALS = [
    ("GPTQ", lambda d: _edit_config(d, quant={"quant_method": "gptq"}), "V1_UNSUPPORTED", "gptq"),
    ("gemv", lambda d: _edit_config(d, quant={"version": "gemv"}), "V1_UNSUPPORTED", "gemv"),
    ("gemv_fast", lambda d: _edit_config(d, quant={"version": "gemv_fast"}), "V1_UNSUPPORTED", "gemv_fast"),
    ("AutoAWQ marlin", lambda d: _edit_config(d, quant={"version": "marlin"}), "V1_UNSUPPORTED", "marlin"),
    ("no zero point", lambda d: _edit_config(d, quant={"zero_point": False}), "V1_UNSUPPORTED", "zero_point"),
    ("3-bit", lambda d: _edit_config(d, quant={"bits": 3}), "V1_UNSUPPORTED", "bits"),
    ("group size 96", lambda d: _edit_config(d, quant={"group_size": 96}), "V1_SHAPE_MISMATCH", "group_size"),
    ("group size 64 vs tensors", lambda d: _edit_config(d, quant={"group_size": 64}), "V1_SHAPE_MISMATCH", "qzeros"),
    ("hidden size", lambda d: _edit_config(d, hidden_size=512), "V1_SHAPE_MISMATCH", "hidden_size"),
    ("missing shard", lambda d: sorted(d.glob("model-*.safetensors"))[0].unlink(), "V1_INCOMPLETE", "missing"),
    ("tensor missing from shard", _break_shard_index, "V1_INCOMPLETE", "phantom"),
    ("truncated shard", _truncate_last_shard, "V1_INCOMPLETE", "truncated"),
    ("bad config JSON", lambda d: (d / "config.json").write_text("{oops"), "V1_BAD_CONFIG", "JSON"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "damage", "code", "says"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_name_the_problem_and_write_nothing(tmp_path, capsys, case, damage, code, says):
    """V1-2 (unsupported method/version/zero point/bits), V1-3 (missing or truncated parts),
    V1-4 (shapes that disagree); V1-5: nothing is published."""
    src = write_checkpoint(tmp_path / "ck", shards=2)
    damage(src)
    dst = tmp_path / "out.awq2"
    assert convert_main([str(src), str(dst)]) == 1
    err = capsys.readouterr().err
    assert f"[{code}]" in err and says in err, err
    assert not dst.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]


def test_legacy_quant_config_json_is_read(tmp_path):
    src = write_checkpoint(tmp_path / "old")
    config = json.loads((src / "config.json").read_text())
    del config["quantization_config"]
    (src / "config.json").write_text(json.dumps(config))
    (src / "quant_config.json").write_text(json.dumps(
        {"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"}))  # fmt: skip
    with reference.open(src) as f:
        assert f.quant.bits == 4 and f.quant.group_size == 128
        assert f.linear("model.layers.0.self_attn.q_proj").layout == "MARLIN"


def test_single_safetensors_file_opens_as_v1(checkpoint):
    with reference.open(checkpoint / "model.safetensors") as f:
        assert isinstance(f, V1Reader)
        assert f.dequantize("model.layers.0.mlp.up_proj").shape == (256, 512)


@pytest.mark.slow
def test_interrupted_conversion_leaves_no_destination(tmp_path):
    """V1-5, WR-2: kill the converter mid-write; DST never appears; the next run cleans up."""
    src = write_checkpoint(tmp_path / "big", LlamaShape(hidden_size=1024, intermediate_size=4096,
                                                        num_hidden_layers=4, vocab_size=4096))  # fmt: skip
    dst = tmp_path / "big.awq2"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "reference.convert", str(src), str(dst), "--quiet"],
                            env=env, cwd=ROOT)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob(f".big.awq2.*{PARTIAL_SUFFIX}")):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not dst.exists(), "the destination appeared although the converter was killed"
    leftovers = stale_partials(dst)
    assert leftovers, "the killed writer's temporary file should be recognisable"
    assert convert_main([str(src), str(dst), "--quiet"]) == 0
    assert not stale_partials(dst) and dst.exists()
