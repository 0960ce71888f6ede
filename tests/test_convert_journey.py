"""``awq2-convert`` as a new user meets it (issue 30): a model that was never quantised
[CONV-4], one rule for destinations and ``--overwrite`` [CONV-1, CONV-2], a summary that adds
up, ``--json`` for every outcome, the progress bars, Ctrl-C, and the command's own name."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import textwrap
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

import reference
from reference import convert as convert_module
from reference.conversion import steps as steps_module
from reference.convert import main as convert_main

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "real"
AWQ = FIXTURES / "autoawq_gemm_g128"


def _fp16_model(folder: Path) -> Path:
    """A plain fp16 model folder as a hub download has it: config.json without
    quantization_config, model.safetensors, a tokenizer file."""
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text("{}")
    rng = np.random.default_rng(0)
    save_file({"model.layers.0.mlp.down_proj.weight": rng.standard_normal((8, 8), np.float32)
               .astype(np.float16),
               "lm_head.weight": np.ones((4, 8), np.float16)}, str(folder / "model.safetensors"))  # fmt: skip
    return folder


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def _json_out(capsys: pytest.CaptureFixture[str]) -> tuple[dict, str]:
    """The one JSON document on stdout (json.loads fails on anything after it), and stderr."""
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


# ------------------------------------------------------------------ 1. a model never quantised


@pytest.mark.parametrize("dst", ["out.awq2", "out/", "out"])
def test_an_fp16_model_is_refused_and_nothing_is_written(tmp_path, capsys, dst):
    """CONV-4: before, an fp16 model "converted" (exit 0) into a file with no quantised layer
    and a config.json saying quant_method awq_v2, bits []: now it is refused with
    NOT_QUANTISED and a hint, in every destination form, and nothing is written."""
    src = _fp16_model(tmp_path / "fp16")
    assert convert_main([str(src), str(tmp_path / dst)]) == 1
    err = capsys.readouterr().err
    assert "[NOT_QUANTISED]" in err and "quantise it first" in err
    assert "not quantised (no quantisation config)" in err  # the source named as what it is
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fp16"]
    assert convert_main([str(src), "--dry-run"]) == 1  # the plan refuses it too
    assert "[NOT_QUANTISED]" in capsys.readouterr().err


def test_an_fp16_model_is_not_called_awq_v1(tmp_path):
    """CONV-4: the reader names a checkpoint without a quantised layer truthfully (before:
    "AWQ v1 (AutoAWQ GEMM, safetensors)"), with or without an AWQ config; an AWQ checkpoint
    keeps its name."""
    src = _fp16_model(tmp_path / "fp16")
    with reference.open(src) as f:
        assert f.source_format == "safetensors, not quantised (no quantisation config)"
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128,
                                     "zero_point": True, "version": "gemm"}  # fmt: skip
    (src / "config.json").write_text(json.dumps(config))
    with reference.open(src) as f:
        assert "not quantised" in f.source_format and "no quantised layer" in f.source_format
    with reference.open(AWQ) as f:
        assert f.source_format.startswith("AWQ v1")


# ------------------------------------------------------------------ 3. destinations


def test_a_dst_without_awq2_is_a_model_folder(tmp_path, capsys):
    """CONV-1: ``convert SRC out/newmodel`` used to write a file named ``newmodel``; a DST that
    does not end in .awq2 is now the servable folder, trailing '/' or not."""
    assert convert_main([str(AWQ), str(tmp_path / "newmodel"), "--quiet"]) == 0
    made = tmp_path / "newmodel"
    assert made.is_dir() and (made / "model.awq2").is_file()
    config = json.loads((made / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "awq_v2"
    assert convert_main([str(AWQ), str(tmp_path / "one.AWQ2"), "--quiet"]) == 0
    assert (tmp_path / "one.AWQ2").is_file()  # the suffix in any case names a file


def test_an_existing_file_is_refused_unless_overwrite(tmp_path, capsys):
    """CONV-2: an existing DST file used to be replaced silently; now it is refused (exit 2,
    untouched) and replaced only with --overwrite, by a valid file."""
    dst = tmp_path / "model.awq2"
    dst.write_bytes(b"my notes")
    assert convert_main([str(AWQ), str(dst), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"DST {dst} exists; pass --overwrite" in err
    assert dst.read_bytes() == b"my notes"
    assert convert_main([str(AWQ), str(dst), "--quiet", "--overwrite"]) == 0
    with reference.open(dst) as f:
        f.verify()
        assert "model.layers.0.mlp.down_proj.qweight" in f.names()


def test_an_existing_folder_is_replaced_only_with_overwrite(tmp_path, capsys):
    """CONV-2: a non-empty folder is refused without --overwrite; with it, the new folder takes
    its place whole (the old files gone, no temporary folder left); an empty folder needs no
    --overwrite."""
    dst = tmp_path / "served"
    dst.mkdir()
    (dst / "old.txt").write_text("old")
    assert convert_main([str(AWQ), str(dst), "--quiet"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err and _tree(dst) == {
        "old.txt": hashlib.sha256(b"old").hexdigest()
    }
    assert convert_main([str(AWQ), str(dst), "--quiet", "--overwrite"]) == 0
    assert not (dst / "old.txt").exists() and (dst / "model.awq2").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert convert_main([str(AWQ), str(empty), "--quiet"]) == 0


def test_overwrite_keeps_the_old_folder_when_the_conversion_fails(tmp_path, monkeypatch):
    """CONV-2: with --overwrite the old folder is moved only once the new one is complete: a
    failure midway leaves it byte for byte, and no temporary folder."""
    dst = tmp_path / "served"
    assert convert_main([str(AWQ), str(dst), "--quiet"]) == 0
    before = _tree(dst)

    def broken(src, step):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(steps_module, "prepare_step", broken)
    assert convert_main([str(AWQ), str(dst), "--quiet", "--overwrite"]) == 3
    assert _tree(dst) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]


def test_overwrite_never_deletes_the_source(tmp_path, capsys):
    """CONV-2: a DST that holds SRC is refused, --overwrite or not (replacing it would delete
    the checkpoint being converted)."""
    outer = tmp_path / "outer"
    shutil.copytree(AWQ, outer / "ckpt")
    before = _tree(outer)
    assert convert_main([str(outer / "ckpt"), str(outer), "--overwrite", "--quiet"]) == 2
    assert "is inside DST" in capsys.readouterr().err
    assert _tree(outer) == before


def test_refusals_name_the_users_path(tmp_path, capsys):
    """A missing parent folder names DST and its folder, never a hidden temporary name."""
    for dst in (tmp_path / "no" / "such" / "x.awq2", tmp_path / "no" / "such" / "model"):
        assert convert_main([str(AWQ), str(dst), "--quiet"]) == 3
        err = capsys.readouterr().err
        assert f"cannot write {dst}: its folder {dst.parent} does not exist" in err
        assert "partial" not in err


# ------------------------------------------------------------------ 4. figures and --json


def test_a_sets_summary_adds_up_to_its_files(tmp_path, capsys):
    """Before, --max-shard-size 300KB printed "3,678,076 bytes in 21 files" (one file's size)
    while the files held 5,031,924: the summary now gives what is on disk."""
    dst = tmp_path / "split"
    assert convert_main([str(AWQ), str(dst), "--max-shard-size", "300KB", "--json"]) == 0
    doc, _ = _json_out(capsys)
    members = sorted(p for p in dst.iterdir() if p.suffix == ".awq2")
    assert len(members) > 1 and len(doc["members"]) == len(members)
    on_disk = sum(p.stat().st_size for p in members)
    assert doc["file_size"] == on_disk and "padding_bytes" not in doc
    shutil.rmtree(dst)
    assert convert_main([str(AWQ), str(dst), "--max-shard-size", "300KB"]) == 0
    out = capsys.readouterr().out
    assert f": {on_disk:,} bytes in {len(members)} files," in out


def test_json_gives_one_document_for_every_outcome(tmp_path, capsys):
    """Before, --json printed refusals as text on stderr: now success, refusal, usage error,
    I/O error and a bad option are each one JSON document on stdout, with the exit status."""
    fp16 = _fp16_model(tmp_path / "fp16")
    (tmp_path / "taken.awq2").write_bytes(b"x")
    cases = [
        ([str(AWQ), str(tmp_path / "ok.awq2")], 0, "converted"),
        ([str(AWQ), "--dry-run"], 0, "planned"),
        ([str(fp16), str(tmp_path / "a.awq2")], 1, "refused"),
        ([str(AWQ), str(tmp_path / "taken.awq2")], 2, "error"),
        ([str(tmp_path / "missing"), str(tmp_path / "b.awq2")], 3, "error"),
    ]
    for argv, status, word in cases:
        assert convert_main([*argv, "--json"]) == status, argv
        doc, err = _json_out(capsys)
        assert doc["status"] == word and doc["exit_status"] == status, doc
        assert err == "", err
    assert convert_main([str(fp16), str(tmp_path / "a.awq2"), "--json"]) == 1
    doc, _ = _json_out(capsys)
    assert doc["error"]["code"] == "NOT_QUANTISED" and doc["error"]["path"] == str(fp16)
    for argv, words in (
        ([str(AWQ), "x.awq2", "--jobs", "many"], "--jobs"),  # argparse's
        ([str(AWQ), str(tmp_path / "c.awq2"), "--tp", "2"], "--tp writes"),
    ):
        with pytest.raises(SystemExit) as raised:  # usage errors end as argparse's do: exit 2
            convert_main([*argv, "--json"])
        assert raised.value.code == 2
        doc, err = _json_out(capsys)
        assert doc["status"] == "error" and doc["exit_status"] == 2, doc
        assert words in doc["error"]["message"] and err == ""


# ------------------------------------------------------------------ progress, Ctrl-C, name


def _run_in_terminal(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run ``argv`` with stderr on a pseudo-terminal (where the bars are shown); its exit
    status and everything written there."""
    leader, follower = pty.openpty()
    rows_cols = struct.pack("HHHH", 24, 120, 0, 0)  # a sized terminal, as a user's is
    fcntl.ioctl(follower, termios.TIOCSWINSZ, rows_cols)
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=follower,
                            env={**os.environ, "COLUMNS": "120"})  # fmt: skip
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def test_the_progress_shows_bytes_rate_and_verification(tmp_path):
    """Before, the bar counted 57 "tensor" steps for 141 tensors, showed no bytes or rate,
    vanished, and the verification showed nothing: now a bar of bytes with the rate, then one
    for the verification, both left on the terminal."""
    dst = tmp_path / "m.awq2"
    status, seen = _run_in_terminal(
        [sys.executable, "-m", "reference.convert", str(AWQ), str(dst), "--quiet"], ROOT
    )
    assert status == 0 and seen == ""  # --quiet: nothing
    dst.unlink()
    status, seen = _run_in_terminal(
        [sys.executable, "-m", "reference.convert", str(AWQ), str(dst), "--jobs", "1"], ROOT
    )
    assert status == 0, seen
    with reference.open(AWQ) as f:  # the payload, in the bar's units
        payload = sum(f.entry(n).length for n in f.names())
    last = seen.replace("\r", "\n").splitlines()
    converting = [line for line in last if line.startswith("converting")]
    verifying = [line for line in last if line.startswith("verifying")]
    assert converting and verifying, seen
    assert "100%" in converting[-1] and "B/s" in converting[-1], converting[-1]
    assert "100%" in verifying[-1] and "B/s" in verifying[-1], verifying[-1]
    kilo = f"{payload / 1e3:.0f}k"  # 285,568 payload bytes: "286k/286k"
    assert f" {kilo}/{kilo} " in converting[-1] and f" {kilo}/{kilo} " in verifying[-1]


