"""``awq2-dump`` on the user's journey (issue 30): a short text by default, ``--config`` for the
whole configuration, ``--json --tensor`` as one JSON document, ``--layer`` for a quantised
layer, a rank set's members by rank and its metadata checked [SET-14], Ctrl-C as exit 130.

Expected values come from the example checkpoint itself: its ``config.json`` and its
safetensors file read with the ``safetensors`` package, its AWQ v1 layers dequantised here
from the packing order the spec states (``spec.marlin.AWQ_ORDER``), never from the dump.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file

import reference
from reference import dump
from reference.convert import convert_folder
from reference.dump import main as dump_main
from reference.examples import LlamaShape, write_checkpoint
from reference.sets.setmanifest import rank_record
from spec.constants import SET_MANIFEST
from spec.marlin import AWQ_ORDER

DOWN = "model.layers.0.mlp.down_proj"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("journey")
    src = write_checkpoint(tmp / "src", LlamaShape())
    convert_folder(src, tmp / "single", jobs=1)
    convert_folder(src, tmp / "ranks", jobs=2, tp_size=2)
    return {"src": src, "single": tmp / "single", "ranks": tmp / "ranks"}


def _config(src: Path) -> dict[str, Any]:
    return json.loads((src / "config.json").read_text(encoding="utf-8"))


def _stats(values: np.ndarray) -> tuple[float, float, float, float]:
    v = values.astype(np.float64)
    return float(v.min()), float(v.max()), float(v.mean()), float(v.std())


def _unpack_awq(words: np.ndarray, bits: int = 4) -> np.ndarray:
    """AWQ v1 words ``[rows, n / (32 / bits)]`` to codes ``[rows, n]``: field ``i`` of word
    ``c`` holds column ``pf * c + AWQ_ORDER[bits][i]`` (spec.marlin)."""
    pf = 32 // bits
    u = words.astype(np.uint32)
    codes = np.zeros((u.shape[0], u.shape[1] * pf), np.int64)
    for i, column in enumerate(AWQ_ORDER[bits]):
        codes[:, column::pf] = (u >> np.uint32(bits * i)) & np.uint32((1 << bits) - 1)
    return codes


def _dequantised_source(src: Path, prefix: str, group: int) -> np.ndarray:
    """``(code - zero) * scale`` of an AWQ v1 layer, from the checkpoint's own tensors."""
    t = load_file(str(src / "model.safetensors"))
    q, z = _unpack_awq(t[f"{prefix}.qweight"]), _unpack_awq(t[f"{prefix}.qzeros"])
    scales = t[f"{prefix}.scales"].astype(np.float64)
    rows = np.arange(q.shape[0]) // group
    return (q - z[rows]) * scales[rows]


# ------------------------------------------------------------------ the short text, --config


def test_the_text_is_short_and_config_prints_the_whole_configuration(model, capsys):
    config = _config(model["src"])
    assert dump_main([str(model["single"])]) == 0
    text = capsys.readouterr().out
    head = text.split("\n\n")[0].splitlines()
    assert len(head) <= 15, head  # the format facts and a few summary lines, then the table
    assert f"  architecture     {config['architectures'][0]}" in head
    assert f"  hidden layers    {config['num_hidden_layers']}" in head
    assert f"  hidden size      {config['hidden_size']}" in head
    q = config["quantization_config"]
    layers = 7 * config["num_hidden_layers"]
    assert f"  quantisation     {q['bits']}-bit, group size {q['group_size']}, Marlin " \
           f"({layers} layers)" in head  # fmt: skip
    assert "  source format    AWQ v1 (AutoAWQ GEMM, safetensors)" in head
    assert any(line.endswith("lines (--config prints them)") for line in head)
    assert "rms_norm_eps" not in text  # the configuration itself is not printed
    assert "lm_head.weight" in text  # the table is
    assert dump_main([str(model["single"]), "--config"]) == 0
    whole = capsys.readouterr().out
    for key in config:  # every key of config.json, as the metadata records it
        assert f'"{key}":' in whole, key


