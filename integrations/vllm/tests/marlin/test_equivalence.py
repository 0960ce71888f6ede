"""The plugin's layers hold, bit for bit, what vLLM 0.33's own AWQ path holds after
``process_weights_after_loading`` (tests/awq_reference.py says how that is computed on the CPU),
for QKVParallelLinear, MergedColumnParallelLinear and RowParallelLinear (o_proj, down_proj),
at TP = 1 and TP = 2 (two processes on gloo); and the comparison fails when one byte of a
stored Marlin tensor changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import awq_reference
import pytest
from checkpoints import make

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return make(tmp_path_factory.mktemp("ckpt"))


def _run_ranks(world: int, v1: Path, served: Path, tmp: Path, dtype: str = "float16") -> list[list]:
    port = awq_reference.ports() + world + (20 if dtype != "float16" else 0)
    env = {**os.environ, "AWQ2_TEST_DTYPE": dtype}
    procs, outs = [], []
    for rank in range(world):
        out = tmp / f"rank{world}-{rank}.json"
        outs.append(out)
        cmd = [sys.executable, str(HERE / "tp_worker.py"), str(rank), str(world), str(port),
               str(v1), str(served), str(out)]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env))
    for p in procs:
        assert p.wait(timeout=600) == 0
    return [row for out in outs for row in json.loads(out.read_text())]


def _table(rows: list[list]) -> str:
    lines = ["layer kind   TP rank parameter equal  first difference"]
    for kind, tp, rank, name, equal, where in rows:
        lines.append(f"0     {kind:<8} {tp:<2} {rank:<4} {name:<9} {equal!s:<6} {where}")
    return "\n".join(lines)


@pytest.mark.parametrize("world", [1, 2])
def test_every_parameter_equals_vllms_awq_path(folders, tmp_path, world):
    v1, served = folders
    rows = _run_ranks(world, v1, served, tmp_path)
    print(f"\nequivalence table (vLLM {_vllm_version()}):\n" + _table(rows))
    kinds = {(r[0], r[2]) for r in rows}
    assert kinds == {(k, r) for k in awq_reference.LINEAR_KINDS for r in range(world)}
    assert {r[3] for r in rows if r[0] == "qkv"} == {"qweight", "scales", "qzeros", "bias"}
    assert all(r[4] for r in rows), _table([r for r in rows if not r[4]])


def test_a_rank_set_at_tp_2_holds_the_same_bytes_each_rank_reading_only_its_files(
    folders, tmp_path
):
    """``convert --tp 2`` writes a rank set; at TP 2 each worker opens only its own rank's
    member and its layers equal vLLM's AWQ path cutting the original checkpoint."""
    import subprocess as sp

    from reference.sets.setmanifest import read_manifest

    v1, _ = folders
    ranked = tmp_path / "tp2"
    sp.run([sys.executable, "-m", "reference.convert", str(v1), f"{ranked}/", "--tp", "2",
            "--quiet"], check=True)  # fmt: skip
    manifest = read_manifest(ranked / "model.awq2.set.json")
    own = {r: sorted(m.name for m in manifest.members if m.rank == r) for r in (0, 1)}
    rows = _run_ranks(2, v1, ranked, tmp_path)
    print("\nequivalence table, rank set at TP 2:\n" + _table(rows))
    assert {(r[0], r[2]) for r in rows} == {(k, r) for k in awq_reference.LINEAR_KINDS
                                            for r in (0, 1)}  # fmt: skip
    assert all(r[4] for r in rows), _table([r for r in rows if not r[4]])
    for rank in (0, 1):
        reports = json.loads((tmp_path / f"rank2-{rank}.report.json").read_text())
        print(
            f"rank {rank}: opened {sorted({f for r in reports for f in r['files']})}, "
            f"read {sum(r['bytes_read'] for r in reports)} bytes for the 4 layers"
        )
        assert all(r["kind"] == "rank" and sorted(r["files"]) == own[rank] for r in reports)


def test_bf16_model_holds_the_same_bytes_as_vllm(folders, tmp_path):
    """A bf16 model: the F16 scales are cast to bf16 by the plugin where vLLM's weight loader
    casts them (the copy into its bf16 parameter); the results must agree bit for bit."""
    v1, served = folders
    rows = _run_ranks(1, v1, served, tmp_path, dtype="bfloat16")
    print("\nequivalence table, bf16 model:\n" + _table(rows))
    assert len(rows) == 13 and all(r[4] for r in rows), _table([r for r in rows if not r[4]])


def test_one_flipped_byte_fails_the_comparison(folders, tmp_path):
    from reference.format.reader import Reader

    v1, served = folders
    broken = tmp_path / "broken"
    shutil.copytree(served, broken)
    with Reader(broken / "model.awq2") as reader:
        entry = reader.entry("model.layers.0.mlp.up_proj.qzeros")
    with open(broken / "model.awq2", "r+b") as f:
        f.seek(entry.offset + 5)
        byte = f.read(1)[0]
        f.seek(entry.offset + 5)
        f.write(bytes([byte ^ 0x10]))
    rows = _run_ranks(1, v1, broken, tmp_path)
    print("\nwith one byte of model.layers.0.mlp.up_proj.qzeros flipped:\n" + _table(rows))
    bad = [r for r in rows if not r[4]]
    assert [(r[0], r[3]) for r in bad] == [("gate_up", "qzeros")]


def _vllm_version() -> str:
    import vllm

    return vllm.__version__


def test_a_symmetric_source_gets_vllms_symmetric_call(tmp_path):
    """llm-compressor's symmetric W4A16 checkpoint (every zero point 8): after loading, the
    layer holds the empty zero-point tensor and is called with uint4b8, as vLLM's
    compressed-tensors path does (``compressed_tensors_wNa16.py``: ``uint4b8``,
    ``zero_points=False``; ``MarlinLinearKernel``: ``marlin_make_empty``); an asymmetric
    AutoAWQ one keeps its zero points and uint4."""
    import subprocess as sp

    root = HERE.parents[3] / "tests" / "fixtures" / "real"
    out = {}
    for name in ("ct_w4a16_sym_g128", "autoawq_gemm_g128"):
        src = tmp_path / "src" / name
        src.mkdir(parents=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(root / name / f, src / f)
        served = tmp_path / "served" / name
        served.parent.mkdir(exist_ok=True)
        sp.run([sys.executable, "-m", "reference.convert", str(src), f"{served}/", "--quiet"],
               check=True)  # fmt: skip
        with awq_reference.vllm_context():
            awq_reference.init_distributed(0, 1, awq_reference.ports() + 31)
            layer = awq_reference.plugin_layer("o", served)
        out[name] = (layer.quant_method.symmetric, layer.qzeros.numel())
    assert out["ct_w4a16_sym_g128"] == (True, 0)
    assert out["autoawq_gemm_g128"][0] is False and out["autoawq_gemm_g128"][1] > 0
