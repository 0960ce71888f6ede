"""GPU check: vLLM 0.33 or 0.34 (CUDA) serving AWQ-v2 against its stock path, file to tokens.

    python integrations/vllm/gpu_check.py [--work DIR] [--skip-1b]

Run from the repository root, in an environment with vLLM 0.33.0 or 0.34.0 (the CUDA build;
0.34 from ``integrations/vllm/requirements-vllm-0.34.txt``, as ``ci.sh cuda-0.34`` installs
it), this project and the plugin installed (``pip install -e . -e integrations/vllm``), on a
machine with at least one CUDA GPU (two for the TP 2 cases).  It needs no network: the
checkpoints are the committed real fixtures (``tests/fixtures/real``: AutoAWQ and
llm-compressor, asymmetric and symmetric) and synthetic Llamas written by
``reference.examples``.

For every case it converts the checkpoint with ``convert`` (a single file, a size-split set, a
``--tp 2`` rank set) and runs, each in its own process (``tests/cpu/generate.py``, the runner
of the CPU tests): vLLM's stock path on the original checkpoint (``awq`` or
``compressed-tensors``: ``MarlinLinearKernel``, which repacks every layer on the GPU) and the
plugin on the converted folder (``awq_v2``: the Marlin GEMM on the stored tiles, no repack).
It prints one row per case: tokens equal (16 greedy tokens, 2 prompts), the largest logprob
difference, whether every parameter of the loaded model is the same bytes (TP 1), and the
``LLM(...)`` construction time of both; then the 1B-shaped synthetic model's load times side
by side (the repack saving on a GPU).  Exit status 1 if any case's tokens differ.

NOT RUN: the machines this project has run on have no GPU; this script has never been
executed.  On the CPU, ``tests/cpu`` prove the same comparisons through vLLM's CPU build (where
the plugin feeds the CPU kernel), and ``tests/marlin`` prove the Marlin path's parameters equal
vLLM 0.33's and 0.34's bit for bit at TP 1 and 2; the Marlin GEMM on them, the pinned
copies and the GPU load times are what this script is for.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GENERATE = HERE / "tests" / "cpu" / "generate.py"
sys.path.insert(0, str(GENERATE.parent))  # the CPU tests' helpers: the same cases, made alike
from serving import REAL, checkpoint, convert  # noqa: E402


def generate(jobs: list[dict], work: Path, tag: str) -> dict:
    """Each job in a process of its own (two engines do not share one GPU well)."""
    results = {}
    for job in jobs:
        spec, out = work / f"{tag}-{len(results)}.json", work / f"{tag}-{len(results)}.out"
        spec.write_text(json.dumps([job]))
        done = subprocess.run([sys.executable, str(GENERATE), str(spec), str(out)],
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode != 0:
            print(f"{job['name']}: failed\n{done.stderr[-3000:]}")
            results[job["name"]] = None
            continue
        results.update(json.loads(out.read_text()))
    return results


def compare(name: str, stock: dict | None, ours: dict | None, tp: int) -> bool:
    if stock is None or ours is None:
        print(f"  {name:<44} TP {tp}  did not run")
        return False
    same = ours["tokens"] == stock["tokens"]
    diff = max((abs(a - b) for pa, pb in zip(stock["logprobs"], ours["logprobs"], strict=True)
                for a, b in zip(pa, pb, strict=False)), default=0.0)  # fmt: skip
    tensors = "-" if stock["tensors"] is None else str(_same_tensors(stock, ours))
    print(f"  {name:<44} TP {tp}  tokens equal {same!s:<5}  max logprob diff {diff:<9.3g} "
          f"same bytes {tensors:<5}  LLM() stock {stock['llm_s']:.1f} s, awq_v2 "
          f"{ours['llm_s']:.1f} s")  # fmt: skip
    return same


def _same_tensors(stock: dict, ours: dict) -> bool:
    a = {k: v for k, v in stock["tensors"].items() if not k.endswith("/weight_shape")}
    return a == ours["tensors"]


def main(argv: list[str] | None = None) -> int:
    import torch

    from reference.examples import LlamaShape, write_checkpoint

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, help="work folder (default: a temporary one)")
    p.add_argument("--skip-1b", action="store_true", help="leave out the 1B load times")
    args = p.parse_args(argv)
    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("no CUDA GPU: this check is for a GPU machine (tests/cpu covers the CPU build)")
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="awq2-gpu-check-"))
    ok = True
    print(f"vLLM on {gpus} GPU(s): {torch.cuda.get_device_name(0)}")
    print("cases (stock path on the original checkpoint against awq_v2 on the converted one):")
    for name in REAL:
        src = checkpoint(name, work / "src" / name)
        served = convert(src, work / "awq2" / name)
        split = convert(src, work / "split" / name, "--max-shard-size", "200KB")
        got = generate([{"name": "stock", "model": str(src), "quantization": None},
                        {"name": "file", "model": str(served), "quantization": "awq_v2"},
                        {"name": "split", "model": str(split), "quantization": "awq_v2"}],
                       work, name)  # fmt: skip
        ok &= compare(f"{name} (file)", got.get("stock"), got.get("file"), 1)
        ok &= compare(f"{name} (split set)", got.get("stock"), got.get("split"), 1)
    example = write_checkpoint(work / "src" / "example", LlamaShape())
    ranked = convert(example, work / "tp2" / "example", "--tp", "2")
    single = convert(example, work / "awq2" / "example")
    if gpus >= 2:
        got = generate([{"name": "stock", "model": str(example), "quantization": None, "tp": 2},
                        {"name": "rank", "model": str(ranked), "quantization": "awq_v2", "tp": 2},
                        {"name": "file", "model": str(single), "quantization": "awq_v2",
                         "tp": 2}], work, "tp2")  # fmt: skip
        ok &= compare("example Llama (rank set)", got.get("stock"), got.get("rank"), 2)
        ok &= compare("example Llama (file, cut per rank)", got.get("stock"), got.get("file"), 2)
    else:
        print(f"  TP 2 cases: need 2 GPUs, found {gpus}: not run")
    if not args.skip_1b:
        big = write_checkpoint(work / "src" / "1b", LlamaShape(2048, 5632, 22, 32, 4, 32000))
        big_served = convert(big, work / "awq2" / "1b")
        got = generate([{"name": "stock", "model": str(big), "quantization": None},
                        {"name": "awq_v2", "model": str(big_served), "quantization": "awq_v2"}],
                       work, "1b")  # fmt: skip
        ok &= compare("1B-shaped synthetic Llama (file)", got.get("stock"), got.get("awq_v2"), 1)
    print(f"work folder: {work}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    raise SystemExit(main())
