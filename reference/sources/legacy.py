"""Which reader a safetensors checkpoint needs: compressed-tensors or AWQ v1.

A checkpoint whose ``config.json`` (in the folder, or beside the one file given) says
``quantization_config.quant_method == "compressed-tensors"`` is read by
:class:`~reference.sources.compressed.CompressedReader` [CT-1]; every other one by
:class:`~reference.sources.v1.V1Reader` [V1-1], which reports what it cannot read.
"""

from __future__ import annotations

import os
from pathlib import Path

from reference.sources.compressed import CompressedReader, is_compressed_tensors
from reference.sources.v1 import V1Reader

Checkpoint = V1Reader | CompressedReader


def open_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The reader of a checkpoint folder or ``.safetensors`` file."""
    p = Path(path)
    return CompressedReader(p) if is_compressed_tensors(p) else V1Reader(p)
