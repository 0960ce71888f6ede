"""Issue 38 (8, 9, 15): what ``awq2-meta`` is given, checked before anything is parsed or
written.

8. A ``--set`` value (inline or ``@FILE``) nested past the metadata's depth limit is refused
   by its depth, measured lexically before it is parsed: ``LIMIT_METADATA``,
   exit status 1, a JSON error document with ``--json``; never a ``RecursionError``.
9. ``--set KEY=@FILE`` reads a regular file only (a FIFO, a device or a folder is refused at
   once), and at most the metadata limit and one byte of it.
15. One member of a file set, named as a file, is refused before anything is written, with
   the command that edits the set: editing the member alone would leave the manifest's size
   and SHA-256 of it wrong, and the set would no longer open.

The command-line tests run ``python -m reference.metaedit`` in a child with a time limit and
an address-space limit, so that the unbounded reads these tests guard against fail the test
instead of hanging it or exhausting the machine's memory.  (The requirements these tests
check are named in words, not by id: an id here would change the generated traceability page,
which ``python -m tools.regen`` rewrites.)"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reference import metaedit
from reference.format.reader import Reader
from reference.sets.fileset import FileSet
from reference.sets.setwriter import save_set
from reference.write.writer import save
from spec.constants import MAX_METADATA_DEPTH, MAX_METADATA_LENGTH, SET_MANIFEST

ROOT = Path(__file__).resolve().parent.parent
OLD = {"config": {"architectures": ["LlamaForCausalLM"]}, "provenance": "p"}
#: Deep enough to exhaust Python's recursion limit in ``json.loads`` (1000 frames by default).
DEEP = 20_000
_MEMORY_LIMIT = 2 << 30  # the child's address space: an unbounded read fails fast


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(38)
    return {
        "model.embed_tokens.weight": rng.standard_normal((64, 300)).astype(np.float16),
        "lm_head.weight": rng.integers(-128, 127, (70_000,), dtype=np.int8),
    }


def _model(tmp_path: Path) -> Path:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata=OLD)
    return path


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _run_json(args: list[str]) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            status = metaedit.main([*args, "--json"])
        except SystemExit as exc:  # a usage error
            status = int(exc.code or 0)
    document: dict[str, Any] = json.loads(out.getvalue())
    assert document["exit_status"] == status
    return document


def _limit_memory() -> None:  # pragma: no cover - runs in the child
    resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT, _MEMORY_LIMIT))


def _cli(args: list[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it, in a child that may neither hang nor eat the machine."""
    return subprocess.run(
        [sys.executable, "-m", "reference.metaedit", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_limit_memory,
    )


# ------------------------------------------------------------------ 8: depth before parsing


@pytest.mark.parametrize("how", ["inline", "file"])
def test_a_deeply_nested_value_is_refused_by_its_depth(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    path = _model(tmp_path)
    value = tmp_path / "value.json"
    value.write_text(_nested(DEEP))
    given = f"k=@{value}" if how == "file" else f"k={_nested(DEEP)}"
    before = _snapshot(tmp_path)
    assert metaedit.main([str(path), "--set", given]) == metaedit.EXIT_REFUSED
    err = capsys.readouterr().err
    assert "LIMIT_METADATA" in err and f"{DEEP}" in err and f"{MAX_METADATA_DEPTH}" in err
    assert ("--set k" in err) and (how == "inline" or str(value) in err)
    assert "Traceback" not in err and len(err.splitlines()) == 1
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("how", ["inline", "file"])
def test_a_deeply_nested_value_with_json_is_one_error_document(tmp_path: Path, how: str) -> None:
    path = _model(tmp_path)
    value = tmp_path / "value.json"
    value.write_text(_nested(DEEP))
    given = f"k=@{value}" if how == "file" else f"k={_nested(DEEP)}"
    result = _run_json([str(path), "--set", given])
    assert result["status"] == "refused" and result["exit_status"] == metaedit.EXIT_REFUSED
    assert result["error"]["code"] == "LIMIT_METADATA"
    assert result["error"]["found"] == str(DEEP)
    assert result["error"]["path"] == (str(value) if how == "file" else None)


def test_the_command_line_prints_the_error_document_not_a_traceback(tmp_path: Path) -> None:
    path = _model(tmp_path)
    value = tmp_path / "value.json"
    value.write_text(_nested(DEEP))
    done = _cli([str(path), "--set", f"k=@{value}", "--json"])
    assert "Traceback" not in done.stderr
    assert done.returncode == metaedit.EXIT_REFUSED
    assert json.loads(done.stdout)["error"]["code"] == "LIMIT_METADATA"


def test_the_depth_limit_is_the_metadata_s_own(tmp_path: Path) -> None:
    """A value one level under the limit fits (the top-level object is the other level); at
    the limit the edited metadata is refused as a reader would; past it, before parsing."""
    path = _model(tmp_path)
    fits = _nested(MAX_METADATA_DEPTH - 1)
    assert metaedit.main([str(path), "--set", f"k={fits}"]) == metaedit.EXIT_OK
    with Reader(path, validate=True) as reader:
        assert reader.metadata["k"] == json.loads(fits)
    at_limit = _run_json([str(path), "--set", f"k={_nested(MAX_METADATA_DEPTH)}"])
    assert at_limit["exit_status"] == metaedit.EXIT_REFUSED
    past = _run_json([str(path), "--set", f"k={_nested(MAX_METADATA_DEPTH + 1)}"])
    assert past["exit_status"] == metaedit.EXIT_REFUSED
    assert past["error"]["code"] == "LIMIT_METADATA"


def test_brackets_inside_strings_do_not_count(tmp_path: Path) -> None:
    path = _model(tmp_path)
    text = json.dumps(["[" * DEEP, "{" * DEEP])
    assert metaedit.main([str(path), "--set", f"k={text}"]) == metaedit.EXIT_OK
    with Reader(path, validate=True) as reader:
        assert reader.metadata["k"] == ["[" * DEEP, "{" * DEEP]


# ------------------------------------------------------------------ 9: @FILE, bounded


def test_a_device_is_refused_not_read_without_end(tmp_path: Path) -> None:
    path = _model(tmp_path)
    before = _snapshot(tmp_path)
    done = _cli([str(path), "--set", "k=@/dev/zero"])
    assert done.returncode == metaedit.EXIT_IO, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert "/dev/zero" in done.stderr and "not a regular file" in done.stderr
    assert _snapshot(tmp_path) == before


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    path = _model(tmp_path)
    fifo = tmp_path / "value.fifo"
    os.mkfifo(fifo)
    done = _cli([str(path), "--set", f"k=@{fifo}", "--json"], timeout=30)
    result = json.loads(done.stdout)
    assert done.returncode == result["exit_status"] == metaedit.EXIT_IO
    assert str(fifo) in result["error"]["message"] and "FIFO" in result["error"]["message"]


def test_a_folder_is_refused(tmp_path: Path) -> None:
    path = _model(tmp_path)
    result = _run_json([str(path), "--set", f"k=@{tmp_path}"])
    assert result["exit_status"] == metaedit.EXIT_IO
    assert str(tmp_path) in result["error"]["message"]


def test_a_link_to_a_regular_file_is_read(tmp_path: Path) -> None:
    path = _model(tmp_path)
    (tmp_path / "value.json").write_text('{"a": [1, 2]}')
    os.symlink("value.json", tmp_path / "link.json")
    assert metaedit.main([str(path), "--set", f"k=@{tmp_path / 'link.json'}"]) == 0
    with Reader(path, validate=True) as reader:
        assert reader.metadata["k"] == {"a": [1, 2]}


def test_a_file_over_the_metadata_limit_is_refused_naming_it_and_the_limit(
    tmp_path: Path,
) -> None:
    path = _model(tmp_path)
    value = tmp_path / "value.json"
    with open(value, "wb") as f:  # a valid JSON string, one byte over the limit
        f.write(b'"' + b"a" * (MAX_METADATA_LENGTH - 1) + b'"')
    before = _snapshot(tmp_path)
    result = _run_json([str(path), "--set", f"k=@{value}"])
    assert result["exit_status"] == metaedit.EXIT_REFUSED
    assert result["error"]["code"] == "LIMIT_METADATA" and result["error"]["path"] == str(value)
    assert str(value) in result["error"]["message"]
    assert f"{MAX_METADATA_LENGTH:,}" in result["error"]["message"]
    assert _snapshot(tmp_path) == before


def test_a_huge_file_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    path = _model(tmp_path)
    value = tmp_path / "huge.json"
    with open(value, "wb") as f:
        f.truncate(4 << 30)  # sparse: 4 GiB of zeros, twice the child's address space
    done = _cli([str(path), "--set", f"k=@{value}"])
    assert done.returncode == metaedit.EXIT_REFUSED, done.stderr[-2000:]
    assert "LIMIT_METADATA" in done.stderr and str(value) in done.stderr
    assert "Traceback" not in done.stderr


# ------------------------------------------------------------------ 15: a set's member


def _split_set(folder: Path) -> list[Path]:
    save_set(folder, _tensors(), max_size=80_000, metadata=OLD)
    members = sorted(folder.glob("*.awq2"))
    assert len(members) >= 2
    return members


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_set_s_member_is_refused_with_the_set_to_edit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    folder = tmp_path / "set"
    member = _split_set(folder)[1]
    before = _snapshot(folder)
    args = [str(member), "--set", 'license="mit"', *(["--dry-run"] if dry_run else [])]
    assert metaedit.main(args) == metaedit.EXIT_REFUSED
    err = capsys.readouterr().err
    assert f"{member} is a member of the file set {folder / SET_MANIFEST}" in err
    assert f"awq2-meta {folder / SET_MANIFEST}" in err
    assert _snapshot(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == ["set"]
    with FileSet(folder, validate=True) as fileset:
        fileset.verify()


def test_a_rank_set_s_member_is_refused_with_json(tmp_path: Path) -> None:
    from reference.format.layers import StoredTensor
    from reference.sets.setwriter import RankSetWriter

    folder = tmp_path / "tp"
    folder.mkdir()
    with RankSetWriter(folder, tp_size=2, metadata=OLD) as writer:
        array = _tensors()["lm_head.weight"]
        writer.add_ranks([[StoredTensor("lm_head.weight", part)] for part in np.split(array, 2)])
    before = _snapshot(folder)
    result = _run_json([str(folder / "model-tp2-rank1.awq2"), "--set", "a=1"])
    assert result["status"] == "refused" and result["exit_status"] == metaedit.EXIT_REFUSED
    assert "member of the file set" in result["error"]["message"]
    assert _snapshot(folder) == before


def test_a_file_the_manifest_beside_it_does_not_list_is_edited(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    _split_set(folder)
    other = tmp_path / "other"
    other.mkdir()
    save(other / "model.awq2", _tensors(), metadata=OLD)
    # a manifest that lists other files: the file is no member of it
    (other / SET_MANIFEST).write_bytes((folder / SET_MANIFEST).read_bytes())
    assert metaedit.main([str(other / "model.awq2"), "--set", "a=1"]) == metaedit.EXIT_OK
    with Reader(other / "model.awq2", validate=True) as reader:
        assert reader.metadata["a"] == 1
