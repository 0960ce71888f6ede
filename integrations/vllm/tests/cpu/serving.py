"""What the CPU-build tests share: the real checkpoints, ``convert``, ``generate.py``."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from awq2_vllm import host

HERE = Path(__file__).parent
#: This host, as vLLM's CPU build sees it (``awq2_vllm.host``): ``avx512-amx``, ``avx512``,
#: ``avx2`` (on an AVX-512 host, ``as_avx2/`` on PYTHONPATH makes it ``avx2``).
KIND = host.kind()
#: vLLM's CPU build has its 4-bit kernel (``cpu_gemm_wna16``) only in its AVX-512 libraries
#: (``_C``, ``_C_AVX512``; ``_C_AVX2`` lacks it: ``vllm/platforms/cpu.py`` ``import_kernels``).
STOCK_4BIT = KIND in ("avx512-amx", "avx512")
#: Its only WNA16 MoE backend (``CPUExpertsInt4``, ``fused_moe/experts/cpu_moe.py``) needs AMX.
STOCK_MOE = KIND == "avx512-amx"
needs_stock_4bit = pytest.mark.skipif(
    not STOCK_4BIT,
    reason=f"compares with vLLM's stock 4-bit path, whose kernel (cpu_gemm_wna16) is only in "
    f"vLLM's AVX-512 libraries; this host is {host.describe()}: tests/cpu/test_avx2.py "
    f"compares awq_v2 with the dense model there",
)
needs_amx = pytest.mark.skipif(
    not STOCK_MOE,
    reason=f"vLLM's only CPU WNA16 MoE backend (CPUExpertsInt4) needs AMX tiles (amx_tile); "
    f"this host is {host.describe()}",
)
#: The checkout (ci.sh runs these tests from a copy outside it, against the installed wheels).
CHECKOUT = Path(os.environ.get("AWQ2_CHECKOUT") or HERE.parents[3])
FIXTURES = CHECKOUT / "tests" / "fixtures" / "real"
#: fixture -> what it stands for
REAL = {
    "autoawq_gemm_g128": "AutoAWQ GEMM, asymmetric, group 128, fp16",
    "ct_awq_w4a16_asym_g128": "llm-compressor AWQ, asymmetric, group 128, bf16 checkpoint",
    "ct_w4a16_sym_g128": "llm-compressor W4A16, symmetric, group 128, fp16",
    "ct_w4a16_asym_g64": "llm-compressor RTN, asymmetric, group 64, bf16 checkpoint",
}
#: What the checkpoint folder needs besides the weights (the fixtures also keep the
#: libraries' own dequantisation in expected.safetensors, which vLLM would read as weights).
KEEP = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
        "tokenizer_config.json")  # fmt: skip


README = CHECKOUT / "README.md"
#: A marked block of the README's quick start: ``<!-- quickstart: NAME -->`` before its fence.
_BLOCK = re.compile(r"^<!-- quickstart: ([\w-]+) -->\n```(\w+)\n(.*?)^```", re.M | re.S)


def readme_blocks() -> dict[str, tuple[str, str]]:
    """name -> (language, text) of every marked block of the README, in order."""
    return {name: (lang, text) for name, lang, text in _BLOCK.findall(README.read_text())}


def commands(text: str) -> list[list[str]]:
    """The commands of a shell block, each split as the shell would (comments dropped, lines
    continued with a backslash joined)."""
    text = text.replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines() if line.strip()]


def checkpoint(name: str, dest: Path) -> Path:
    dest.mkdir(parents=True)
    for f in KEEP:
        if (FIXTURES / name / f).exists():
            shutil.copy(FIXTURES / name / f, dest / f)
    return dest


def convert(src: Path, dst: Path, *extra: str) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "reference.convert", str(src), f"{dst}/", "--quiet",
                    *extra], check=True)  # fmt: skip
    return dst


def generate(
    jobs: list[dict], tmp: Path, env: dict[str, str] | None = None, *, timeout: int = 900
) -> dict:
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    out = tmp / "out.json"
    run_env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", **(env or {})}
    done = subprocess.run([sys.executable, str(HERE / "generate.py"), str(tmp / "jobs.json"),
                           str(out)], env=run_env, timeout=timeout, capture_output=True,
                          text=True)  # fmt: skip
    log = done.stdout + done.stderr
    (tmp / "generate.log").write_text(log)
    assert done.returncode == 0, log[-6000:]
    return {"results": json.loads(out.read_text()), "log": log}


def make_runs(tmp: Path) -> dict:
    """The TP 1 runs, in one vLLM process: each real checkpoint through the stock path,
    converted through awq_v2, and as it is through awq_v2 (the fallback; once more without
    ``load_format``, which is refused); and a size-split set of one."""
    jobs, served_folders = [], {}
    for name in REAL:
        src = checkpoint(name, tmp / "src" / name)
        served = convert(src, tmp / "awq2" / name)
        served_folders[name] = str(served)
        jobs.append({"name": f"{name}/stock", "model": str(src), "quantization": None,
                     "record_errors": not STOCK_4BIT})  # fmt: skip
        jobs.append({"name": f"{name}/awq_v2", "model": str(served), "quantization": "awq_v2"})
        # the seed's fallback: the checkpoint itself through awq_v2 (test_fallback.py)
        jobs.append({"name": f"{name}/fallback", "model": str(src), "quantization": "awq_v2"})
    src = tmp / "src" / "autoawq_gemm_g128"
    jobs.append({"name": "autoawq_gemm_g128/fallback, vLLM's loader", "model": str(src),
                 "quantization": "awq_v2", "load_format": "auto",
                 "record_errors": True})  # fmt: skip
    split = convert(src, tmp / "split", "--max-shard-size", "200KB")
    jobs.append({"name": "autoawq_gemm_g128/awq_v2 split", "model": str(split),
                 "quantization": "awq_v2"})  # fmt: skip
    got = generate(jobs, tmp)
    got["split"] = split
    got["served"] = served_folders
    return got
