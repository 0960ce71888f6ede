"""The reference where vLLM has no 4-bit kernel (issue 46): the same checkpoint dequantised to
its dense dtype, served by vLLM's stock unquantised path, and the comparison of greedy runs
with it.

``dequantised(folder, dst, dtype)`` writes a plain model folder from a converted one: every
quantised layer's ``(q - z) * s`` (the reference reader's ``dequantize``, exact in float32)
rounded once to ``dtype`` as ``<prefix>.weight [n, k]``, every other tensor as stored, and
``config.json`` without its ``quantization_config``.

``compare(dense, ours)`` walks each prompt's greedy tokens.  Where they part, it is a near-tie
only if the dense run's own logprobs of its token and of ours differ by less than
:data:`TIE_MARGIN` nats; the rest of that sequence is not compared.  Up to the parting (or the
end), every logprob must be within :data:`LOGPROB_BOUND` of the dense run's (docs/serving-vllm.md
"Where vLLM has no 4-bit kernel" gives the reasons for both numbers).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

#: The widest gap, in nats, between the dense run's two candidates at which a sequence may part.
TIE_MARGIN = 0.005
#: The widest difference, in nats, of one chosen token's logprob from the dense run's.
LOGPROB_BOUND = 0.05
#: How many of the dense run's best candidates are recorded at each step.
TOP = 5


def dequantised(folder: Path, dst: Path, dtype: str) -> Path:
    import torch
    from safetensors.torch import save_file

    import reference
    import reference.torch as rt

    stored = rt.load_file(folder)
    with reference.open(folder) as reader:
        layers = reader.layers()
        tensors = {}
        for prefix in layers:
            w = torch.from_numpy(reader.dequantize(prefix).T.copy())  # [n, k] float32
            tensors[f"{prefix}.weight"] = w.to(getattr(torch, dtype))
    parts = {f"{p}.{role}" for p in layers for role in ("qweight", "qzeros", "scales")}
    for name, tensor in stored.items():
        if name not in parts:
            tensors[name] = tensor.clone()
    dst.mkdir(parents=True)
    save_file(tensors, str(dst / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config.pop("quantization_config", None)
    config["torch_dtype"] = dtype
    (dst / "config.json").write_text(json.dumps(config, indent=1))
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (folder / name).exists():
            shutil.copy(folder / name, dst / name)
    return dst


def compare(dense: dict, ours: dict) -> list[dict]:
    """One verdict per prompt: ``{"steps", "parted_at", "gap", "max_difference", "ok",
    "why"}``."""
    verdicts = []
    for p, (want, got) in enumerate(zip(dense["tokens"], ours["tokens"], strict=True)):
        steps = min(len(want), len(got))
        parted = next((i for i in range(steps) if want[i] != got[i]), None)
        compared = steps if parted is None else parted
        pairs = zip(dense["logprobs"][p][:compared], ours["logprobs"][p][:compared], strict=True)
        diffs = [abs(a - b) for a, b in pairs]
        verdict = {"steps": compared, "parted_at": parted, "gap": None,
                   "max_difference": max(diffs, default=0.0), "ok": True, "why": ""}  # fmt: skip
        if parted is None and len(want) != len(got):
            verdict.update(ok=False, why=f"{len(got)} tokens where the dense run has {len(want)}")
        if parted is not None:
            candidates = {int(t): lp for t, lp in dense["top"][p][parted].items()}
            theirs = candidates.get(got[parted])
            if theirs is None:
                verdict.update(ok=False, why=f"step {parted}: token {got[parted]} is not among "
                               f"the dense run's {TOP} best")  # fmt: skip
            else:
                gap = dense["logprobs"][p][parted] - theirs
                verdict["gap"] = gap
                if gap >= TIE_MARGIN:
                    verdict.update(ok=False, why=f"step {parted}: parted with a gap of {gap:.4g} "
                                   f"nats (a near-tie is under {TIE_MARGIN})")  # fmt: skip
        if verdict["max_difference"] > LOGPROB_BOUND:
            verdict.update(ok=False, why=f"a logprob {verdict['max_difference']:.4g} from the "
                           f"dense run's (bound {LOGPROB_BOUND})")  # fmt: skip
        verdicts.append(verdict)
    return verdicts
