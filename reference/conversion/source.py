"""What SRC is read through: a checkpoint of another format, or an AWQ-v2 file, model
folder or set given back to the converter (resharding), checked in full before a tensor of
it is read, so that a damaged or inconsistent model is refused, never re-encoded under fresh
checksums [SET-8, ENT-10]."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from reference.conversion.plan import Checkpoint
from reference.format.reader import Reader
from reference.ground.errors import FormatError, error
from reference.ground.files import open_regular
from reference.sets.fileset import FileSet, is_set_path
from reference.sets.model import is_model_folder, open_model
from reference.sets.tpsplit import RankJoin, SplitPlan, recorded_plan
from reference.sources.awq2 import Awq2Checkpoint, RankModel, WholeModel
from reference.sources.checkpoint import read_json
from reference.sources.legacy import open_checkpoint
from spec.constants import MAGIC, SET_MANIFEST

#: How much of an AWQ-v2 source :func:`open_source` checks before it is read: nothing more
#: than the opening checks, full validation (SET-8 with SET-15, RD-2), or full validation
#: and every payload checksum and, for a set, every member's SHA-256 (``verify()``).
SourceCheck = Literal["none", "validate", "verify"]

#: Files one of which a tokenizer that transformers' AutoTokenizer loads needs: a fast
#: tokenizer, a SentencePiece model, or a BPE or WordPiece vocabulary.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")


def open_source(path: str | os.PathLike[str], *, check: SourceCheck = "validate") -> Checkpoint:
    """What SRC is read through: an AWQ-v2 file, model folder or set as a checkpoint
    (:class:`~reference.sources.awq2.Awq2Checkpoint`: a rank set's shards joined by the cuts
    its members record, :class:`~reference.sets.tpsplit.RankJoin`), or a checkpoint
    (:func:`~reference.sources.legacy.open_checkpoint`).

    An AWQ-v2 source is ``check``ed first, before any tensor is read: a set whose manifest
    contradicts its members (SET-15: a member's record of its rank), or a payload that is
    not its checksum, is refused with its code, never re-encoded under fresh checksums
    [SET-8, ENT-10].  ``"verify"`` reads the source once more; a set's SHA-256, then known
    right, serves the provenance too (no second hashing)."""
    p = Path(path)
    if not is_awq2(p):
        return open_checkpoint(p)
    opened = open_model(p)
    try:
        _check_source(opened, check)
        if not isinstance(opened, FileSet):
            return Awq2Checkpoint(p, WholeModel(opened), kind="file", files=[opened.path])
        members = opened.manifest.members
        files = [opened.path / m.name for m in members]
        digests = [m.sha256 for m in members] if check == "verify" else None
        if opened.kind != "rank":
            return Awq2Checkpoint(p, WholeModel(opened), kind="split set", files=files,
                                  digests=digests)  # fmt: skip
        metadata = opened.metadata
        config = metadata.get("config")
        join = RankJoin(_recorded_plan(opened, metadata),
                        config if isinstance(config, dict) else None)  # fmt: skip
        return Awq2Checkpoint(p, RankModel(opened, join), kind="rank set", files=files,
                              digests=digests)  # fmt: skip
    except BaseException:
        opened.close()
        raise


def _check_source(opened: Reader | FileSet, check: SourceCheck) -> None:
    """Full validation (``"validate"``) or verification (``"verify"``) of an opened AWQ-v2
    source; an error in a single file names it, as a set's errors name their member."""
    if check == "none":
        return
    try:
        if check == "verify":
            opened.verify()
        else:
            opened.validate()
    except FormatError as exc:
        if exc.path is None and isinstance(opened, Reader):
            exc.path = str(opened.path)
            exc.message = f"{opened.path.name}: {exc.message}"
        raise


def _recorded_plan(opened: FileSet, metadata: dict[str, Any]) -> SplitPlan:
    """The split a rank set's members record, for the degree its manifest lists
    (``TP_BAD_CONFIG`` when they differ: the ranks of another conversion)."""
    plan = recorded_plan(metadata.get("tensor_parallel"))
    if plan.tp_size != opened.tp_size:
        raise error("TP_BAD_CONFIG", f"the members record a split over {plan.tp_size} ranks; "
                    f"{SET_MANIFEST} lists {opened.tp_size}", expected=opened.tp_size,
                    found=plan.tp_size, path=str(opened.manifest_path))  # fmt: skip
    return plan


def in_folder_order(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration an AWQ-v2 model folder's ``config.json`` shows, when it is the one
    its metadata holds but for ``quantization_config``: in that file's order, which the
    metadata (canonical JSON, sorted keys [WR-1]) does not keep, so that the folder written
    is the one a conversion of the checkpoint writes; else ``config`` itself."""
    try:
        shown = read_json(path)
    except FormatError:
        return config
    key = "quantization_config"
    same = {k: v for k, v in shown.items() if k != key} == {
        k: v for k, v in config.items() if k != key
    }
    return shown if same else config


def has_layers(path: Path) -> bool:
    """An AWQ-v2 file holding a quantised layer (one that cannot be opened: True, so that
    the conversion says why)."""
    try:
        with Reader(path) as reader:
            return bool(reader.layers())
    except (FormatError, OSError):
        return True


def is_awq2(path: Path) -> bool:
    """A set, a model folder holding ``model.awq2``, or a file that starts with the magic."""
    if is_set_path(path) or is_model_folder(path):
        return True
    if not path.is_file():
        return False
    with open_regular(path) as f:
        return bool(f.read(len(MAGIC)) == MAGIC)


def has_tokenizer(src: Path) -> bool:
    """Whether the source's folder (a file source's own folder) holds tokenizer files, which
    the converted folder then gets too [CONV-2]."""
    folder_of = src if src.is_dir() else src.parent
    return any((folder_of / name).is_file() for name in TOKENIZER_FILES) or any(
        folder_of.glob("*.tiktoken")
    )
