"""The commands ``reference.demo`` and ``reference.examples``, and Ctrl-C in them and in the
conformance runner (issue 30, items 6 and 10).

* the demo writes a dense tensor and a quantised layer in the Marlin layouts, dumps the file,
  and removes its temporary folder (``--out DIR`` keeps the file and says where), in the form
  CI runs it too;
* every option of ``reference.examples`` has help text; it reports progress on stderr (plain
  lines, a bar on a terminal, nothing with ``--quiet``) and still writes the same bytes;
* interrupted (SIGINT), each command prints one line, ``interrupted``, on stderr, no
  traceback, and exits 130; the runner's loader and the loader's children are gone and its
  temporary folders removed.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import reference
from conformance import run
from reference import demo, examples

ROOT = Path(__file__).resolve().parent.parent

#: sha256 of the files ``python -m reference.examples`` wrote before it reported progress
#: (taken from the command as it was, at commit 41527a3): the default checkpoint, and a
#: two-shard one with biases and three layers.
GOLDEN = {
    (): {
        "config.json": "42318060692e146ae1f66a5566f0345456465a5eaba2556d36267951659c3ab4",
        "model.safetensors": "a7a4501d037952d7e349e12a54cff83d8fce6204884480ac41ff4077c4e8723a",
    },
    ("--shards", "2", "--attention-bias", "true", "--num-hidden-layers", "3"): {
        "config.json": "ad7ca5d157c624bbed644c442e621b1f120f34e3d666947a9a01c4a479abec75",
        "model-00001-of-00002.safetensors": (
            "e2908ec7322d35c312cb46fa79ba7fd97a0d3906b1da0e27cbe508223d20beab"
        ),
        "model-00002-of-00002.safetensors": (
            "b2972e031dac19b9199daa494f3c82bbc6d7b7589340e337390ac60fc3fdbecd"
        ),
        "model.safetensors.index.json": (
            "672a48b5d9dbe43cf795e1a2ab13a75af2a1e4e565a3adeae68957f5229406ce"
        ),
    },
}


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder that ``tempfile`` uses for the rest of the test."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


# ------------------------------------------------------------------------------------ the demo


def test_the_demo_writes_a_marlin_layer_and_dense_tensors_and_keeps_them_in_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "new" / "folder"  # made, parents too
    assert demo.main(["--out", str(out)]) == 0
    path = out / "demo.awq2"
    with reference.open(path, validate=True) as f:
        f.verify()
        layouts = {f.entry(name).layout for name in f.names()}
        layer = f.linear("model.layers.0.self_attn.q_proj")
    assert {"DENSE", "MARLIN_QWEIGHT", "MARLIN_SCALES", "MARLIN_QZEROS"} <= layouts
    assert (layer.layout, layer.bits, layer.group_size, layer.k, layer.n) == (
        "MARLIN",
        4,
        128,
        256,
        256,
    )
    assert layer.bias is not None
    printed = capsys.readouterr().out
    assert "MARLIN_QWEIGHT 4b g128 k256 n256" in printed  # the dump, verified
    assert "checksums        every payload verified" in printed
    assert printed.rstrip("\n").split("\n")[-1] == f"kept {path}"


def test_without_out_the_demo_removes_its_folder(
    private_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.main([]) == 0
    printed = capsys.readouterr().out
    assert "MARLIN_QWEIGHT" in printed
    assert list(private_tmp.iterdir()) == []
    assert "removed the temporary folder " + str(private_tmp) in printed
    assert printed.rstrip("\n").endswith("(--out DIR keeps the file)")


def test_the_demo_runs_as_ci_runs_it(tmp_path: Path) -> None:
    """``.ci/run``: ``python -m reference.demo --out "$(mktemp -d)" > /dev/null``."""
    out = tmp_path / "ci"
    out.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "reference.demo", "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert [p.name for p in out.iterdir()] == ["demo.awq2"]


def test_an_interrupted_demo_says_so_and_removes_its_folder(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(argv: list[str]) -> int:
        assert Path(argv[0]).exists()
        raise KeyboardInterrupt

    monkeypatch.setattr(demo.dump, "main", interrupted)
    try:
        status = demo.main([])
    except KeyboardInterrupt:  # caught here, or it would stop the whole test session
        pytest.fail("demo.main let the KeyboardInterrupt out")
    assert status == 130
    assert capsys.readouterr().err == "interrupted\n"
    assert list(private_tmp.iterdir()) == []


# -------------------------------------------------------------------------------- the examples


def test_every_examples_option_has_help_with_its_default() -> None:
    parser = examples.build_parser()
    shape = examples.LlamaShape()
    for action in parser._actions:
        assert action.help and action.help != argparse.SUPPRESS, action.option_strings
        field = action.dest
        if hasattr(shape, field):
            default = str(getattr(shape, field)).lower()
            assert action.help.endswith(f"(default: {default})"), action.help


@pytest.mark.parametrize("options", list(GOLDEN), ids=["default", "two-shards"])
@pytest.mark.parametrize("quiet", [False, True], ids=["progress", "quiet"])
def test_examples_writes_the_same_bytes_as_before(
    tmp_path: Path, options: tuple[str, ...], quiet: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ckpt"
    assert examples.main([str(out), *options, *(["--quiet"] if quiet else [])]) == 0
    assert digests(out) == GOLDEN[options]
    printed = capsys.readouterr()
    assert printed.out == f"wrote {out}\n"
    assert (printed.err == "") == quiet


def test_examples_progress_off_a_terminal_is_a_few_plain_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert examples.main([str(tmp_path / "a"), "--shards", "2"]) == 0
    assert capsys.readouterr().err.split("\n") == [
        "generating 2 layers",
        "generated 2 layers, 1,139,712 bytes of tensors",
        "writing model-00001-of-00002.safetensors, 570,112 bytes of tensors",
        "writing model-00002-of-00002.safetensors, 569,600 bytes of tensors",
        "",
    ]


def test_examples_progress_says_which_layer_every_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(examples, "PROGRESS_INTERVAL", 0.0)  # a line per layer
    assert examples.main([str(tmp_path / "a"), "--num-hidden-layers", "3"]) == 0
    lines = capsys.readouterr().err.split("\n")
    assert lines[:4] == [
        "generating 3 layers",
        "generated layer 1 of 3",
        "generated layer 2 of 3",
        "generated layer 3 of 3",
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_examples_progress_on_a_terminal_is_a_bar_over_the_layers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tqdm

    # CI sets TQDM_DISABLE=1, which tqdm reads when it is imported: the bar is asked for here
    monkeypatch.setattr(tqdm, "tqdm", functools.partial(tqdm.tqdm, disable=False))
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert examples.main([str(tmp_path / "a"), "--num-hidden-layers", "3"]) == 0
    text = terminal.getvalue()
    assert "\rgenerating:   0%|" in text and "0/3 [" in text and "layer/s]" in text  # the bar
    assert "generating 3 layers" not in text  # no plain line where the bar is
    assert (
        text.rstrip("\n").split("\n")[-1] == "writing model.safetensors, 1,447,168 bytes of tensors"
    )


# -------------------------------------------------------------------------------- Ctrl-C


def _interrupted(argv: list[str], ready, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run ``argv`` until ``ready()`` is true, then send it SIGINT, as Ctrl-C does."""
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "it finished before it was interrupted"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is gone too
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    return True