def test_json_keeps_every_key(model, capsys):
    assert dump_main([str(model["single"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["valid", "verified", "path", "format_version", "file_size",
                         "slab_offset", "alignment", "index_offset", "index_length",
                         "required_flags", "optional_flags", "tensor_count", "metadata",
                         "tensors"]  # fmt: skip
    assert doc["metadata"]["config"]["hidden_size"] == _config(model["src"])["hidden_size"]


# ------------------------------------------------------------------ --tensor and --layer


def test_json_tensor_is_one_json_document(model, capsys):
    """``--json --tensor NAME``: exactly one document on stdout (the summary used to come
    first, then text), the statistics those of the source's own tensor."""
    source = load_file(str(model["src"] / "model.safetensors"))["lm_head.weight"]
    assert dump_main([str(model["single"]), "--json", "--tensor", "lm_head.weight"]) == 0
    doc = json.loads(capsys.readouterr().out)  # one document, nothing after it
    assert doc["valid"] is True and doc["tensor"]["name"] == "lm_head.weight"
    assert doc["tensor"]["shape"] == list(source.shape) == [512, 256]
    got = doc["statistics"]
    assert (got["min"], got["max"]) == _stats(source)[:2]
    assert got["mean"] == pytest.approx(_stats(source)[2]) and got["elements"] == source.size
    assert got["std"] == pytest.approx(_stats(source)[3])


@pytest.mark.parametrize("as_json", [False, True])
def test_a_layer_given_to_tensor_is_a_usage_error(model, capsys, as_json):
    argv = [str(model["single"]), "--tensor", DOWN, *(["--json"] if as_json else [])]
    assert dump_main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: {DOWN} is a quantised layer; use --layer {DOWN}\n"
    assert captured.out == ""  # nothing printed before the usage error


def test_layer_explains_a_quantised_layer(model, capsys):
    """``--layer``: bits, group size, layout family, in/out features and stored tensors as
    the source says, statistics of the weights dequantised here from the AWQ v1 source."""
    shape = LlamaShape()
    q = _config(model["src"])["quantization_config"]
    want = _stats(_dequantised_source(model["src"], DOWN, q["group_size"]))
    for path, family in ((model["single"], "MARLIN"), (model["src"], "AWQ")):
        assert dump_main([str(path), "--json", "--layer", DOWN]) == 0
        layer = json.loads(capsys.readouterr().out)["layer"]
        assert (layer["bits"], layer["group_size"]) == (q["bits"], q["group_size"])
        assert layer["layout"] == family
        assert (layer["in_features"], layer["out_features"]) == (
            shape.intermediate_size, shape.hidden_size)  # fmt: skip
        assert sorted(t["name"] for t in layer["tensors"]) == [
            f"{DOWN}.{p}" for p in ("qweight", "qzeros", "scales")]  # fmt: skip
        w = layer["weights"]
        assert w["shape"] == [shape.intermediate_size, shape.hidden_size]
        assert (w["min"], w["max"]) == pytest.approx(want[:2])
        assert (w["mean"], w["std"]) == pytest.approx(want[2:], rel=1e-5, abs=1e-7)
    assert dump_main([str(model["single"]), "--layer", DOWN]) == 0
    text = capsys.readouterr().out.split("\n\n")[-1]
    assert text.startswith(f"layer {DOWN}\n")
    assert "  stored layout    Marlin\n" in text and f"{DOWN}.qweight" in text
    assert f"  in features      {shape.intermediate_size} (k)\n" in text
    assert f"  dequantised      float32 {shape.intermediate_size}x{shape.hidden_size}: min " in text


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("model.norm.weight", "is a tensor, not a quantised layer; use --tensor model.norm"),
        (f"{DOWN}.qweight", f"is a tensor of the quantised layer {DOWN}; use --layer {DOWN}"),
        ("no.such", "no quantised layer named 'no.such'"),
    ],
)
def test_layer_of_what_is_not_a_layer_is_a_usage_error(model, capsys, name, message):
    assert dump_main([str(model["single"]), "--layer", name]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""


# ------------------------------------------------------------------ rank sets


def test_a_rank_set_shows_its_members_by_rank_and_needs_a_rank(model, capsys):
    ranks = model["ranks"]
    manifest = json.loads((ranks / SET_MANIFEST).read_text(encoding="utf-8"))
    assert dump_main([str(ranks)]) == 0
    lines = capsys.readouterr().out.splitlines()
    for f in manifest["files"]:
        at = lines.index(f"    rank {f['rank']}")
        assert lines[at + 1].startswith(f"      {f['name']}  {f['size']:,} bytes")
    # a rank's tensor needs --rank: exit 2, no rank-0 answer in its place
    assert dump_main([str(ranks), "--tensor", "lm_head.weight", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "--rank 0..1" in captured.err
    assert "tensor parallelism 2" in captured.err
    # rank 1's shard: rows 256..511 of the source's lm_head (512 rows: no padding)
    source = load_file(str(model["src"] / "model.safetensors"))["lm_head.weight"]
    assert dump_main([str(ranks), "--tensor", "lm_head.weight", "--rank", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rank"] == 1 and doc["tensor"]["shape"] == [256, 256]
    assert (doc["statistics"]["min"], doc["statistics"]["max"]) == _stats(source[256:])[:2]
    assert dump_main([str(ranks), "--layer", DOWN, "--rank", "2"]) == 2
    assert "ranks 0..1" in capsys.readouterr().err


def _hand_rank_set(folder: Path, metadata: tuple[dict[str, Any], dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    files = []
    for rank, meta in enumerate(metadata):
        path = folder / f"m-rank{rank}.awq2"
        meta = {**meta, **rank_record(rank, 2)}  # each member's own rank [SET-15]
        reference.save(path, {"w": np.full((4, 8), rank, np.float16)}, metadata=meta)
        data = path.read_bytes()
        files.append({"name": path.name, "size": len(data), "rank": rank,
                      "header_crc": f"{int.from_bytes(data[124:128], 'little'):08x}",
                      "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    manifest = {"awq2_set": 1, "kind": "rank", "tp_size": 2, "files": files}
    (folder / SET_MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def test_a_rank_set_whose_metadata_differs_is_invalid(tmp_path, capsys):
    """[SET-14]: dump checks every rank's metadata instead of showing rank 0's: exit 1, the
    code, both members named."""
    folder = _hand_rank_set(tmp_path / "set", ({"config": {"x": 1}}, {"config": {"x": 2}}))
    assert dump_main([str(folder)]) == 1
    text = capsys.readouterr().out
    assert "TP_METADATA_MISMATCH" in text and "m-rank0.awq2" in text and "m-rank1.awq2" in text
    assert dump_main([str(folder), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["code"] == "TP_METADATA_MISMATCH"
    same = _hand_rank_set(tmp_path / "same", ({"config": {"x": 1}}, {"config": {"x": 1}}))
    assert dump_main([str(same)]) == 0


# ------------------------------------------------------------------ the command itself


def test_the_command_is_awq2_dump(model, capsys):
    parser = dump.build_parser()
    assert parser.prog == "awq2-dump"
    help_text = " ".join(parser.format_help().split())
    assert "130 interrupted" in help_text and "--layer PREFIX" in help_text
    assert dump_main([str(model["src"])]) == 0
    text = capsys.readouterr().out
    assert "  convert with     awq2-convert SRC DST\n" in text and "python -m" not in text


def test_ctrl_c_is_one_line_and_exit_130(model, monkeypatch, capsys):
    def interrupted(*_args: Any, **_kw: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(dump, "summary", interrupted)
    try:
        status = dump_main([str(model["single"])])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped dump.main")
    assert status == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_ctrl_c_as_a_process(model):
    """A real SIGINT while dumping: one line on stderr, exit 130, no traceback."""
    code = textwrap.dedent(f"""
        import os, signal, sys
        from reference import dump
        real = dump.summary
        def summary(*args, **kw):
            os.kill(os.getpid(), signal.SIGINT)
            return real(*args, **kw)
        dump.summary = summary
        sys.argv = ["awq2-dump", {str(model["single"])!r}]
        sys.exit(dump._entry_point())
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 130, done
    assert done.stderr == "interrupted\n"
