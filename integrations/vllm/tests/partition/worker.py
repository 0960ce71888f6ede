"""One tensor-parallel rank: ``python worker.py RANK WORLD PORT OUT FOLDER...``.

Builds each checkpoint folder's modules with vLLM (``initialize_model``: no weights are
read) at this rank of ``WORLD`` and writes, as JSON rows to OUT, for every stored quantised
layer, how vLLM's module partitions it on this rank (:func:`awq2_vllm.method.partition`, and
for MoE experts the ``RoutedExperts`` layer's own tensor-parallel rank and size) beside how
the project's rule table (:func:`reference.sets.tpsplit.plan_for`, what ``awq2-convert --tp``
cuts with) cuts it.  A folder whose model vLLM cannot build gives one row with the error."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).parent.parent / "marlin"))

import awq_reference


def stored_layers(folder: Path) -> dict[str, int]:
    """The checkpoint's quantised layers, by prefix, with their whole output features."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        for name in f.keys():
            if name.endswith(".weight_packed"):  # compressed-tensors: [out, in * bits / 32]
                out[name.rpartition(".")[0]] = f.get_slice(name).get_shape()[0]
            elif name.endswith(".qweight"):  # AutoAWQ: [in, out / 8]
                out[name.rpartition(".")[0]] = f.get_slice(name).get_shape()[1] * 8
    return out


def share(parallel: str | None, index: int, count: int, width: int) -> list[Any]:
    """One part's cut as a row: a part whole on the rank (count 1) has no direction."""
    return [None if count == 1 else parallel, index, count, width]


def table_share(plan: Any, prefix: str, n: int, rank: int) -> list[list[Any]]:
    """The table's cut of one stored layer on ``rank``: [parallel, index, count, width] per
    part (a fused layer: per piece)."""
    cut = plan.cuts(prefix, out_features=n, quantised=True)[rank]
    if cut.pieces:
        return [share("column", p.index, p.count, p.width) for p in cut.pieces]
    return [share(cut.parallel, cut.index, cut.count, n)]


def engine_rows(model: Any, stored: dict[str, int], rank: int, plan: Any) -> list[list[Any]]:
    from awq2_vllm.method import partition
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from vllm.model_executor.layers.linear import LinearBase

    mapping = getattr(model, "packed_modules_mapping", {}) or {}
    rows = []
    for prefix, module in model.named_modules():
        if isinstance(module, LinearBase):
            head, _, last = prefix.rpartition(".")
            parts = [prefix] if prefix in stored else [
                f"{head}.{p}" for p in mapping.get(last, [])]  # fmt: skip
            if not parts or not all(p in stored for p in parts):
                continue  # not a stored quantised layer (lm_head, a router)
            engine = [share(s.parallel, s.index, s.count,  # a row cut keeps every output
                            s.n * s.count if s.parallel == "column" else s.n)
                      for s in partition(module)]  # fmt: skip
            table: list[list[Any]] = []
            for part in parts:
                table += table_share(plan, part, stored[part], rank)
            rows.append([prefix, parts, engine, table])
        elif isinstance(module, RoutedExperts):
            pc = module.moe_config.moe_parallel_config
            whole = module.intermediate_size_per_partition * pc.tp_size
            for e in range(module.global_num_experts):
                for proj, kind in (("gate_proj", "column"), ("up_proj", "column"),
                                   ("down_proj", "row")):  # fmt: skip
                    name = next((p for p in stored if p.startswith(f"{prefix.rpartition('.')[0]}.")
                                 and p.endswith(f".experts.{e}.{proj}")), None)  # fmt: skip
                    if name is None:
                        rows.append([f"{prefix} expert {e} {proj}", [], "not stored", []])
                        continue
                    engine = [share(kind, pc.tp_rank, pc.tp_size, whole if kind == "column" else 0)]
                    cut = plan.cuts(name, out_features=stored[name], quantised=True)[rank]
                    table = [share(cut.parallel, cut.index, cut.count,
                                   stored[name] if kind == "column" else 0)]  # fmt: skip
                    rows.append([name, [name], engine, table])
    return rows


def build(config: dict[str, Any], dtype: str, world: int, folder: Path) -> Any:
    """vLLM's modules of the model ``config`` describes, at this rank, without weights and
    without its quantisation (a module's partition does not depend on it, and vLLM 0.33's
    MoE backends are chosen for a GPU): ``initialize_model`` from a ``config.json`` alone."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model
    from vllm.utils.torch_utils import set_default_torch_dtype

    folder.mkdir(parents=True)
    plain = {k: v for k, v in config.items() if k != "quantization_config"}
    (folder / "config.json").write_text(json.dumps(plain))
    args = EngineArgs(model=str(folder), dtype=dtype, enforce_eager=True, max_model_len=128,
                      skip_tokenizer_init=True, tensor_parallel_size=world)  # fmt: skip
    cfg = args.create_engine_config()
    with (set_current_vllm_config(cfg), set_default_torch_dtype(cfg.model_config.dtype),
          torch.device("cpu")):  # fmt: skip
        return initialize_model(vllm_config=cfg)


def main() -> None:
    from reference.ground.errors import FormatError
    from reference.sets.tpsplit import plan_for

    rank, world, port = (int(a) for a in sys.argv[1:4])
    out, folders = Path(sys.argv[4]), [Path(a) for a in sys.argv[5:]]
    scratch = Path(tempfile.mkdtemp(prefix="awq2-partition-"))
    results: dict[str, Any] = {}
    with awq_reference.vllm_context():
        awq_reference.init_distributed(rank, world, port)
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        dtype = "bfloat16" if config["architectures"][0] == "Gemma2ForCausalLM" else "float16"
        try:
            plan = plan_for(config, world)
        except FormatError as exc:
            results[folder.name] = {"error": f"table: {exc}"}
            continue
        try:
            model = build(config, dtype, world, scratch / folder.name)
            results[folder.name] = {"rows": engine_rows(model, stored_layers(folder), rank, plan)}
        except Exception as exc:  # one folder's failure is its row, the others go on
            results[folder.name] = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                                    "traceback": traceback.format_exc()[-4000:]}  # fmt: skip
    out.write_text(json.dumps(results))
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
