"""The two scripts beside the tests: ``gpu_check.py`` (for a GPU machine) refuses plainly
where there is none, and ``bench/bench_vllm.py`` runs end to end on the tiny shape."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from serving import CHECKOUT, needs_stock_4bit


def test_gpu_check_says_it_needs_a_gpu():
    done = subprocess.run([sys.executable, str(CHECKOUT / "integrations/vllm/gpu_check.py")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "no CUDA GPU" in done.stdout


@needs_stock_4bit
def test_bench_vllm_prints_both_paths_side_by_side(tmp_path):
    env = {**os.environ, "PYTHONPATH": ""}
    done = subprocess.run([sys.executable, str(CHECKOUT / "bench" / "bench_vllm.py"), "--shape",
                           "tiny", "--repeats", "1", "--dir", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for label in ("LLM(...) construction", "load_weights", "process_weights_after_loading",
                  "peak RSS (MiB)"):  # fmt: skip
        line = next(x for x in done.stdout.splitlines() if x.strip().startswith(label))
        assert len(line.split()) >= 4, line
    assert Path(tmp_path / "awq2" / "model.awq2").is_file()


def test_bench_portable_prints_the_paths_side_by_side(tmp_path):
    """The portable path's bench on the tiny shape, as an AVX2-only host runs it (dense and
    portable only: vLLM's kernel is absent there), end to end."""
    done = subprocess.run([sys.executable, str(CHECKOUT / "bench" / "bench_portable.py"),
                           "--shape", "tiny", "--repeats", "1", "--as-avx2", "--dir",
                           str(tmp_path)], capture_output=True, text=True,
                          timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    print("\n" + done.stdout)
    assert "without AVX-512" in done.stdout and "_C_AVX2" in done.stdout
    for label in ("prefill (tokens/s)", "decode (tokens/s)", "parameters in memory (MiB)"):
        line = next(x for x in done.stdout.splitlines() if x.strip().startswith(label))
        assert len(line.split()) >= 5, line  # dense, portable, portable/dense
