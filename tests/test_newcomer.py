"""The newcomer's rough edges of issue 39, each held by a test that failed before its fix.

* ``awq2-dump --layer`` and ``--tensor`` print one line naming the input and only what was
  asked (they printed the whole report first: 399 lines for a 16-layer model);
* ``awq2-dump config.json`` says it is a model's configuration and names its folder
  (``CONFIG_NOT_WEIGHTS``), where it said ``SET_UNSUPPORTED ... awq2_set ... found None``;
* the README's quick start installs torch's CPU build as printed (the CUDA build is 5.6 GB);
* the README's exit status for an existing destination is the one ``awq2-convert`` gives (2);
* ``dist/`` (where ``python -m build`` writes) is ignored by git.

Inputs are committed files: conformance vectors and the real AutoAWQ checkpoint.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reference.dump import main as dump_main
from spec.registry import ERROR_BY_CODE

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "conformance" / "vectors"
CHECKPOINT = ROOT / "tests" / "fixtures" / "real" / "autoawq_gemm_g128"
README = ROOT / "README.md"


# ------------------------------------------------------------------ --tensor and --layer


def _lines(out: str) -> list[str]:
    return out.splitlines()


@pytest.mark.parametrize(
    ("path", "argv", "headline"),
    [
        (VECTORS / "y_sample.awq2", ["--layer", "model.layers.0.self_attn.q_proj"],
         r"AWQ-v2 file \S+y_sample\.awq2: valid, format 2\.0, 9 tensors"),
        (VECTORS / "y_set_rank_tp2", ["--layer", "model.layers.0.mlp.down_proj", "--rank", "1"],
         r"AWQ-v2 file set \S+model\.awq2\.set\.json: valid, rank set, tp_size 2, 2 files, "
         r"\d+ tensors"),
        (CHECKPOINT, ["--layer", "model.layers.0.mlp.down_proj", "--verify"],
         r"legacy checkpoint \S+autoawq_gemm_g128 \(not AWQ-v2\): valid, AWQ v1 \(AutoAWQ "
         r"GEMM, safetensors\), 49 tensors, every tensor read"),
    ],
    ids=["file", "rank-set", "checkpoint"],
)  # fmt: skip
def test_layer_prints_a_headline_and_the_layer_alone(capsys, path, argv, headline):
    assert dump_main([str(path), *argv]) == 0
    lines = _lines(capsys.readouterr().out)
    assert re.fullmatch(headline, lines[0]), lines[0]
    assert lines[1] == "" and lines[2].startswith("layer ")
    # the layer's own lines: 8 facts, one row per stored tensor, its dequantised weights
    stored = int(next(x for x in lines if x.startswith("  stored tensors")).split()[-1])
    assert len(lines) == 3 + 7 + stored + 1, lines
    assert lines[-1].startswith("  dequantised      float32 ")


def test_tensor_prints_a_headline_and_the_tensor_alone(capsys):
    assert dump_main([str(VECTORS / "y_sample.awq2"), "--tensor", "model.norm.weight"]) == 0
    lines = _lines(capsys.readouterr().out)
    assert lines[0].startswith("AWQ-v2 file ") and lines[1] == ""
    assert lines[2].startswith('tensor model.norm.weight: {"name": "model.norm.weight"')
    assert lines[3].startswith("  min 1  max 1  mean 1  std 0  elements 32")
    assert lines[4] == "  values:" and lines[5].startswith("array([1., 1.")
    assert "".join(lines[5:]).replace(" ", "").endswith("dtype=float32)"), lines  # and no more


def test_the_whole_report_is_still_the_command_without_them(capsys):
    assert dump_main([str(VECTORS / "y_sample.awq2")]) == 0
    out = capsys.readouterr().out
    assert "\n  tensors          9\n" in out and "model.layers.0.mlp.big" in out


# ------------------------------------------------------------------ config.json


def test_a_model_configuration_names_its_folder(capsys):
    config = CHECKPOINT / "config.json"
    assert dump_main([str(config)]) == 1
    out = capsys.readouterr().out
    assert "  error    CONFIG_NOT_WEIGHTS\n" in out, out
    assert f"give the model's folder, awq2-dump {shlex.quote(str(CHECKPOINT))}\n" in out
    assert "model_type 'llama'" in out and "SET_UNSUPPORTED" not in out
    assert dump_main([str(config), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and doc["error"]["code"] == "CONFIG_NOT_WEIGHTS"
    assert doc["error"]["offset"] is None and doc["error"]["file"] == str(config)
    assert ERROR_BY_CODE["CONFIG_NOT_WEIGHTS"].error_class == "LegacyError"


def test_a_config_in_a_folder_with_spaces_is_quoted(tmp_path, capsys):
    folder = tmp_path / "my model"
    folder.mkdir()
    shutil.copy(CHECKPOINT / "config.json", folder / "config.json")
    assert dump_main([str(folder / "config.json")]) == 1
    assert f"awq2-dump '{folder}'\n" in capsys.readouterr().out


@pytest.mark.parametrize(
    "document",
    [{"awq2_set": 2, "kind": "split", "files": []}, {"hidden_size": 4}, [1, 2], "text"],
    ids=["manifest-of-another-version", "no-model-keys", "array", "string"],
)
def test_other_json_stays_a_set_error(tmp_path, capsys, document):
    """Only a JSON object with a model's keys and no ``awq2_set`` is a configuration."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    assert dump_main([str(path), "--json"]) == 1
    code = json.loads(capsys.readouterr().out)["error"]["code"]
    assert code in ("SET_UNSUPPORTED", "SET_BAD_MANIFEST"), code


# ------------------------------------------------------------------ README and git


def _quickstart_block(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    found = re.search(rf"<!-- quickstart: {name} -->\n```\w+\n(.*?)^```", text, re.M | re.S)
    assert found, name
    return found.group(1)


def test_the_quick_start_installs_torch_cpu_build():
    """The printed line, not only the prose, names the CPU index (the default is CUDA)."""
    (line,) = [x for x in _quickstart_block("install").splitlines() if "torch" in x]
    words = shlex.split(line, comments=True)
    assert words == ["pip", "install", "torch", "--index-url",
                     "https://download.pytorch.org/whl/cpu"]  # fmt: skip


def test_the_readme_gives_the_exit_status_of_an_existing_destination(tmp_path):
    """``awq2-convert`` into an existing DST exits 2 (a usage error), as the README says."""
    dst = tmp_path / "taken.awq2"
    dst.write_bytes(b"mine")
    done = subprocess.run([sys.executable, "-m", "reference.convert", str(CHECKPOINT), str(dst)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert dst.read_bytes() == b"mine"
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "An existing DST is refused (exit status 2, a usage error) unless" in text


def test_dist_is_ignored_by_git():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "check-ignore", "-q", "dist/awq_v2-0.1.0.tar.gz"], cwd=ROOT,
                          capture_output=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, "dist/ is not in .gitignore"
