"""One publishing transaction for every writing tool (issue 38 item 1, reference.write.publish):
the findings of the third hostile pass that it answers, each reproduced as it was found.

* 5: concurrent awq2-meta edits of one file or one set: the one overtaken is refused, never a
  silent loss of the other's keys;
* 6: an edit killed just after the exchange, run again: the old set it left is removed;
* 7: SIGTERM and SIGHUP during awq2-convert or awq2-meta: the partial is removed, one line,
  exit 143 or 129;
* 10: owner, group and mode of what is replaced are kept;
* 13 and the ``[Errno 39]`` leftover: concurrent ``convert --overwrite`` onto one folder
  leaves no replaced or partial folder, and a loser's message names the user's path only;
* 16: a folder not writable, a full disk: the user's path and the reason, never a hidden
  partial's name or a raw errno.

Expected values come from the files themselves (metadata read back by the reader, bytes,
``os.stat``), never from the code under test.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference
from reference import metaedit
from reference.convert import main as convert_main
from reference.format.reader import Reader
from reference.sets import edit as set_edit
from reference.sets.fileset import FileSet
from reference.sets.setwriter import save_set
from reference.write import publish, reindex
from reference.write.writer import save

ROOT = Path(__file__).resolve().parents[1]
AWQ = ROOT / "tests" / "fixtures" / "real" / "autoawq_gemm_g128"
HIDDEN = (".awq2-partial", ".awq2-replaced")


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(38)
    return {
        "model.embed_tokens.weight": rng.standard_normal((64, 300)).astype(np.float16),
        "model.norm.weight": rng.standard_normal(300).astype(np.float32),
        "lm_head.weight": rng.integers(-128, 127, (70_000,), dtype=np.int8),
    }


def _metadata(path: Path) -> dict[str, Any]:
    with reference.open(path, validate=True) as opened:
        opened.verify()
        return dict(opened.metadata) if isinstance(opened, Reader) else _set_metadata(path)


def _set_metadata(folder: Path) -> dict[str, Any]:
    with FileSet(folder, validate=True) as fileset:
        fileset.verify()
        return dict(fileset.members[0].metadata)


def _hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if any(h in p.name for h in HIDDEN))


#: What a child starts with: the stop signals at their defaults, whatever this process
#: inherited (a test run under ``nohup`` ignores SIGHUP, and a child would inherit that).
DEFAULT_STOPS = (
    "import signal\n"
    "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", DEFAULT_STOPS + code], cwd=ROOT,
                          capture_output=True, text=True, check=False, timeout=300)  # fmt: skip


# ------------------------------------------------------------------ 5: edits that overlap


def _overtake(monkeypatch: pytest.MonkeyPatch, target: Path, args: list[str],
              step: str = "check_edited", module: Any = reindex) -> list[int]:  # fmt: skip
    """When this process's edit reaches ``step`` (of ``module``: :mod:`reference.write.reindex`
    by default), another process edits ``target`` with ``args`` to the end; its exit status
    is returned in the list."""
    real, statuses = getattr(module, step), []

    def overtaken(*a: Any, **k: Any) -> None:
        if not statuses:
            done = subprocess.run([sys.executable, "-m", "reference.metaedit", str(target),
                                   *args], cwd=ROOT, check=False)  # fmt: skip
            statuses.append(done.returncode)
        real(*a, **k)

    monkeypatch.setattr(module, step, overtaken)
    return statuses


def test_finding_5_an_edit_of_a_file_overtaken_by_another_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata={"base": 1})
    statuses = _overtake(monkeypatch, path, ["--set", "theirs=2"])
    assert metaedit.main([str(path), "--set", "mine=1"]) == metaedit.EXIT_IO
    assert statuses == [0]
    err = capsys.readouterr().err
    assert f"{path} changed while this run was writing" in err and "partial" not in err
    assert _metadata(path) == {"base": 1, "theirs": 2}  # the other's edit, whole and kept
    assert _hidden(tmp_path) == []


def test_finding_5_an_edit_of_a_set_overtaken_by_another_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "set"
    save_set(folder, _tensors(), max_size=80_000, metadata={"base": 1})
    # after the new manifest was written (the check that ran "too early" has passed)
    statuses = _overtake(monkeypatch, folder, ["--set", "theirs=2"], step="_carry_over",
                         module=set_edit)  # fmt: skip
    assert metaedit.main([str(folder), "--set", "mine=1"]) == metaedit.EXIT_IO
    assert statuses == [0]
    assert "changed while this run was writing" in capsys.readouterr().err
    assert _set_metadata(folder) == {"base": 1, "theirs": 2}
    assert _hidden(tmp_path) == [] and _hidden(folder) == []


def test_finding_5_three_edits_at_once_lose_no_key_they_report(tmp_path: Path) -> None:
    """As found: three edits started together; each one that says "edited" must have its key
    in the file, and the others must say they were refused."""
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata={"base": 1})
    procs = {key: subprocess.Popen([sys.executable, "-m", "reference.metaedit", str(path),
                                    "--set", f"{key}=1"], cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
             for key in ("a", "b", "c")}  # fmt: skip
    outcomes = {key: (p.wait(timeout=300), p.stderr.read() if p.stderr else "")
                for key, p in procs.items()}  # fmt: skip
    kept = _metadata(path)
    for key, (status, err) in outcomes.items():
        assert status in (0, metaedit.EXIT_IO), (key, status, err)
        if status == 0:
            assert kept.get(key) == 1, (key, kept)
        else:
            assert "changed while this run was writing" in err and "Errno" not in err
    assert any(status == 0 for status, _ in outcomes.values())
    assert _hidden(tmp_path) == []


# ------------------------------------------------------------------ 6: killed after the exchange


def test_finding_6_a_kill_just_after_the_exchange_is_cleaned_up_by_the_next_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "set"
    save_set(folder, _tensors(), max_size=80_000, metadata={"base": 1})
    killed = _run(
        "import os, signal, sys\n"
        "from reference import metaedit\n"
        "from reference.write import publish\n"
        "exchange = publish.exchange_folders\n"
        "def then_killed(a, b):\n"
        "    exchange(a, b)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "publish.exchange_folders = then_killed\n"
        f"sys.exit(metaedit.main([{str(folder)!r}, '--set', 'k=1']))\n"
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (left,) = [p for p in tmp_path.iterdir() if p.name != "set"]  # the old set, hidden
    assert metaedit.main([str(folder), "--set", "k=1"]) == 0  # nothing to change now
    err = capsys.readouterr().err
    assert f"left by an interrupted run: {left}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["set"]
    assert _set_metadata(folder) == {"base": 1, "k": 1}


# ------------------------------------------------------------------ 7: SIGTERM and SIGHUP


def _signalled(tool: str, signum: int, tmp: Path,
               ignored: bool = False) -> tuple[subprocess.CompletedProcess[str], Path]:  # fmt: skip
    """``tool`` run in a child that sends itself ``signum`` in the middle of its work (with
    ``ignored``, a signal the child ignored from its start, as ``nohup`` starts a command)."""
    prelude = f"signal.signal({int(signum)}, signal.SIG_IGN)\n" if ignored else ""
    if tool.startswith("convert"):
        dst = tmp / ("served" if tool == "convert-folder" else "model.awq2")
        code = prelude + (
            "import os, sys\n"
            "from reference import convert\n"
            "from reference.conversion import steps\n"
            "real = steps.prepare_step\n"
            "def step(*a, **k):\n"
            f"    os.kill(os.getpid(), {int(signum)})\n"
            "    return real(*a, **k)\n"
            "steps.prepare_step = step\n"
            f"sys.exit(convert.main([{str(AWQ)!r}, {str(dst)!r}, '--quiet', '--jobs', '1']))\n"
        )
        return _run(code), dst
    target = tmp / ("set" if tool == "meta-set" else "model.awq2")
    if tool == "meta-set":
        save_set(target, _tensors(), max_size=80_000, metadata={"base": 1})
    else:
        save(target, _tensors(), metadata={"base": 1})
    code = prelude + (
        "import os, sys\n"
        "from reference import metaedit\n"
        "from reference.write import reindex\n"
        "real = reindex.check_edited\n"
        "def check(*a, **k):\n"
        f"    os.kill(os.getpid(), {int(signum)})\n"
        "    return real(*a, **k)\n"
        "reindex.check_edited = check\n"
        f"sys.exit(metaedit.main([{str(target)!r}, '--set', 'k=1']))\n"
    )
    return _run(code), target


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
@pytest.mark.parametrize("tool", ["convert-file", "convert-folder", "meta-file", "meta-set"])
def test_finding_7_sigterm_and_sighup_clean_up_say_one_line_and_exit_128_plus_signal(
    tmp_path: Path, tool: str, signum: signal.Signals
) -> None:
    before = {p.name for p in tmp_path.iterdir()}
    result, target = _signalled(tool, signum, tmp_path)
    assert result.returncode == 128 + signum, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"interrupted by {signum.name};"), lines
    assert _hidden(tmp_path) == []
    if tool.startswith("convert"):
        assert {p.name for p in tmp_path.iterdir()} == before  # nothing at DST
    else:
        assert _hidden(target) == [] if target.is_dir() else True
        assert _metadata(target) == {"base": 1}  # unchanged


@pytest.mark.parametrize("tool", ["convert-folder", "meta-set"])
def test_a_hang_up_ignored_from_the_start_as_under_nohup_leaves_the_work_running(
    tmp_path: Path, tool: str
) -> None:
    result, target = _signalled(tool, signal.SIGHUP, tmp_path, ignored=True)
    assert result.returncode == 0, result
    assert "interrupted" not in result.stderr
    assert _hidden(tmp_path) == []
    if tool == "convert-folder":
        assert (target / "model.awq2").is_file()
    else:
        assert _metadata(target) == {"base": 1, "k": 1}


# ------------------------------------------------------------------ 10: owner, group, mode


def _other_owner() -> tuple[int, int]:
    if os.geteuid() != 0:
        pytest.skip("giving a file another owner needs root (CI runs as root)")
    return 4242, 4343


def test_finding_10_an_edited_file_keeps_its_owner_group_and_mode(tmp_path: Path) -> None:
    uid, gid = _other_owner()
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata={"base": 1})
    os.chown(path, uid, gid)
    os.chmod(path, 0o640)
    assert metaedit.main([str(path), "--set", "k=1"]) == 0
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, 0o640)


def test_finding_10_an_edited_set_keeps_every_owner_group_and_mode(tmp_path: Path) -> None:
    uid, gid = _other_owner()
    folder = tmp_path / "set"
    save_set(folder, _tensors(), max_size=80_000, metadata={"base": 1})
    for path in [folder, *folder.iterdir()]:
        os.chown(path, uid, gid)
    os.chmod(folder, 0o2750)  # setgid: a group-shared folder
    for path in folder.iterdir():
        os.chmod(path, 0o640)
    assert metaedit.main([str(folder), "--set", "k=1"]) == 0
    for path in [folder, *folder.iterdir()]:
        st = os.stat(path)
        mode = 0o2750 if path == folder else 0o640
        assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, mode), path


def test_finding_10_convert_overwrite_keeps_the_replaced_files_owner_group_and_mode(
    tmp_path: Path,
) -> None:
    uid, gid = _other_owner()
    dst = tmp_path / "model.awq2"
    dst.write_bytes(b"an older file")
    os.chown(dst, uid, gid)
    os.chmod(dst, 0o640)
    assert convert_main([str(AWQ), str(dst), "--overwrite", "--quiet"]) == 0
    st = os.stat(dst)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, 0o640)


# ------------------------------------------------------------------ 13: --overwrite at once


def test_finding_13_three_overwrites_at_once_leave_one_model_and_nothing_hidden(
    tmp_path: Path,
) -> None:
    dst = tmp_path / "served"
    assert convert_main([str(AWQ), str(dst), "--quiet"]) == 0
    procs = [subprocess.Popen([sys.executable, "-m", "reference.convert", str(AWQ), str(dst),
                               "--overwrite", "--quiet", "--jobs", "1"], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True)
             for _ in range(3)]  # fmt: skip
    results = [(p.wait(timeout=600), p.stderr.read() if p.stderr else "") for p in procs]
    assert any(status == 0 for status, _ in results), results
    for status, err in results:
        assert status in (0, 3), (status, err)
        if status:  # a loser: the user's path and why, never a hidden name or a raw errno
            assert str(dst) in err and "Errno" not in err and ".awq2-" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]
    with reference.open(dst / "model.awq2") as f:
        f.verify()


# ------------------------------------------------------------------ 16: said with the user's path


def test_finding_16_a_folder_not_writable_is_said_with_the_users_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata={"base": 1})
    before = path.read_bytes()

    def refused(*args: Any, **kwargs: Any) -> Any:  # as mkstemp fails in a read-only folder
        name = os.path.join(kwargs.get("dir", "."), ".model.awq2.x.awq2-partial")
        raise PermissionError(errno.EACCES, "Permission denied", name)

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    assert metaedit.main([str(path), "--set", "k=1"]) == metaedit.EXIT_IO
    err = capsys.readouterr().err
    assert str(path) in err and "not writable" in err
    assert "partial" not in err and "Errno" not in err
    assert path.read_bytes() == before


def test_finding_16_a_full_disk_is_said_with_the_users_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata={"base": 1})
    before = path.read_bytes()

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(reindex, "copy_range", full)
    assert metaedit.main([str(path), "--set", "k=1"]) == metaedit.EXIT_IO
    err = capsys.readouterr().err
    assert str(path) in err and "disk is full" in err
    assert "partial" not in err and "Errno" not in err
    assert path.read_bytes() == before and _hidden(tmp_path) == []


@pytest.mark.parametrize("to_folder", [False, True], ids=["file", "folder"])
def test_a_full_disk_during_a_conversion_is_said_with_the_users_path(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    to_folder: bool,
) -> None:
    """The same for awq2-convert: a write that fails (ENOSPC) names DST, exit 3, nothing left."""
    from reference.conversion import steps

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(steps, "encode_linear", full)
    dst = tmp_path / ("served" if to_folder else "model.awq2")
    assert convert_main([str(AWQ), str(dst), "--quiet", "--jobs", "1"]) == 3
    err = capsys.readouterr().err
    assert str(dst) in err and "disk is full" in err
    assert "partial" not in err and "Errno" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ------------------------------------------------------------------ the transaction itself


def test_save_onto_a_file_replaced_meanwhile_is_refused_and_leaves_it(tmp_path: Path) -> None:
    path = tmp_path / "model.awq2"
    save(path, _tensors(), metadata={"first": 1})
    watched = publish.watch(path)
    save(path, _tensors(), metadata={"second": 1})  # another writer, after this run began
    with pytest.raises(publish.PublishError) as caught:
        with publish.Transaction(path, watched=watched) as t:
            assert t.file is not None
            t.file.write(b"a version that must not land")
    assert "changed while this run was writing" in str(caught.value)
    assert _metadata(path) == {"second": 1}
    assert _hidden(tmp_path) == []


def test_stale_partials_and_replaced_folders_of_a_dead_writer_are_removed(tmp_path: Path) -> None:
    """What a killed run left (named as its own, a pid that no longer lives here): removed by
    the next transaction on the same destination, and said; another destination's is not."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    dst = tmp_path / "served"
    names = []
    for suffix in (".awq2-partial", ".awq2-partial-dir", publish.REPLACED_SUFFIX):
        prefix = publish.partial.partial_prefix(dst, suffix).replace(
            f".{os.getpid()}.", f".{dead}."
        )
        left = tmp_path / f"{prefix}abcdefgh{suffix}"
        (left.mkdir() if suffix != ".awq2-partial" else left.write_bytes(b"x"))
        names.append(left)
    other = tmp_path / "other"
    prefix = publish.partial.partial_prefix(other, ".awq2-partial-dir")
    (
        tmp_path / f"{prefix.replace(f'.{os.getpid()}.', f'.{dead}.')}abcdefgh.awq2-partial-dir"
    ).mkdir()
    said: list[str] = []
    assert sorted(publish.remove_stale(dst, said.append)) == sorted(names)
    assert len(said) == 3 and all(str(n) in " ".join(said) for n in names)
    assert len(list(tmp_path.iterdir())) == 1  # the other destination's is not this run's
