"""Issue 31 (4): ``awq2-meta`` edits metadata without rewriting the payloads.

The edited file is checked against an independent path (the reference Writer given the same
tensors and the new metadata: byte for byte), its payloads against the old file's, and every
check (validate, verify, a set's full validation) stays green; a refused edit leaves every
byte as it was; the slab is measured to go through ``copy_file_range``, and its fallback to
plain reads and writes is exercised."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from reference import metaedit
from reference.format.layers import StoredTensor
from reference.format.reader import Reader
from reference.sets.fileset import FileSet
from reference.sets.setwriter import RankSetWriter, save_set
from reference.write import publish, rangecopy, reindex
from reference.write.partial import FOLDER_SUFFIX
from reference.write.rangecopy import copy_range
from reference.write.writer import save
from spec.constants import SET_MANIFEST, SET_RANK_KEY, SLAB_OFFSET

ROOT = Path(__file__).resolve().parent.parent

OLD = {"config": {"architectures": ["LlamaForCausalLM"], "eos_token_id": 2}, "provenance": "p"}
NEW = {"config": {"architectures": ["LlamaForCausalLM"], "eos_token_id": 2}, "license": "mit"}
EDIT = ["--set", 'license="mit"', "--delete", "provenance"]


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(31)
    return {
        "model.embed_tokens.weight": rng.standard_normal((64, 300)).astype(np.float16),
        "model.norm.weight": rng.standard_normal(300).astype(np.float32),
        "empty": np.zeros((0, 4), np.int8),
        "lm_head.weight": rng.integers(-128, 127, (70_000,), dtype=np.int8),
    }


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every entry of the folder, hidden partials included, with its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _slab(path: Path) -> bytes:
    with Reader(path) as reader:
        return path.read_bytes()[SLAB_OFFSET : reader.header["index_offset"]]


def _checked(path: Path) -> dict[str, Any]:
    with Reader(path, validate=True) as reader:
        reader.verify()
        return reader.metadata


# ------------------------------------------------------------------ one file


def test_an_edited_file_is_what_the_writer_writes_with_the_new_metadata(tmp_path: Path) -> None:
    path, expected = tmp_path / "model.awq2", tmp_path / "expected.awq2"
    save(path, _tensors(), metadata=OLD)
    save(expected, _tensors(), metadata=NEW)
    slab = _slab(path)
    assert metaedit.main([str(path), *EDIT]) == 0
    assert path.read_bytes() == expected.read_bytes()
    assert _slab(path) == slab
    assert _checked(path) == NEW
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected.awq2", "model.awq2"]


def test_the_edit_keeps_the_file_mode_and_a_model_folder_names_its_file(tmp_path: Path) -> None:
    save(tmp_path / "model.awq2", _tensors(), metadata=OLD)
    os.chmod(tmp_path / "model.awq2", 0o640)
    assert metaedit.main([str(tmp_path), "--set-string", 'note=a "quoted" text']) == 0
    assert (tmp_path / "model.awq2").stat().st_mode & 0o777 == 0o640
    assert _checked(tmp_path / "model.awq2") == {**OLD, "note": 'a "quoted" text'}


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--set", f"{SET_RANK_KEY}={{}}"], "reserved"),
        (["--delete", SET_RANK_KEY], "reserved"),
        (["--delete", "nope"], "no metadata key 'nope'"),
        (["--set", "x=1e400"], "would be refused by a reader"),
        (["--set", "x=" + "1" * 101], "would be refused by a reader"),
        (["--set", "x=" + "[" * 64 + "]" * 64], "would be refused by a reader"),
    ],
)
def test_a_refused_edit_leaves_every_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], why: str
) -> None:
    save(tmp_path / "model.awq2", _tensors(), metadata=OLD)
    before = _snapshot(tmp_path)
    assert metaedit.main([str(tmp_path / "model.awq2"), *args]) == metaedit.EXIT_REFUSED
    assert why in capsys.readouterr().err
    assert _snapshot(tmp_path) == before


def test_a_damaged_payload_is_refused_with_its_code(tmp_path: Path) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata=OLD)
    data = bytearray(path.read_bytes())
    data[SLAB_OFFSET] ^= 1  # the first payload's first byte: only verification sees it
    path.write_bytes(bytes(data))
    before = _snapshot(tmp_path)
    result = _run_json([str(path), *EDIT])
    assert result["exit_status"] == 1 and result["error"]["code"] == "BAD_TENSOR_CHECKSUM"
    assert result["error"]["path"] == str(path)
    assert _snapshot(tmp_path) == before


def _run_json(args: list[str]) -> dict[str, Any]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            status = metaedit.main([*args, "--json"])
        except SystemExit as exc:  # a usage error
            status = int(exc.code or 0)
    document: dict[str, Any] = json.loads(out.getvalue())
    assert document["exit_status"] == status
    return document


def test_exit_statuses_and_the_json_document(tmp_path: Path) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata=OLD)
    before = path.read_bytes()
    assert _run_json([str(path), "--set", "x=nope"])["exit_status"] == 2  # not JSON
    assert _run_json([str(path)])["exit_status"] == 2  # nothing to do
    assert _run_json([str(path), "--set", "a=1", "--delete", "a"])["exit_status"] == 2
    assert _run_json([str(tmp_path / "none.awq2"), *EDIT])["exit_status"] == 3
    planned = _run_json([str(path), *EDIT, "--dry-run"])
    assert planned["status"] == "planned" and path.read_bytes() == before
    edited = _run_json([str(path), *EDIT])
    assert edited["status"] == "edited" and edited["verified"] is True
    assert edited["set"] == ["license"] and edited["deleted"] == ["provenance"]
    (item,) = edited["files"]
    assert item["size"] == path.stat().st_size
    assert item["copied_by_kernel"] + item["copied_by_copy"] == len(_slab(path))
    inode = path.stat().st_ino
    again = _run_json([str(path), "--set", 'license="mit"'])
    assert again["status"] == "unchanged" and path.stat().st_ino == inode  # nothing written


def test_interrupted_leaves_the_file_and_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata=OLD)
    before = _snapshot(tmp_path)

    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(reindex, "copy_range", interrupted)
    assert metaedit.main([str(path), *EDIT]) == metaedit.EXIT_INTERRUPTED
    assert _snapshot(tmp_path) == before


# ------------------------------------------------------------------ copy_file_range


def test_the_slab_goes_through_copy_file_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not hasattr(os, "copy_file_range"):
        pytest.skip("no os.copy_file_range here")
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata=OLD)
    slab = len(_slab(path))
    calls: list[int] = []
    real = os.copy_file_range

    def counting(src: int, dst: int, count: int, *args: Any) -> int:
        got = real(src, dst, count, *args)
        calls.append(got)
        return got

    monkeypatch.setattr(rangecopy.os, "copy_file_range", counting)
    item = _run_json([str(path), *EDIT])["files"][0]
    assert sum(calls) == slab == item["copied_by_kernel"] and item["copied_by_copy"] == 0
    assert slab >= 4 * (1 << 16)  # the payloads, not a token


@pytest.mark.parametrize("failure", [errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, 0])
def test_where_the_kernel_refuses_a_plain_copy_gives_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: int
) -> None:
    path, expected = tmp_path / "model.awq2", tmp_path / "expected.awq2"
    save(path, _tensors(), metadata=OLD)
    save(expected, _tensors(), metadata=NEW)

    def refusing(*args: Any) -> int:
        if failure:
            raise OSError(failure, os.strerror(failure))
        return 0  # a file system that copies nothing

    monkeypatch.setattr(rangecopy.os, "copy_file_range", refusing, raising=False)
    item = _run_json([str(path), *EDIT])["files"][0]
    assert item["copied_by_kernel"] == 0 and item["copied_by_copy"] == len(_slab(path))
    assert path.read_bytes() == expected.read_bytes()


def test_another_copy_error_is_an_io_error_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata=OLD)
    before = _snapshot(tmp_path)

    def failing(*args: Any) -> int:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(rangecopy.os, "copy_file_range", failing, raising=False)
    assert _run_json([str(path), *EDIT])["exit_status"] == metaedit.EXIT_IO
    assert _snapshot(tmp_path) == before


def test_copy_range_copies_a_range_and_refuses_a_short_source(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(bytes(range(256)) * 1000)
    with open(src, "rb") as s, open(dst, "w+b") as d:
        copied = copy_range(s.fileno(), d.fileno(), 1000, 10, 200_000)
        assert copied.by_kernel + copied.by_copy == 200_000
        assert dst.read_bytes()[10:] == src.read_bytes()[1000:201_000]
        with pytest.raises(OSError, match="ended"):
            copy_range(s.fileno(), d.fileno(), 250_000, 0, 10_000)


# ------------------------------------------------------------------ sets


def _tree(top: Path) -> dict[str, Any]:
    """Every entry under ``top``, hidden ones included: a file's bytes, a link's target, a
    folder as such."""
    tree: dict[str, Any] = {}
    for path in sorted(top.rglob("*")):
        key = str(path.relative_to(top))
        if path.is_symlink():
            tree[key] = ("link", os.readlink(path))
        elif path.is_dir():
            tree[key] = "folder"
        else:
            tree[key] = path.read_bytes()
    return tree


def _split_set(folder: Path, metadata: dict[str, Any]) -> None:
    """A split set in a model folder with the other files a checkpoint has."""
    save_set(folder, _tensors(), max_size=80_000, metadata=metadata)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    (folder / "tokenizer.json").write_bytes(b'{"model": {"vocab": {"a": 0}}}')
    os.symlink("tokenizer.json", folder / "tokenizer.model")
    os.symlink("../elsewhere", folder / "outside")  # dangling: kept as the same link


def test_a_split_set_is_what_the_set_writer_writes_with_the_new_metadata(tmp_path: Path) -> None:
    old, expected = tmp_path / "old", tmp_path / "expected"
    _split_set(old, OLD)
    _split_set(expected, NEW)
    assert len(list(old.glob("*.awq2"))) >= 3
    slabs = {p.name: _slab(p) for p in old.glob("*.awq2")}
    inodes = {name: (old / name).stat().st_ino for name in ("config.json", "tokenizer.json")}
    folder_inode = old.stat().st_ino
    document = _run_json([str(old), *EDIT])
    assert document["kind"] == "split" and all(f["changed"] for f in document["files"])
    assert _tree(old) == _tree(expected)  # members, manifest, other files and links
    assert {p.name: _slab(p) for p in old.glob("*.awq2")} == slabs
    assert {name: (old / name).stat().st_ino for name in inodes} == inodes  # hard-linked
    assert old.stat().st_ino != folder_inode  # a new folder took the name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected", "old"]  # no partial
    with FileSet(old, validate=True) as fileset:
        fileset.verify()
        assert fileset.metadata == NEW


def test_a_failure_before_the_exchange_leaves_the_set_and_no_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _split_set(tmp_path / "set", OLD)
    before = _tree(tmp_path)

    def failing(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(reindex, "check_edited", failing)
    assert _run_json([str(tmp_path / "set"), *EDIT])["exit_status"] == metaedit.EXIT_IO
    assert _tree(tmp_path) == before


def test_a_kill_just_before_the_exchange_leaves_the_set_and_the_next_run_cleans_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, expected = tmp_path / "set", tmp_path / "expected"
    _split_set(folder, OLD)
    _split_set(expected, NEW)
    before = _tree(folder)
    script = (
        "import os, signal, sys\n"
        "from reference import metaedit\n"
        "from reference.write import publish\n"
        "publish.exchange_folders = lambda a, b: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"sys.exit(metaedit.main({[str(folder), *EDIT]!r}))\n"
    )
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=False)
    assert killed.returncode == -signal.SIGKILL
    assert _tree(folder) == before  # the old set, byte for byte, and valid
    with FileSet(folder, validate=True) as fileset:
        fileset.verify()
    (left,) = [p for p in tmp_path.iterdir() if p.name.endswith(FOLDER_SUFFIX)]
    assert metaedit.main([str(folder), *EDIT]) == 0
    assert (
        f"removing a partial folder left by an interrupted run: {left}" in capsys.readouterr().err
    )
    assert _tree(folder) == _tree(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected", "set"]


def test_where_folders_cannot_be_exchanged_two_renames_give_the_same_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, expected = tmp_path / "set", tmp_path / "expected"
    _split_set(folder, OLD)
    _split_set(expected, NEW)

    def unavailable(a: Path, b: Path) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(publish, "exchange_folders", unavailable)
    assert metaedit.main([str(folder), *EDIT]) == 0
    assert "cannot exchange two folders in one step" in capsys.readouterr().err
    assert _tree(folder) == _tree(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected", "set"]


def test_renameat2_exchanges_two_folders(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    try:
        publish.exchange_folders(a, b)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
            pytest.skip(f"no RENAME_EXCHANGE here: {exc}")
        raise
    assert not (a / "x").exists() and (b / "x").read_text() == "a"
    with pytest.raises(OSError) as missing:
        publish.exchange_folders(a, tmp_path / "none")
    assert missing.value.errno == errno.ENOENT


def test_a_set_folder_with_a_sub_folder_is_refused(tmp_path: Path) -> None:
    _split_set(tmp_path / "set", OLD)
    (tmp_path / "set" / "original").mkdir()
    (tmp_path / "set" / "original" / "consolidated.pth").write_bytes(b"weights")
    before = _tree(tmp_path)
    result = _run_json([str(tmp_path / "set"), *EDIT])
    assert result["exit_status"] == metaedit.EXIT_REFUSED
    assert "the sub-folder 'original'" in result["error"]["message"]
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("why", ["mount point", "not writable"])
def test_a_mount_point_or_an_unwritable_parent_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    folder = tmp_path / "set"
    _split_set(folder, OLD)
    before = _tree(tmp_path)
    if why == "mount point":
        monkeypatch.setattr(os.path, "ismount", lambda path: Path(path) == folder)
    else:  # root may write anywhere: the permission is what os.access answers
        monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path)
    result = _run_json([str(folder), *EDIT])
    assert result["exit_status"] == metaedit.EXIT_REFUSED and why in result["error"]["message"]
    assert _tree(tmp_path) == before


def _rank_set(out: Path, metadata: dict[str, Any]) -> None:
    out.mkdir()
    tensors = _tensors()
    with RankSetWriter(out, tp_size=2, metadata=metadata) as writer:
        for name, array in tensors.items():
            half = array.shape[0] // 2
            parts = [array[:half], array[half:]] if array.size else [array, array]
            writer.add_ranks([[StoredTensor(name, part)] for part in parts])


def test_a_rank_set_is_edited_alike_and_each_member_keeps_its_rank(tmp_path: Path) -> None:
    old, expected = tmp_path / "old", tmp_path / "expected"
    _rank_set(old, OLD)
    _rank_set(expected, NEW)
    assert metaedit.main([str(old / SET_MANIFEST), *EDIT]) == 0
    assert _snapshot(old) == _snapshot(expected)
    with FileSet(old, validate=True) as fileset:  # SET-15: every record against the manifest
        fileset.verify()
        assert fileset.metadata[SET_RANK_KEY] == {"rank": 0, "tp_size": 2}  # SET-14 agrees
    for rank in (0, 1):
        meta = _checked(old / f"model-tp2-rank{rank}.awq2")
        assert meta == {**NEW, SET_RANK_KEY: {"rank": rank, "tp_size": 2}}


def test_a_set_with_a_damaged_member_is_left_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    save_set(folder, _tensors(), max_size=80_000, metadata=OLD)
    last = sorted(folder.glob("*.awq2"))[-1]
    data = bytearray(last.read_bytes())
    data[SLAB_OFFSET] ^= 1  # found by verification, after the first members are written
    last.write_bytes(bytes(data))
    before = _tree(tmp_path)
    result = _run_json([str(folder), *EDIT])
    assert result["status"] == "refused" and result["error"]["code"] == "BAD_TENSOR_CHECKSUM"
    assert result["error"]["path"] == str(last)  # the member, not its copy in the partial
    assert _tree(tmp_path) == before  # nothing exchanged, no partial folder left


def test_a_set_that_fails_validation_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "set"
    save_set(folder, _tensors(), max_size=80_000, metadata=OLD)
    (folder / "stray.awq2").write_bytes(b"")
    before = _snapshot(folder)
    result = _run_json([str(folder), *EDIT])
    assert result["exit_status"] == 1 and result["error"]["code"] == "SET_EXTRA_FILE"
    assert _snapshot(folder) == before