def test_ctrl_c_is_one_line_and_exit_130(tmp_path):
    """Before, Ctrl-C printed a KeyboardInterrupt traceback: now one line naming DST, exit 130
    (documented in --help), and nothing at DST.  SIGINT is sent by the process to itself
    when the first layer is being prepared, so the moment is the same in every run."""
    dst = tmp_path / "served"
    script = textwrap.dedent(f"""
        import os, signal, sys
        from reference import convert
        from reference.conversion import steps
        real = steps.prepare_step
        def interrupted(src, step):
            os.kill(os.getpid(), signal.SIGINT)
            return real(src, step)
        steps.prepare_step = interrupted
        sys.argv = ["awq2-convert", {str(AWQ)!r}, {str(dst)!r}, "--jobs", "1"]
        sys.exit(convert._entry_point())
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 130, result
    assert result.stderr == f"interrupted by Ctrl-C (SIGINT); nothing was written to {dst}\n", (
        result.stderr
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert signal.SIGINT == 2  # 130 = 128 + SIGINT, what a shell reports for Ctrl-C
    help_text = subprocess.run([sys.executable, "-m", "reference.convert", "--help"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP" in help_text


def test_the_command_is_called_by_its_script_name(tmp_path):
    """The usage line and hints name the console script (awq2-convert), not python -m."""
    result = subprocess.run([sys.executable, "-m", "reference.convert", "--help"], cwd=ROOT,
                            capture_output=True, text=True, check=True)  # fmt: skip
    assert result.stdout.startswith("usage: awq2-convert ")
    # an AWQ-v2 file with no quantised layer: nothing to reshard, refused with the hint
    dense = ROOT / "conformance" / "vectors" / "y_metadata_nested.awq2"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "reference.convert", str(dense),
                             str(tmp_path / "x.awq2")], cwd=tmp_path, env=env,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2 and "(awq2-dump explains it)" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_source_without_tokenizer_files_is_warned_about(tmp_path, capsys):
    """Issue 37: a folder converted from a checkpoint without tokenizer files cannot serve text
    prompts; the converter says so (even with --quiet), naming what is missing and what the
    folder serves; with a tokenizer file it says nothing of the kind."""
    src = tmp_path / "src"
    shutil.copytree(AWQ, src)
    for name in convert_module.TOKENIZER_FILES:
        (src / name).unlink(missing_ok=True)
    assert convert_main([str(src), f"{tmp_path / 'bare'}/", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"warning: {src} has no tokenizer files (tokenizer.json, "), err
    assert "token ids" in err and "--tokenizer" in err
    (src / "tokenizer.json").write_text("{}")
    assert convert_main([str(src), f"{tmp_path / 'with'}/", "--quiet"]) == 0
    assert "tokenizer" not in capsys.readouterr().err
    assert (tmp_path / "with" / "tokenizer.json").is_file()
