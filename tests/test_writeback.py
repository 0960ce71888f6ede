"""Background write-back (reference.write.writeback) and the writer's use of it [WR-2, CONV-3].

The rules: a flush is started each time ``every`` more bytes have been written, one at a
time; the descriptor outlives the last flush (close and abort wait for it); a flush that
failed fails the write, and then nothing is published; the bytes do not depend on it.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import reference
from reference.convert import convert
from reference.convert import main as convert_main
from reference.examples import LlamaShape, write_checkpoint
from reference.write import writeback as writeback_module
from reference.write.writeback import Writeback
from reference.write.writer import Writer


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {f"t{i}": rng.integers(0, 255, size=(300, 1000 + i), dtype=np.uint8) for i in range(6)}


def _write(path: Path, *, writeback: bool) -> None:
    with Writer(path, metadata={"note": "wb"}, writeback=writeback) as w:
        for name, array in _tensors().items():
            w.add(name, array)


def test_a_flush_every_so_many_bytes_one_at_a_time(monkeypatch, tmp_path):
    """Flushes start after each ``every`` bytes, never two at once: a flush still running
    when the next is due is left alone, and the bytes carry over to the next call."""
    release = threading.Event()
    calls: list[int] = []

    def slow_sync(fd: int) -> None:
        calls.append(fd)
        assert release.wait(10)

    monkeypatch.setattr(writeback_module, "_datasync", slow_sync)
    with open(tmp_path / "f", "wb") as f:
        wb = Writeback(f.fileno(), every=100)
        wb.wrote(99)
        assert wb.flushes == 0
        wb.wrote(1)  # 100 bytes: the first flush starts (and blocks)
        assert wb.flushes == 1
        wb.wrote(500)  # due, but one is running
        assert wb.flushes == 1
        release.set()
        wb.close()  # waits for it
        assert calls == [f.fileno()]
        with pytest.raises(ValueError, match="closed"):
            wb.wrote(1)
        wb.close()  # idempotent


def test_every_must_be_positive(tmp_path):
    with open(tmp_path / "f", "wb") as f, pytest.raises(ValueError, match="positive"):
        Writeback(f.fileno(), every=0)


def test_the_bytes_do_not_depend_on_writeback(monkeypatch, tmp_path):
    """WR-1: with a flush due after every 4 KiB (some during the write) the file is the same."""
    monkeypatch.setattr(writeback_module, "WRITEBACK_BYTES", 4096)
    flushed: list[int] = []
    real = writeback_module._datasync
    monkeypatch.setattr(writeback_module, "_datasync", lambda fd: (flushed.append(fd), real(fd)))
    _write(tmp_path / "plain.awq2", writeback=False)
    assert flushed == []
    _write(tmp_path / "wb.awq2", writeback=True)
    assert len(flushed) >= 1  # one at a time: how many depends on the storage
    assert (tmp_path / "plain.awq2").read_bytes() == (tmp_path / "wb.awq2").read_bytes()
    with reference.open(tmp_path / "wb.awq2", validate=True) as r:
        r.verify()


def test_a_failed_flush_fails_the_write_and_publishes_nothing(monkeypatch, tmp_path):
    """WR-2: an I/O error of a background flush is raised by the writer; the destination is
    not created and no partial file is left."""
    monkeypatch.setattr(writeback_module, "WRITEBACK_BYTES", 4096)

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error (injected)")

    monkeypatch.setattr(writeback_module, "_datasync", failing)
    with pytest.raises(OSError, match="injected"):
        _write(tmp_path / "out.awq2", writeback=True)
    assert sorted(os.listdir(tmp_path)) == []


def test_abort_waits_for_the_flush_in_flight(monkeypatch, tmp_path):
    """The descriptor is still open while the last flush runs: abort closes it only after."""
    monkeypatch.setattr(writeback_module, "WRITEBACK_BYTES", 4096)
    started, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def slow_sync(fd: int) -> None:
        started.set()
        assert release.wait(10)
        try:
            os.fstat(fd)
            seen.append(True)
        except OSError:
            seen.append(False)

    monkeypatch.setattr(writeback_module, "_datasync", slow_sync)
    w = Writer(tmp_path / "out.awq2", writeback=True)
    w.add("a", np.zeros(8192, dtype=np.uint8))
    assert started.wait(10)
    threading.Timer(0.2, release.set).start()
    w.abort()
    assert seen == [True]
    assert sorted(os.listdir(tmp_path)) == []


def test_a_failed_flush_during_a_conversion_exits_3_with_nothing_written(
    monkeypatch, tmp_path, capsys
):
    """The converter writes with write-back when it has threads; an error there is an I/O
    error (exit 3), and DST is not created."""
    src = write_checkpoint(tmp_path / "v1", LlamaShape(num_hidden_layers=2, seed=7))
    monkeypatch.setattr(writeback_module, "WRITEBACK_BYTES", 4096)

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error (injected)")

    monkeypatch.setattr(writeback_module, "_datasync", failing)
    dst = tmp_path / "out.awq2"
    assert convert_main([str(src), str(dst), "--quiet", "--jobs", "2"]) == 3
    assert "injected" in capsys.readouterr().err
    assert not dst.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v1"]
    # --jobs 1 writes on the calling thread alone: no write-back, so the same run succeeds
    assert convert(src, dst, jobs=1)["jobs"] == 1