@pytest.mark.skipif(os.name != "posix", reason="SIGINT and process groups are POSIX")
def test_ctrl_c_in_examples_is_one_line_and_exit_130(tmp_path: Path) -> None:
    out = tmp_path / "big"  # about 5 s of layers to generate: interrupted well before
    argv = [sys.executable, "-m", "reference.examples", str(out), "--hidden-size", "1024",
            "--intermediate-size", "2048", "--num-hidden-layers", "100"]  # fmt: skip

    def started() -> bool:  # config.json comes first, then the layers
        return (out / "config.json").exists()

    done = _interrupted(argv, started, dict(os.environ))
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.endswith("\ninterrupted\n"), done.stderr
    assert done.stdout == ""


@pytest.mark.skipif(os.name != "posix", reason="SIGINT and process groups are POSIX")
def test_ctrl_c_in_the_runner_kills_the_loader_removes_its_folders_and_exits_130(
    tmp_path: Path,
) -> None:
    """The loader (its own session: Ctrl-C reaches only the runner) and its child sleep; the
    runner, interrupted, kills their group, removes its private folders, says
    ``interrupted`` and exits 130."""
    pids = tmp_path / "pids"
    loader = tmp_path / "hang"
    loader.write_text(f"#!/bin/sh\nsleep 60 &\necho $! $$ >> {pids}\nsleep 60\n")
    loader.chmod(0o755)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [sys.executable, "-m", "conformance.run", "--only", "^n_bad_magic$",
            "--loader", f"hang={loader} {{file}}"]  # fmt: skip
    done = _interrupted(argv, pids.exists, {**os.environ, "TMPDIR": str(scratch)})
    assert (done.returncode, done.stderr) == (130, "interrupted\n")
    assert done.stdout.startswith("AWQ-v2 conformance suite")
    for pid in map(int, pids.read_text().split()):
        deadline = time.monotonic() + 5
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"process {pid} of the loader outlived the interrupted runner")
    assert list(scratch.iterdir()) == []


def test_the_runner_names_its_console_script() -> None:
    parser = run.build_parser()
    assert parser.prog == "awq2-conformance"
    assert parser.format_usage().startswith("usage: awq2-conformance ")
    assert "130 interrupted" in (parser.epilog or "")
