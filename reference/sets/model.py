"""An AWQ-v2 model as a path names it: a file set, a model folder's ``model.awq2``, or one
file [SET-1, CONV-1].  ``reference.open`` and the converter's source open it the same way."""

from __future__ import annotations

import os
from pathlib import Path

from reference.format.reader import Reader
from reference.sets.fileset import FileSet, dangling_link, is_set_path
from reference.sets.folder import MODEL_FILE


def is_model_folder(path: Path) -> bool:
    """A folder holding ``model.awq2`` (what ``convert SRC DST/`` writes [CONV-1]), even as a
    link to nothing: that is refused as unreadable when opened, never taken for a
    checkpoint."""
    return path.is_dir() and os.path.lexists(path / MODEL_FILE)


def open_model(
    path: Path, *, validate: bool = False, copy: bool = False, rank: int | None = None
) -> Reader | FileSet:
    """A set (``rank``'s members with ``rank``) [SET-1], a model folder's ``model.awq2`` (a
    link to nothing raises ``FileNotFoundError`` naming it and its target), or a file."""
    if is_set_path(path):
        return FileSet(path, validate=validate, copy=copy, rank=rank)
    if path.is_dir():
        path = path / MODEL_FILE
        broken = dangling_link(path)
        if broken is not None:
            raise broken
    return Reader(path, validate=validate, copy=copy)
