"""``awq2-convert`` under unlucky conditions (issue 29, items 7, 8, 12, 13 and 17): a
conversion killed midway, a destination that is a link or a mount point, a destination
filled by someone else meanwhile, a long legal name, a rules file nested too deeply
[CONV-2, WR-3]."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import reference
from reference.convert import main as convert_main
from reference.write import partial

ROOT = Path(__file__).resolve().parents[1]
AWQ = ROOT / "tests" / "fixtures" / "real" / "autoawq_gemm_g128"


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def _served(folder: Path) -> None:
    """A complete model folder: model.awq2 verified, config.json beside it."""
    with reference.open(folder / "model.awq2") as f:
        f.verify()
    assert (folder / "config.json").is_file()


def test_a_killed_folder_conversion_is_cleaned_up_by_the_next_run(tmp_path):
    """Item 8: a folder conversion killed midway (SIGKILL: no clean-up runs) used to leave
    ``.DST.partial-*/`` for ever; now the partial folder is named and locked as a partial file
    is, and the next run removes it (and says so) once its writer is provably gone."""
    dst = tmp_path / "served"
    script = textwrap.dedent(f"""
        import os, signal, sys
        from reference import convert
        from reference.conversion import steps
        real = steps.prepare_step
        calls = []
        def killed(src, step):
            calls.append(step)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(src, step)
        steps.prepare_step = killed
        sys.exit(convert.main([{str(AWQ)!r}, {str(dst)!r}, "--jobs", "1", "--quiet"]))
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=120)
    assert killed.returncode == -9
    left = [p for p in tmp_path.iterdir() if p.name.endswith(partial.FOLDER_SUFFIX)]
    assert len(left) == 1 and left[0].is_dir() and not dst.exists(), list(tmp_path.iterdir())
    rerun = subprocess.run([sys.executable, "-m", "reference.convert", str(AWQ), str(dst),
                            "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert rerun.returncode == 0, rerun
    assert f"removing a partial folder left by an interrupted run: {left[0]}" in rerun.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]
    _served(dst)


def test_a_running_conversions_partial_folder_is_never_removed(tmp_path):
    """Item 8, the other side: a partial folder whose writer is alive (it holds the lock) is
    not stale, whatever its pid says."""
    dst = tmp_path / "served"
    tmp, lock = partial.create_folder(dst)
    try:
        assert partial.stale_partials(dst, folders=True) == []
    finally:
        os.close(lock)
    tmp.rmdir()


def test_a_long_legal_folder_name_converts(tmp_path):
    """Item 17: a 240-byte DST folder name (legal: at most 255) failed with "File name too
    long", the hidden temporary name adding 18 bytes; it is now shortened as a file's is."""
    dst = tmp_path / ("m" * 240)
    assert convert_main([str(AWQ), str(dst), "--quiet"]) == 0
    _served(dst)
    assert sorted(p.name for p in tmp_path.iterdir()) == [dst.name]


def test_a_link_to_an_empty_folder_is_written_through(tmp_path):
    """Item 12: DST a symbolic link to an empty folder elsewhere passed every check, then, the
    whole model written, the rename onto the link failed with a raw errno: now the model is
    published at the link's target, and the link leads to it."""
    elsewhere = tmp_path / "disk" / "models"
    elsewhere.mkdir(parents=True)
    (tmp_path / "work").mkdir()
    link = tmp_path / "work" / "served"
    link.symlink_to(elsewhere)
    assert convert_main([str(AWQ), str(link), "--quiet"]) == 0
    assert link.is_symlink() and link.resolve() == elsewhere.resolve()
    _served(link)
    assert [p.name for p in elsewhere.parent.iterdir()] == ["models"]


def test_a_mount_point_is_refused_before_anything_is_written(tmp_path, capsys):
    """Item 12: an empty mount point (a container volume) as DST passed every check, the
    whole model was written on the parent's file system, then the rename failed with a raw
    errno.  Now it is refused at once (exit 2), naming a folder inside it to use instead."""
    mount = tmp_path / "volume"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "none", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {made.stderr.strip()}")
    try:
        assert convert_main([str(AWQ), str(mount), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert f"DST {mount} is a mount point" in err and f"such as {mount}/model" in err
        assert list(mount.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == [
            "volume"
        ]
        assert convert_main([str(AWQ), str(mount / "model"), "--quiet"]) == 0
        _served(mount / "model")
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_destination_filled_meanwhile_is_left_alone_and_named(tmp_path, monkeypatch, capsys):
    """Item 13: losing a race to another conversion printed a raw errno naming the hidden
    partial folder; now the message names DST and what happened, DST keeps the other
    process's files, and the partial folder is removed."""
    from reference.conversion import steps

    dst = tmp_path / "served"
    dst.mkdir()
    real = steps.prepare_step

    def racing(src, step):
        if not (dst / "theirs.txt").exists():
            (dst / "theirs.txt").write_text("the other conversion")
        return real(src, step)

    monkeypatch.setattr(steps, "prepare_step", racing)
    assert convert_main([str(AWQ), str(dst), "--quiet", "--jobs", "1"]) == 3
    err = capsys.readouterr().err
    assert f"{dst} was filled while this run was writing" in err and "partial" not in err
    assert _tree(dst) == {"theirs.txt": hashlib.sha256(b"the other conversion").hexdigest()}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["served"]


def test_rules_nested_too_deeply_are_a_usage_error(tmp_path, capsys):
    """Item 7: ``--tp-rules`` of 100,000 nested ``[`` raised RecursionError (a traceback); the
    depth is now measured before parsing: a usage error (exit 2) saying how deep."""
    rules = tmp_path / "rules.json"
    rules.write_text("[" * 100_000)
    with pytest.raises(SystemExit) as raised:
        convert_main([str(AWQ), str(tmp_path / "out"), "--tp", "2", "--tp-rules", str(rules)])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "nested 100000 deep" in err and "Traceback" not in err
    rules.write_bytes(b'[["x", "column"]]\xff')
    with pytest.raises(SystemExit):
        convert_main([str(AWQ), str(tmp_path / "out"), "--tp", "2", "--tp-rules", str(rules)])
    assert "not JSON in UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_source_cut_short_while_converting_is_refused_not_a_sigbus(tmp_path):
    """Item 15: SRC's safetensors truncated while the converter reads it (a download or a sync
    still writing it) killed the converter with SIGBUS (its tensors were read through
    safetensors' memory map) and left the partial behind; now the short read is
    V1_INCOMPLETE, exit 1, and nothing is left at DST."""
    src = tmp_path / "src"
    src.mkdir()
    for f in AWQ.iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    dst = tmp_path / "out"
    script = textwrap.dedent(f"""
        import os, sys
        from reference import convert
        from reference.conversion import steps
        real = steps.prepare_step
        calls = []
        def cut(src, step):
            calls.append(step)
            if len(calls) == 2:
                os.truncate({str(src / "model.safetensors")!r}, 4096)
            return real(src, step)
        steps.prepare_step = cut
        sys.exit(convert.main([{str(src)!r}, {str(dst)!r}, "--jobs", "1", "--quiet"]))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)  # fmt: skip
    assert result.returncode == 1, result
    assert "[V1_INCOMPLETE]" in result.stderr and "runs past the end of the file" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


def test_a_set_of_more_members_than_descriptors_converts(tmp_path):
    """Item 5, the writer's side: ``convert --max-shard-size`` kept every member's file open
    until the end, so a set of more members than ``ulimit -n`` failed (EMFILE, reported as
    the source's V1_INCOMPLETE); a full member is now parked (flushed, closed) until the set
    is finished.  Here more than 90 members under a limit of 40 descriptors."""
    from reference.examples import LlamaShape, write_checkpoint

    src = write_checkpoint(tmp_path / "v1", LlamaShape(num_hidden_layers=12))
    dst = tmp_path / "many"
    script = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))
        from reference import convert
        sys.exit(convert.main([{str(src)!r}, {str(dst)!r}, "--max-shard-size", "1",
                               "--quiet", "--jobs", "1"]))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result
    assert len(list(dst.glob("*.awq2"))) > 90
    with reference.open(src) as original, reference.open(dst) as converted:
        converted.verify()
        assert sorted(converted.names()) == sorted(original.names())


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_parked_writer_finishes_or_aborts_cleanly(tmp_path):
    """Writer.park: the file's descriptor is closed, the metadata may still change, close()
    publishes the same bytes an unparked writer writes, and abort() leaves nothing."""
    import numpy as np

    from reference.write.writer import Writer

    data = np.arange(12, dtype=np.float16)
    plain = tmp_path / "plain.awq2"
    with Writer(plain, metadata={"a": 1}) as w:
        w.add("x", data)
        w.set_metadata({"a": 2})
    parked = tmp_path / "parked.awq2"
    before = _open_descriptors()
    w = Writer(parked, metadata={"a": 1})
    w.add("x", data)
    assert _open_descriptors() == before + 1
    w.park()
    assert _open_descriptors() == before
    w.set_metadata({"a": 2})
    w.close()
    assert parked.read_bytes() == plain.read_bytes()
    w = Writer(tmp_path / "dropped.awq2")
    w.add("x", data)
    w.park()
    w.abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["parked.awq2", "plain.awq2"]
