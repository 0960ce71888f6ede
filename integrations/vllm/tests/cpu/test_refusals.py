"""What vLLM's CPU build is refused, with the plugin's code and both sides named, before any
model is built."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from serving import convert

from reference.examples import LlamaShape, write_checkpoint

START = """
import sys
from vllm import LLM
LLM(model=sys.argv[1], quantization="awq_v2", load_format="awq_v2", dtype="float16",
    enforce_eager=True, max_model_len=128, skip_tokenizer_init=True,
    tensor_parallel_size=int(sys.argv[2]))
"""


def _start(model, tp=1):
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    done = subprocess.run([sys.executable, "-c", START, str(model), str(tp)], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_a_rank_set_cut_for_another_tp_size_is_refused_naming_both(tmp_path):
    v1 = write_checkpoint(tmp_path / "v1", LlamaShape())
    ranked = convert(v1, tmp_path / "tp2", "--tp", "2")
    code, log = _start(ranked, tp=1)
    assert code != 0
    assert "[TP_MISMATCH]" in log, log[-3000:]
    line = next(x for x in log.splitlines() if "[TP_MISMATCH]" in x)
    assert "tensor_parallel_size 1" in line and "tp_size 2" in line, line
    assert "awq2_vllm: TP rank" not in log  # nothing was read


def test_a_folder_without_weights_is_refused_at_configuration(tmp_path):
    v1 = write_checkpoint(tmp_path / "v1", LlamaShape())
    served = convert(v1, tmp_path / "served")
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(served / "config.json", empty / "config.json")
    assert json.loads((empty / "config.json").read_text())["quantization_config"][
        "quant_method"] == "awq_v2"  # fmt: skip
    code, log = _start(empty)
    assert code != 0
    line = next((x for x in log.splitlines() if "[NO_WEIGHTS]" in x), None)
    assert line is not None and str(empty) in line, log[-3000:]
    assert "Starting to load model" not in log  # refused while the engine is configured
