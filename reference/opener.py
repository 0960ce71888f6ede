"""``reference.open``: one entry point for everything this package reads.

An AWQ-v2 file (:class:`~reference.format.reader.Reader`), a file set
(:class:`~reference.sets.fileset.FileSet`), a model folder holding ``model.awq2``, or an AWQ v1 or
compressed-tensors checkpoint (:mod:`reference.sources.legacy`), each through the same API.
"""

from __future__ import annotations

import os
from pathlib import Path

from reference.format.reader import Reader
from reference.ground.files import open_regular
from reference.sets.fileset import FileSet, is_set_path
from reference.sets.model import is_model_folder, open_model
from reference.sources.checkpoint import is_safetensors
from reference.sources.legacy import Checkpoint, open_checkpoint
from spec.constants import MAGIC


def open(  # noqa: A001
    path: str | os.PathLike[str],
    *,
    validate: bool = False,
    copy: bool = False,
    rank: int | None = None,
) -> Reader | FileSet | Checkpoint:
    """Open an AWQ-v2 file, a file set, or an AWQ v1 or compressed-tensors checkpoint (file or
    folder) through the same API.

    A folder is a file set when it holds ``model.awq2.set.json`` (a path ending in ``.json``
    is taken for that manifest) [SET-1]; else a model folder when it holds ``model.awq2``
    (what ``reference.convert SRC DST/`` writes) [CONV-1]; else a checkpoint.  Either name
    decides even when it is a link to nothing (a half-downloaded Hub cache): that raises
    ``FileNotFoundError`` naming the link and its missing target (``OSError`` for a loop of
    links), an input that cannot be read, never a checkpoint of another format.

    ``validate=True`` runs full validation before returning.  ``copy=True`` reads an AWQ-v2
    file into private memory instead of mapping it (see :class:`Reader`: a mapped file
    truncated meanwhile kills the process with SIGBUS); checkpoints ignore it.  A file is
    AWQ-v2 when it starts with the magic; a folder, or a file that starts like safetensors, is
    a checkpoint: compressed-tensors when its ``config.json`` says so [CT-1], else AWQ v1
    [V1-1].

    ``rank=r`` opens rank ``r``'s members of a rank set (``convert --tp T``): what the worker
    of rank ``r`` reads, each tensor that rank's shard.  Opened without it, a rank set gives
    its names, layers, metadata, ``validate()`` and ``verify()`` over every member, but a
    tensor, an entry or a layer only with ``rank=`` on the call: ``TP_RANK_REQUIRED``
    otherwise [SET-13].  Anything else holds the whole model, one rank's worth: ``rank`` 0
    (or none) is all it has.
    """
    p = Path(path)
    if is_set_path(p):
        opened = open_model(p, validate=validate, copy=copy, rank=rank)
        if not (isinstance(opened, FileSet) and opened.kind == "rank"):
            _whole_model(opened, rank, path)
        return opened
    _whole_model(None, rank, path)
    if p.is_dir():
        if is_model_folder(p):  # even a link to nothing: refused as unreadable
            return open_model(p, validate=validate, copy=copy)
        return open_checkpoint(p)
    with open_regular(p) as f:
        head = f.read(len(MAGIC))
    if head != MAGIC and is_safetensors(p):
        return open_checkpoint(p)
    return open_model(p, validate=validate, copy=copy)


def _whole_model(
    opened: Reader | FileSet | None, rank: int | None, path: str | os.PathLike[str]
) -> None:
    """``rank`` 0 or none: what a single file, a split set or a checkpoint allows."""
    if rank in (None, 0):
        return
    if opened is not None:
        opened.close()
    raise ValueError(f"rank={rank}: {os.fspath(path)!r} is not a rank set; it holds the whole "
                     "model (rank 0 only). Cut a layer's shard with linear(prefix, tp_rank=R, "
                     "tp_size=T, parallel=...)")  # fmt: skip


__all__ = ["open"]
