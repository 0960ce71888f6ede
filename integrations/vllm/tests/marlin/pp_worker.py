"""Pipeline stages of the tiny Llama, through vLLM and through the plugin:
``python pp_worker.py V1 OUT RANK PORT TPxPP:SERVED[,SERVED...] ...``.

For each layout in turn, the process is global rank ``RANK`` of ``TP * PP`` (gloo on vLLM's CPU
platform; ranks beyond it sit the layout out).  With vLLM's process groups made by
``init_distributed_environment`` and ``ensure_model_parallel_initialized``
(``vllm/distributed/parallel_state.py``), its stage is vLLM's own: ``get_pp_group()`` and
``get_pp_indices`` decide which layers it builds, the others being ``PPMissingLayer``.  The
groups are destroyed after each layout and made again on the next port.

In this one process the stage is built

* by vLLM's own path for the AWQ v1 checkpoint: ``EngineArgs(quantization="awq")`` and vLLM's
  default loader, whose dense parameters (embeddings, norms, lm_head) are vLLM's cut; each
  quantised module of the stage as vLLM's own AWQ path holds it after loading
  (``awq_reference.reference_awq_layer``, built with this rank's tensor-parallel group);
* by the plugin (``quantization="awq_v2", load_format="awq_v2"``) from each ``SERVED`` folder
  (one file, a rank set), writing its load report (``AWQ2_VLLM_LOAD_REPORT``); the files of
  the folder the process opens (``open`` audit events) are recorded apart for the engine
  configuration and for the build and load.

Every parameter of each plugin stage is compared with vLLM's, bit for bit (names, shapes,
dtypes, bytes); OUT/RANK.json gets each layout's stage, rows, load report and opened files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).parent))

import awq_reference
import torch

LINEAR = {"qkv": "self_attn.qkv_proj", "gate_up": "mlp.gate_up_proj",
          "o": "self_attn.o_proj", "down": "mlp.down_proj"}  # fmt: skip


def engine_config(model: Path, tp: int, pp: int, **kw):
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(model), dtype="float16", enforce_eager=True, max_model_len=256,
                      tensor_parallel_size=tp, pipeline_parallel_size=pp, **kw)  # fmt: skip
    return args.create_engine_config()


def build(cfg):
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model_loader

    with set_current_vllm_config(cfg):
        return get_model_loader(cfg.load_config).load_model(cfg, cfg.model_config)


def missing(model) -> list[str]:
    from vllm.model_executor.models.utils import PPMissingLayer

    return sorted(n for n, m in model.named_modules() if isinstance(m, PPMissingLayer))


def bits(t: torch.Tensor) -> torch.Tensor:
    return awq_reference._bits(t)


def same(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, str]:
    """Equal bit for bit (shape, dtype, bytes), and where not, why."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False, f"{tuple(a.shape)} {a.dtype} != {tuple(b.shape)} {b.dtype}"
    diff = (bits(a) != bits(b)).nonzero()
    return len(diff) == 0, "" if len(diff) == 0 else f"first at {tuple(diff[0].tolist())}"


class Opened:
    """Every file under ``folder`` this process opens while recording (``open`` audit events:
    ``open()`` and ``os.open``, which the reference reader uses)."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.paths: set[str] = set()
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if event == "open" and self.folder is not None and isinstance(args[0], (str, Path)):
            path = Path(os.fsdecode(args[0]))
            if path.parent == self.folder:
                self.paths.add(path.name)

    def record(self, folder: Path | None) -> list[str]:
        names, self.folder, self.paths = sorted(self.paths), folder, set()
        return names


def stage(v1: Path, served: list[Path], out: Path, tp: int, pp: int, rank: int, port: int,
          opened: Opened) -> dict:  # fmt: skip
    """Build this rank's stage vLLM's way and the plugin's way (from each served folder)."""
    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        destroy_distributed_environment,
        destroy_model_parallel,
        ensure_model_parallel_initialized,
        get_pp_group,
        get_tensor_model_parallel_rank,
        init_distributed_environment,
    )
    from vllm.distributed.utils import get_pp_indices

    stock_cfg = engine_config(v1, tp, pp, quantization="awq")
    with set_current_vllm_config(stock_cfg):
        init_distributed_environment(world_size=tp * pp, rank=rank, local_rank=rank,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}",
                                     backend="gloo")  # fmt: skip
        ensure_model_parallel_initialized(tp, pp)
    group = get_pp_group()
    pp_rank, tp_rank = group.rank_in_group, get_tensor_model_parallel_rank()
    layers = stock_cfg.model_config.hf_config.num_hidden_layers
    start, end = get_pp_indices(layers, pp_rank, pp)
    stock = build(stock_cfg)
    reference = {name: p.data for name, p in stock.named_parameters()}
    with set_current_vllm_config(stock_cfg):
        for i in range(start, end):
            for kind, name in LINEAR.items():
                module = awq_reference.reference_awq_layer(kind, v1, i)
                for param in ("qweight", "scales", "qzeros", "bias"):
                    if getattr(module, param, None) is not None:
                        reference[f"model.layers.{i}.{name}.{param}"] = getattr(module, param).data
    result = {"tp": tp, "pp": pp, "rank": rank, "tp_rank": tp_rank, "pp_rank": pp_rank,
              "first": group.is_first_rank, "last": group.is_last_rank,
              "layers": [start, end], "num_layers": layers, "stock_missing": missing(stock),
              "built": []}  # fmt: skip
    for folder in served:
        reports = out / f"reports-tp{tp}pp{pp}-{folder.name}-{rank}"
        reports.mkdir(parents=True)
        os.environ["AWQ2_VLLM_LOAD_REPORT"] = str(reports)
        opened.record(folder.resolve())
        cfg = engine_config(folder, tp, pp, quantization="awq_v2", load_format="awq_v2")
        at_config = opened.record(folder.resolve())
        model = build(cfg)
        at_load = opened.record(None)
        rows = []
        got = dict(model.named_parameters())
        for name in sorted(set(got) | set(reference)):
            if name not in got or name not in reference:
                rows.append([name, False, "only in " + ("vLLM" if name in reference else "plugin")])
                continue
            rows.append([name, *same(got[name].data, reference[name])])
        (report,) = [json.loads(p.read_text()) for p in reports.iterdir()]
        result["built"].append({"served": str(folder), "missing": missing(model), "rows": rows,
                                "report": report, "opened_at_config": at_config,
                                "opened_at_load": at_load})  # fmt: skip
    destroy_model_parallel()
    destroy_distributed_environment()
    return result


def main() -> None:
    """``pp_worker.py V1 OUT RANK PORT TPxPP:SERVED[,SERVED...] ...``: each layout in turn,
    in the processes whose rank it has (a new process group each, on the next port)."""
    import vllm.plugins

    v1, out, rank, port = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    vllm.plugins.load_general_plugins()
    opened = Opened()
    results = []
    for n, layout in enumerate(sys.argv[5:]):
        sizes, _, folders = layout.partition(":")
        tp, pp = (int(x) for x in sizes.split("x"))
        if rank < tp * pp:
            served = [Path(f) for f in folders.split(",")]
            results.append(stage(v1, served, out, tp, pp, rank, port + n, opened))
    (out / f"{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
