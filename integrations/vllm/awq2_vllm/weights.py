"""Where a served model's weights are, and what one engine worker opens of them.

A model folder that ``convert`` writes holds its weights in one of three forms, all served:

* ``model.awq2``: one file (``convert SRC DST/``) [CONV-1];
* ``model.awq2.set.json`` of ``kind: "split"``: members split by size
  (``convert SRC DST/ --max-shard-size``) [SET-1];
* ``model.awq2.set.json`` of ``kind: "rank"``: one group of members per tensor-parallel rank,
  each holding that rank's shard already cut (``convert SRC DST/ --tp T``) [SET-7].

A folder with none of these, whose ``config.json`` says ``quant_method`` ``"awq"`` (AutoAWQ
GEMM) or ``"compressed-tensors"`` and which holds ``model.safetensors`` (or its shard index),
is the fourth form, ``"checkpoint"``: the checkpoint itself, read through the reference
reader (:func:`reference.sources.legacy.open_checkpoint`), each layer repacked to the Marlin
layout as it is read.  That is the seed's fallback for AWQ v1 checkpoints, served only when
asked for (``--quantization awq_v2 --load-format awq_v2``).

:func:`find_weights` says which (refusing a folder with neither, ``NO_WEIGHTS``), and
:func:`open_weights` opens what the worker of tensor-parallel rank ``r`` of ``T`` reads: the
file, every member of a split set, or only rank ``r``'s members of a rank set (whose
``tp_size`` must be ``T``: ``TP_MISMATCH``, naming both numbers).  Opening reads each opened
member's header and trailer; no payload is read until a tensor is asked for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from awq2_vllm.errors import PluginError
from reference.format.reader import Reader
from reference.sets.fileset import FileSet, dangling_link
from reference.sets.setmanifest import read_manifest
from reference.sources.legacy import open_checkpoint
from spec.constants import SET_MANIFEST

WEIGHT_FILE = "model.awq2"
#: The checkpoints the fallback serves, by ``quant_method``: what each is called in messages.
CHECKPOINTS = {"awq": "an AWQ v1 checkpoint (AutoAWQ GEMM)",
               "compressed-tensors": "a compressed-tensors checkpoint"}  # fmt: skip
CHECKPOINT_FILES = ("model.safetensors", "model.safetensors.index.json")


@dataclass(frozen=True)
class Weights:
    """What a model folder holds: ``kind`` is ``"file"``, ``"split"``, ``"rank"`` or
    ``"checkpoint"``; ``tp_size`` is a rank set's degree (1 otherwise); ``quant_method`` a
    checkpoint's (``"awq"`` or ``"compressed-tensors"``)."""

    path: Path
    kind: str
    tp_size: int = 1
    quant_method: str = ""

    @property
    def stores_marlin(self) -> bool:
        """Whether the layers are stored in the Marlin layout (an AWQ-v2 file or set), so that
        their bytes go straight into vLLM's parameters; a checkpoint's are repacked."""
        return self.kind != "checkpoint"


def find_weights(model: str | os.PathLike[str]) -> Weights:
    """The weights of ``model`` (a folder, a ``.awq2`` file or a set manifest)."""
    p = Path(model)
    if p.is_file():
        if p.name.endswith(".json"):
            return _set(p)
        return Weights(p, "file")
    for name in (SET_MANIFEST, WEIGHT_FILE):  # a link to nothing is named, never skipped
        broken = dangling_link(p / name)
        if broken is not None:
            raise PluginError("WEIGHTS_UNREADABLE", str(p / name), f"{name}, readable",
                              broken.strerror)  # fmt: skip
    if (p / SET_MANIFEST).is_file():
        return _set(p / SET_MANIFEST)
    if (p / WEIGHT_FILE).is_file():
        return Weights(p / WEIGHT_FILE, "file")
    method = checkpoint_method(p)
    if method is not None:
        return Weights(p, "checkpoint", quant_method=method)
    raise PluginError("NO_WEIGHTS", str(p), f"{WEIGHT_FILE} or {SET_MANIFEST} in the folder, "
                      "or an AWQ v1 or compressed-tensors checkpoint",
                      "none of them")  # fmt: skip


def checkpoint_method(folder: Path) -> str | None:
    """``quant_method`` of a checkpoint folder the fallback serves (``"awq"`` or
    ``"compressed-tensors"``, with its safetensors weights), else None."""
    if not any((folder / f).is_file() for f in CHECKPOINT_FILES):
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        method = str(config["quantization_config"]["quant_method"]).lower()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return method if method in CHECKPOINTS else None


def _set(manifest: Path) -> Weights:
    m = read_manifest(manifest)  # a bad manifest: the reader's own FormatError [SET-2..SET-4]
    return Weights(manifest, m.kind, m.tp_size or 1)


def check_tp(weights: Weights, tp_size: int) -> None:
    """A rank set is served only at the degree it was cut for."""
    if weights.kind == "rank" and weights.tp_size != tp_size:
        raise PluginError("TP_MISMATCH", str(weights.path.parent),
                          f"a rank set cut for vLLM's tensor_parallel_size {tp_size}",
                          f"a rank set cut for tp_size {weights.tp_size} (awq2-convert SRC DST "
                          f"--tp {tp_size}, or serve it with -tp {weights.tp_size})")  # fmt: skip


def open_weights(weights: Weights, tp_rank: int, tp_size: int, *, validate: bool = True) -> Any:
    """A reader for the worker of rank ``tp_rank`` of ``tp_size``: a
    :class:`~reference.format.reader.Reader` or a :class:`~reference.sets.fileset.FileSet`
    (of a rank set: this rank's members only), with the full validation of what it opened
    unless ``validate=False`` (the opening checks alone)."""
    check_tp(weights, tp_size)
    if weights.kind == "file":
        return Reader(weights.path, validate=validate)
    if weights.kind == "checkpoint":  # its headers checked as it opens [V1-3, CT-4]
        return open_checkpoint(weights.path)
    rank = tp_rank if weights.kind == "rank" else None
    return FileSet(weights.path, validate=validate, rank=rank)


def rank_zero(weights: Weights) -> dict[str, int]:
    """The keyword that asks a set for rank 0's tensors (what every rank of a rank set holds,
    cut [SET-7]; all a split set holds); a file or a checkpoint takes none."""
    return {"rank": 0} if weights.kind in ("split", "rank") else {}


def opened_files(reader: Any) -> Sequence[Path]:
    """The files ``reader`` opened: itself, for one file; a set's members, each opened when it
    is taken, named without opening it (so a closed set answers too); a checkpoint's
    safetensors files."""
    if isinstance(reader, FileSet):
        return reader.member_paths
    if isinstance(reader, Reader):
        return [reader.path]
    return list(reader.files)
