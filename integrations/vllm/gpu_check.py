"""GPU check: vLLM's stock AWQ path against the awq_v2 plugin, on one model.

    python integrations/vllm/gpu_check.py V1_FOLDER SERVED_FOLDER [--prompts N] [--tokens T]

V1_FOLDER is an AutoAWQ checkpoint; SERVED_FOLDER is ``python -m reference.convert V1_FOLDER
SERVED_FOLDER/``.  Each is loaded by ``vllm.LLM`` in its own subprocess (two engines do not
share one GPU well): the stock path with ``quantization="awq"`` (vLLM 0.33 routes it to
``AutoAWQConfig`` -> ``MarlinLinearKernel``), the plugin with ``quantization="awq_v2",
load_format="awq_v2"``.  It prints, for each: the load time (``LLM(...)`` construction), the
seconds spent in ``process_weights_after_loading`` (vLLM's
``model_executor/model_loader/utils.py`` function, timed by wrapping it), greedy outputs on a
few prompts and their top-20 logprobs; then whether the token ids are identical and the
largest logprob difference.

NOT RUN: this project's machines and CI have no GPU, so this script has never been executed;
the GPU path (the Marlin GEMM on the plugin's parameters, the pinned-memory copies) is not
measured.  The CPU tests in tests/ prove the parameters equal vLLM's bit for bit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "In 1905, Albert Einstein",
    "A haiku about the sea:",
]


def run_one(model: str, plugin: bool, prompts: list[str], tokens: int) -> dict:
    import vllm.model_executor.model_loader.base_loader as base_loader
    from vllm import LLM, SamplingParams

    spent = [0.0]
    real = base_loader.process_weights_after_loading

    def timed(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t

    base_loader.process_weights_after_loading = timed
    kwargs = (
        dict(quantization="awq_v2", load_format="awq_v2") if plugin else dict(quantization="awq")
    )
    t0 = time.perf_counter()
    llm = LLM(model=model, dtype="float16", enforce_eager=True, tensor_parallel_size=1, **kwargs)
    load = time.perf_counter() - t0
    params = SamplingParams(temperature=0.0, max_tokens=tokens, logprobs=20)
    outs = llm.generate(prompts, params)
    return {
        "load_s": load,
        "process_weights_after_loading_s": spent[0],
        "tokens": [list(o.outputs[0].token_ids) for o in outs],
        "text": [o.outputs[0].text for o in outs],
        "logprobs": [
            [{str(k): v.logprob for k, v in step.items()} for step in o.outputs[0].logprobs]
            for o in outs
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("v1")
    p.add_argument("served")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--one", choices=["stock", "plugin"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        model = args.served if args.one == "plugin" else args.v1
        print(json.dumps(run_one(model, args.one == "plugin", PROMPTS, args.tokens)))
        return 0
    results = {}
    for which in ("stock", "plugin"):
        cmd = [sys.executable, __file__, args.v1, args.served, "--tokens", str(args.tokens),
               "--one", which]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[which] = json.loads(done.stdout.strip().splitlines()[-1])
        r = results[which]
        print(f"{which:>6}: load {r['load_s']:.2f} s, process_weights_after_loading "
              f"{r['process_weights_after_loading_s']:.3f} s")  # fmt: skip
    same = results["stock"]["tokens"] == results["plugin"]["tokens"]
    worst = 0.0
    for a, b in zip(results["stock"]["logprobs"], results["plugin"]["logprobs"], strict=True):
        for sa, sb in zip(a, b, strict=False):
            for tok in set(sa) & set(sb):
                worst = max(worst, abs(sa[tok] - sb[tok]))
    for prompt, text in zip(PROMPTS, results["plugin"]["text"], strict=True):
        print(f"{prompt!r} -> {text!r}")
    print(f"greedy tokens identical: {same}; largest logprob difference: {worst:.3g}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
