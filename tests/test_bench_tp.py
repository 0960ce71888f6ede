"""bench/bench_tp.py still runs, and its own check holds: the bytes that cases (ii) and (iii)
read equal the rank file's tensors.  A smoke run of the tiny shape; no timing is asserted
(the targets are the benchmark's, docs/benchmarks.md)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def test_bench_tp_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.syspath_prepend(str(BENCH))
    bench_tp = importlib.import_module("bench_tp")  # an import error fails the test
    assert bench_tp.main(["--shape", "tiny", "--tp", "2", "--repeats", "1",
                          "--dir", str(tmp_path)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    if "O_DIRECT refused" in out:
        pytest.skip("this filesystem refuses O_DIRECT")
    for rank in (0, 1):
        assert f"T=2 rank {rank}: (ii) and (iii) bytes equal the rank file's" in out
    assert "DIFFER" not in out
    sys.modules.pop("bench_tp", None)
