"""One tensor-parallel rank: ``python tp_worker.py RANK WORLD PORT V1 SERVED OUT``.  Builds the
four linear kinds with vLLM's AWQ path and with the plugin at this rank, compares them and
writes the rows of the equivalence table as JSON to OUT, and what the plugin's worker opened
and read for each layer to OUT with the suffix ``.report.json``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, str(Path(__file__).parent))

import awq_reference


def main() -> None:
    rank, world, port = (int(a) for a in sys.argv[1:4])
    v1, served, out = Path(sys.argv[4]), Path(sys.argv[5]), Path(sys.argv[6])
    rows, reports = [], []
    with awq_reference.vllm_context():
        awq_reference.init_distributed(rank, world, port)
        for kind in awq_reference.LINEAR_KINDS:
            ref = awq_reference.reference_awq_layer(kind, v1)
            got = awq_reference.plugin_layer(kind, served)
            reports.append(got.awq2_report)
            for name, equal, where in awq_reference.compare(got, ref):
                rows.append([kind, world, rank, name, equal, where])
    out.write_text(json.dumps(rows))
    out.with_suffix(".report.json").write_text(json.dumps(reports))


if __name__ == "__main__":
    main()
