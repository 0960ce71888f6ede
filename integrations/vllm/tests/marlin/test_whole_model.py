"""The whole tiny Llama (vLLM's ``LlamaForCausalLM``, built on the CPU) loaded by the plugin
through ``--quantization awq_v2 --load-format awq_v2``: every quantised module equals vLLM's
own AWQ path, every unquantised parameter the v1 tensor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from reference.examples import LlamaShape, write_checkpoint


def test_whole_llama_loads_bit_exact(tmp_path):
    v1 = write_checkpoint(tmp_path / "v1", LlamaShape())  # no biases: Llama's o_proj has none
    served = tmp_path / "served"
    subprocess.run([sys.executable, "-m", "reference.convert", str(v1), f"{served}/", "--quiet"],
                   check=True)  # fmt: skip
    out = tmp_path / "rows.json"
    worker = Path(__file__).parent / "whole_model_worker.py"
    subprocess.run([sys.executable, str(worker), str(v1), str(served), str(out)], check=True,
                   timeout=600)  # fmt: skip
    rows = json.loads(out.read_text())
    print("\nwhole model (layer, kind, parameter, equal):")
    for row in rows:
        print(" ", *row[:4])
    quantised = [r for r in rows if r[1] != "dense"]
    assert len(quantised) == 2 * 4 * 3  # 2 layers x 4 modules x qweight, scales, qzeros
    assert {r[2] for r in rows if r[1] == "dense"} >= {
        "model.embed_tokens.weight",
        "lm_head.weight",
    }
    assert all(r[3] for r in rows), [r for r in rows if not r[3]]
