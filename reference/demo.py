"""``python -m reference.demo``: write a small AWQ-v2 file and explain it with ``dump``.

The README's first command runs this after installing, so a new user sees a
file being written, validated, verified and dumped in one step.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import reference
from reference import dump


def demo_tensors() -> dict[str, np.ndarray]:
    """A few tensors shaped like the unquantised parts of a small decoder."""
    rng = np.random.default_rng(0)
    return {
        "model.embed_tokens.weight": rng.standard_normal((512, 256)).astype(np.float16),
        "model.layers.0.input_layernorm.weight": np.ones(256, dtype=np.float16),
        "model.layers.0.self_attn.q_proj.bias": np.zeros(256, dtype=np.float16),
        "model.norm.weight": np.ones(256, dtype=np.float16),
        "lm_head.weight": rng.standard_normal((512, 256)).astype(np.float16),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reference.demo", description=__doc__)
    parser.add_argument("--out", type=Path, help="folder for demo.awq2 (default: a temp folder)")
    args = parser.parse_args(argv)
    folder = args.out or Path(tempfile.mkdtemp(prefix="awq2-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo.awq2"
    reference.save(path, demo_tensors(), {"config": {"hidden_size": 256, "vocab_size": 512}})
    print(f"wrote {path}\n")
    return dump.main([str(path), "--verify"])


if __name__ == "__main__":
    raise SystemExit(main())
