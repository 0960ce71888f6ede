"""Greedy generation through vLLM's CPU build: ``python generate.py JOBS OUT``.

JOBS is a JSON list of runs, ``{"name", "model", "quantization", "tp", "dtype"}`` (``dtype``
float16 unless given: vLLM refuses float16 for Gemma 2; ``quantization``
None: vLLM's stock path for the checkpoint; ``"awq_v2"``: the plugin, also as the load
format unless ``load_format`` says another).  Every run is one ``vllm.LLM`` in this process,
one after the other (TP 1 runs share the process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``; a TP 2
run starts vLLM's two CPU workers).
Each generates 16 tokens greedily for two prompts given as token ids, with the logprob of
every chosen token (and, with ``"top_logprobs": N``, the N best candidates' at every step, as
``top``); ``"ignore_eos": true`` keeps generating past the end-of-sequence token (random
weights may choose it first); a TP 1 run also reports every parameter of the loaded model as dtype,
shape and SHA-256 of its bytes (``LLM.apply_model``), so that what the kernels hold can be
compared, not only what they produce.  OUT gets ``{name: {"model", "tokens", "logprobs",
"tensors", "llm_s", "seconds"}}`` (``llm_s``: the ``LLM(...)`` construction alone); a job
with ``"record_errors": true`` that raises gets ``{"model", "error", "seconds"}`` instead,
and the runs go on.
``gpu_check.py`` runs the same jobs on a GPU.  The ``if __name__ == "__main__"`` guard is
vLLM's requirement for scripts that may start worker processes.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

PROMPTS = [[1, 5, 9, 33, 17, 2], [1, 77, 3]]
MAX_TOKENS = 16

#: The parameter a kernel reads, by its name in each path: vLLM's AWQ path and the plugin
#: (qweight, scales, qzeros), compressed-tensors (weight_packed, weight_scale,
#: weight_zero_point).
ROLES = {"qweight": "w_q", "weight_packed": "w_q", "scales": "w_s", "weight_scale": "w_s",
         "qzeros": "w_zp", "weight_zero_point": "w_zp"}  # fmt: skip


def digest(model: Any) -> dict[str, list[Any]]:
    """Every parameter of the model and the kernel state of its quantised modules:
    ``module/role -> [dtype, shape, sha256]`` (role: w_q, w_s, w_zp, bias, or the dense
    parameter's own name)."""
    import torch

    out: dict[str, list[Any]] = {}
    for module_name, module in model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            role = ROLES.get(name, name)
            data = param.detach().cpu().contiguous()
            # as bytes, whatever the dtype (NumPy has no bfloat16, even for an empty tensor)
            sha = hashlib.sha256(data.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
            out[f"{module_name}/{role}"] = [str(data.dtype), list(data.shape), sha]
        if hasattr(module, "isa_hint"):  # the CPU WNA16 kernel's choice of code path
            out[f"{module_name}/isa_hint"] = [module.isa_hint]
    return out


def run(job: dict[str, Any]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    extra = {}
    if job.get("quantization"):
        extra = {"quantization": job["quantization"],
                 "load_format": job.get("load_format", job["quantization"])}  # fmt: skip
    llm = LLM(model=job["model"], skip_tokenizer_init=True, dtype=job.get("dtype", "float16"),
              enforce_eager=True,
              max_model_len=128, tensor_parallel_size=job.get("tp", 1), seed=0,
              **extra)  # fmt: skip
    llm_s = time.perf_counter() - started
    top = job.get("top_logprobs", 0)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, logprobs=top,
                            ignore_eos=job.get("ignore_eos", False))  # fmt: skip
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
    tokens, logprobs, best = [], [], []
    for out in outs:
        completion = out.outputs[0]
        tokens.append(list(completion.token_ids))
        chosen = zip(completion.logprobs or [], completion.token_ids, strict=True)
        logprobs.append([step[token].logprob for step, token in chosen])
        best.append(
            [{t: lp.logprob for t, lp in step.items()} for step in completion.logprobs or []]
        )
    tensors = llm.apply_model(digest)[0] if job.get("tp", 1) == 1 else None
    seconds = time.perf_counter() - started
    del llm
    gc.collect()
    return {
        "model": job["model"],
        "llm_s": llm_s,
        "tokens": tokens,
        "logprobs": logprobs,
        "top": best if top else None,
        "tensors": tensors,
        "seconds": seconds,
    }


def main() -> None:
    jobs = json.loads(open(sys.argv[1]).read())
    results = {}
    for job in jobs:
        started = time.perf_counter()
        try:
            results[job["name"]] = run(job)
        except Exception as exc:  # recorded, for a job that says it may be refused
            if not job.get("record_errors"):
                raise
            results[job["name"]] = {"model": job["model"], "error": f"{type(exc).__name__}: {exc}",
                                    "seconds": time.perf_counter() - started}  # fmt: skip
        print(f"generate.py: {job['name']}: {results[job['name']]['seconds']:.1f} s", flush=True)
    with open(sys.argv[2], "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
