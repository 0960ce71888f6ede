"""The tiny checkpoints the tests use: an AWQ v1 Llama from ``reference.examples`` (with q/k/v
biases, so the bias path is covered) and its servable AWQ-v2 folder made by
``python -m reference.convert SRC DST/`` [CONV-1]."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reference.examples import LlamaShape, write_checkpoint

SHAPE = LlamaShape(attention_bias=True)


def make(tmp: Path) -> tuple[Path, Path]:
    """(v1 folder, converted folder)."""
    v1 = write_checkpoint(tmp / "v1", SHAPE)
    served = tmp / "served"
    subprocess.run([sys.executable, "-m", "reference.convert", str(v1), f"{served}/", "--quiet"],
                   check=True)  # fmt: skip
    return v1, served
