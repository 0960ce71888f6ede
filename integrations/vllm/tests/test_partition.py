"""The rule tables against the engine (issue 36, item 1): for every family of
``reference.sets.tpsplit`` and every architecture of the breadth matrix, the cut the table
gives each stored quantised layer on each rank at TP 2 (what ``awq2-convert --tp 2`` stores)
equals the partition vLLM's own module makes on that rank (what the plugin cuts from a file or
split set, :func:`awq2_vllm.method.partition`), so the two cannot drift apart.

Two processes (``partition/worker.py``, gloo) build each model with ``load_format="dummy"``.
The checkpoints: the breadth fixtures (``tests/fixtures/breadth``: Qwen2, Qwen3, Mistral,
Phi-3 with its fused layers, Gemma 2, Granite, OLMo 2, Mixtral and Qwen3-MoE experts) and the
example Llama of ``reference.examples``, once with a single key/value head, replicated on
both ranks [SET-12].
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference.examples import LlamaShape, write_checkpoint

HERE = Path(__file__).parent
CHECKOUT = Path(os.environ.get("AWQ2_CHECKOUT") or HERE.parents[2])
BREADTH = CHECKOUT / "tests" / "fixtures" / "breadth"
WORLD = 2


@pytest.fixture(scope="module")
def partitions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("partition")
    folders = sorted(p for p in BREADTH.iterdir() if (p / "config.json").is_file())
    folders.append(write_checkpoint(tmp / "llama", LlamaShape()))
    folders.append(write_checkpoint(tmp / "llama_kv1", LlamaShape(num_key_value_heads=1)))
    port = 29100 + os.getpid() % 700
    # VLLM_DIST_IDENT: the CPU build's shared-memory communicator names its group by it
    env = {
        **os.environ,
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_CPU_OMP_THREADS_BIND": "0|1",
        "VLLM_DIST_IDENT": f"awq2-partition-{os.getpid()}",
    }
    command = [sys.executable, str(HERE / "partition" / "worker.py")]
    procs = []
    for rank in range(WORLD):
        out = tmp / f"rank{rank}.json"
        args = [*command, str(rank), str(WORLD), str(port), str(out), *map(str, folders)]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))  # fmt: skip
    logs = [p.communicate(timeout=900)[0] for p in procs]
    for p, log in zip(procs, logs, strict=True):
        assert p.returncode == 0, log[-6000:]
    ranks = [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(WORLD)]
    return {"folders": [f.name for f in folders], "ranks": ranks}


def test_every_checkpoint_was_built_at_tp_2(partitions):
    errors = {name: got["error"] for ranks in partitions["ranks"] for name, got in ranks.items()
              if "error" in got}  # fmt: skip
    assert errors == {}
    assert all(set(r) == set(partitions["folders"]) for r in partitions["ranks"])


def test_the_tables_cut_every_layer_as_vllms_modules_partition_it(partitions):
    checked, differ = 0, []
    for rank, got in enumerate(partitions["ranks"]):
        for name in partitions["folders"]:
            rows = got.get(name, {}).get("rows", [])
            assert rows, f"{name}: no stored quantised layer found on rank {rank}"
            for module, parts, engine, table in rows:
                checked += 1
                if engine != table:
                    differ.append((name, rank, module, parts, engine, table))
    print(f"\n{checked} layer partitions compared over {WORLD} ranks and "
          f"{len(partitions['folders'])} checkpoints; {len(differ)} differ")  # fmt: skip
    for d in differ[:20]:
        print("  ", d)
    assert differ == []
