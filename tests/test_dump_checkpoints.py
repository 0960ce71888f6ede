"""``awq2-dump`` (``python -m reference.dump``) explains what ``reference.open`` opens: a legacy checkpoint
folder (AWQ v1 or compressed-tensors) or one of its safetensors files, as well as AWQ-v2.

The fixtures are the real quantisers' checkpoints (``tests/fixtures/real/``); the expected
counts come from their ``config.json`` (a Llama decoder layer has 7 quantised linears, each
shown as qweight, qzeros and scales; 2 norms a layer, plus the final norm, the embedding and
``lm_head``), not from the reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reference.dump import main as dump_main
from reference.examples import write_checkpoint

REAL = Path(__file__).parent / "fixtures" / "real"


def _expected_counts(folder: Path) -> tuple[int, int]:
    """(tensors, quantised layers) of a two-layer Llama fixture, from its config.json."""
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    layers = config["num_hidden_layers"]
    linears = 7 * layers
    return 3 * linears + 2 * layers + 3, linears


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("ct_w4a16_sym_g128", "compressed-tensors"),
        ("ct_awq_w4a16_asym_g128", "compressed-tensors"),
        ("autoawq_gemm_g128", "AWQ v1"),
    ],
)
def test_json_of_a_checkpoint_folder(name, source, capsys):
    folder = REAL / name
    assert dump_main([str(folder), "--json", "--verify"]) == 0
    doc = json.loads(capsys.readouterr().out)
    tensors, layers = _expected_counts(folder)
    assert doc["valid"] is True and doc["verified"] is True
    assert doc["source_format"].startswith(source)
    assert doc["files"] == [
        {"name": "model.safetensors", "size": (folder / "model.safetensors").stat().st_size}
    ]
    assert doc["tensor_count"] == tensors == len(doc["tensors"])
    assert len(doc["layers"]) == layers
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert doc["metadata"]["quantization_config"] == config["quantization_config"]
    qweights = [t for t in doc["tensors"] if t["name"].endswith(".qweight")]
    assert len(qweights) == layers
    assert {t["layout"] for t in qweights} == {"AWQ_QWEIGHT"}
    assert {t["group_size"] for t in qweights} == {128}


def test_text_of_a_checkpoint_folder(capsys):
    folder = REAL / "ct_w4a16_asym_g32"
    assert dump_main([str(folder)]) == 0
    out = capsys.readouterr().out
    tensors, layers = _expected_counts(folder)
    assert out.startswith(f"legacy checkpoint {folder} (not AWQ-v2)\n")
    assert f"  tensors          {tensors} " in out
    assert f"  layers           {layers}\n" in out
    assert "  convert with     awq2-convert SRC DST\n" in out  # the console script's name
    weights = json.loads((folder / "config.json").read_text(encoding="utf-8"))[
        "quantization_config"]["config_groups"]["group_0"]["weights"]  # fmt: skip
    assert (f"  quantisation     {weights['num_bits']}-bit, group size {weights['group_size']}, "
            f"AWQ ({layers} layers)\n") in out  # fmt: skip
    assert '"quantization_config"' not in out  # the whole configuration: only with --config
    assert "AWQ_QWEIGHT 4b g32 k128 n128" in out  # q_proj: hidden 128 -> 4 heads x 32


def test_tensor_of_a_checkpoint(capsys):
    """--tensor works on a checkpoint; an unknown name is a usage error (2)."""
    folder = REAL / "autoawq_gemm_g128"
    assert dump_main([str(folder), "--tensor", "model.norm.weight"]) == 0
    assert "elements 128" in capsys.readouterr().out
    assert dump_main([str(folder), "--tensor", "no.such"]) == 2


def test_hexdump_of_a_checkpoint_is_a_usage_error(capsys):
    assert dump_main([str(REAL / "ct_w4a16_sym_g128"), "--hexdump"]) == 2
    assert "legacy checkpoint" in capsys.readouterr().err


def test_a_refused_checkpoint_is_invalid_with_its_code(capsys):
    """W8A8 (activation quantisation) is refused by the reader: exit 1, its code, no header
    fields (a folder has no AWQ-v2 header)."""
    assert dump_main([str(REAL / "ct_w8a8"), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and doc["error"]["code"] == "CT_UNSUPPORTED"
    assert doc["header"] is None
    assert dump_main([str(REAL / "ct_w8a8")]) == 1
    assert "CT_UNSUPPORTED" in capsys.readouterr().out


def test_a_v1_folder_and_an_empty_folder(tmp_path, capsys):
    """An AWQ v1 folder written by reference.examples is explained; a folder with no
    checkpoint in it is an invalid input (exit 1, V1_INCOMPLETE), not an I/O error."""
    src = write_checkpoint(tmp_path / "v1")
    assert dump_main([str(src)]) == 0
    assert "AWQ v1" in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert dump_main([str(empty)]) == 1
    assert "V1_INCOMPLETE" in capsys.readouterr().out


def test_console_exit_statuses(tmp_path):
    """As a process: a missing folder is unreadable (3), with no traceback."""
    missing = tmp_path / "nothing"
    done = subprocess.run(
        [sys.executable, "-m", "reference.dump", str(missing)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 3, done
    assert "Traceback" not in done.stderr and "cannot read" in done.stderr
