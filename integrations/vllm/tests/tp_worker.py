"""One tensor-parallel rank: ``python tp_worker.py RANK WORLD PORT V1 SERVED OUT``.  Builds the
four linear kinds with vLLM's AWQ path and with the plugin at this rank, compares them and
writes the rows of the equivalence table as JSON to OUT."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).parent))

import vllm_cpu


def main() -> None:
    rank, world, port = (int(a) for a in sys.argv[1:4])
    v1, served, out = Path(sys.argv[4]), Path(sys.argv[5]), Path(sys.argv[6])
    rows = []
    with vllm_cpu.vllm_context():
        vllm_cpu.init_distributed(rank, world, port)
        for kind in vllm_cpu.LINEAR_KINDS:
            ref = vllm_cpu.reference_awq_layer(kind, v1)
            got = vllm_cpu.plugin_layer(kind, served)
            for name, equal, where in vllm_cpu.compare(got, ref):
                rows.append([kind, world, rank, name, equal, where])
    out.write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
