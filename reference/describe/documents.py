"""The ``--json`` documents of what ``reference.open`` opens, with stable keys: an AWQ-v2 file
(:func:`summary` and its :func:`tensor_rows`), a file set (:func:`set_summary`,
:func:`set_rows`), a legacy checkpoint (:func:`checkpoint_summary`); the header fields of an
invalid file as stored (:func:`raw_header`); and what an input is (:func:`is_checkpoint`,
:func:`not_weights`: a model's ``config.json`` given in place of its weights)."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reference.format.reader import Reader
from reference.ground.errors import FormatError, error
from reference.ground.files import open_regular
from reference.sets.fileset import FileSet
from reference.sources.legacy import Checkpoint
from reference.sources.v1 import is_safetensors
from spec.constants import MAGIC, MAX_METADATA_LENGTH
from spec.schema import HEADER_SIZE, HeaderFields


def family(layout: str) -> str:
    """The stored layout family of a quantised layer, from its ``.qweight`` layout."""
    return "Marlin" if layout.startswith("MARLIN_") else "AWQ"


def summary(reader: Reader, *, verified: bool) -> dict[str, Any]:
    """The ``--json`` document of a valid file (stable keys), but for its last key,
    ``"tensors"``, which :func:`write_json` streams from :func:`tensor_rows`."""
    h = reader.header
    return {
        "valid": True,
        "verified": verified,
        "path": str(reader.path),
        "format_version": f"{h['version_major']}.{h['version_minor']}",
        "file_size": reader.file_size,
        "slab_offset": h["slab_offset"],
        "alignment": h["alignment"],
        "index_offset": h["index_offset"],
        "index_length": h["index_length"],
        "required_flags": h["required_flags"],
        "optional_flags": h["optional_flags"],
        "tensor_count": h["tensor_count"],
        "metadata": reader.metadata,
    }


def tensor_rows(reader: Reader) -> Iterator[dict[str, Any]]:
    """The ``"tensors"`` of the ``--json`` document, in slab order, one at a time."""
    return (info.to_dict() for info in reader.iter_entries())


def raw_header(path: str) -> dict[str, Any] | None:
    """Header fields parsed without any check, to help explain an invalid file."""
    with open_regular(path) as f:
        data = f.read(HEADER_SIZE)
    if len(data) < HeaderFields.sizeof():
        return None
    try:
        parsed = HeaderFields.parse(data[: HeaderFields.sizeof()])
    except Exception:  # magic mismatch: construct's Const raises; show nothing
        return None
    return {k: (v.hex() if isinstance(v, bytes) else v) for k, v in parsed.items() if k != "_io"}


def checkpoint_summary(src: Checkpoint, *, verified: bool) -> dict[str, Any]:
    """The ``--json`` document of a legacy checkpoint (stable keys), ``"tensors"`` last."""
    return {
        "valid": True,
        "verified": verified,
        "path": str(src.path),
        "source_format": src.source_format,
        "files": [{"name": f.name, "size": f.stat().st_size} for f in src.files],
        "tensor_count": len(src),
        "layers": src.layers(),
        "metadata": src.metadata,
    }


def is_checkpoint(path: str) -> bool:
    """What ``reference.open`` reads as a legacy checkpoint: a folder, or a file that starts
    like safetensors rather than with the AWQ-v2 magic."""
    if os.path.isdir(path):
        return True
    with open_regular(path) as f:
        head = f.read(len(MAGIC))
    return head != MAGIC and is_safetensors(Path(path))


def set_summary(fs: FileSet, *, verified: bool) -> dict[str, Any]:
    """The ``--json`` document of a valid file set (stable keys), ``"tensors"`` last: the set,
    then each member as the manifest lists it with what it holds."""
    files = []
    for m, reader in zip(fs.manifest.members, fs.members, strict=True):
        item: dict[str, Any] = {"name": m.name, "size": m.size}
        if fs.kind == "rank":
            item["rank"] = m.rank
        item.update(header_crc=f"{m.header_crc:08x}", sha256=m.sha256,
                    format_version="{}.{}".format(*reader.version), tensor_count=len(reader),
                    layers=len(reader.layers()))  # fmt: skip
        files.append(item)
    return {
        "valid": True,
        "verified": verified,
        "path": str(fs.manifest_path),
        "kind": fs.kind,
        "tp_size": fs.tp_size,
        "files": files,
        "total_size": sum(f["size"] for f in files),
        "tensor_count": len(fs),
        "layers": len(fs.layers()),
        "metadata": fs.metadata,
    }


def set_rows(fs: FileSet) -> Iterator[dict[str, Any]]:
    """The ``"tensors"`` of a set's ``--json`` document: every member's (of a rank set, every
    rank's), member by member, each row with its ``file`` (and ``rank``) first."""
    for rank in range(fs.tp_size):
        for reader in fs.rank_members(rank):
            for info in reader.iter_entries():
                head: dict[str, Any] = {"file": reader.path.name}
                if fs.kind == "rank":
                    head["rank"] = rank
                yield {**head, **info.to_dict()}


#: Keys that every ``config.json`` of transformers holds one of (``model_type`` is written by
#: ``PretrainedConfig.to_dict``, ``architectures`` by ``save_pretrained``); a set manifest has
#: neither [SET-2].
CONFIG_KEYS = ("model_type", "architectures")


def not_weights(path: str, exc: FormatError) -> FormatError:
    """``CONFIG_NOT_WEIGHTS`` naming the folder to give instead, when the JSON file that the
    set reader refused as a manifest (``SET_UNSUPPORTED``: no ``awq2_set``) is a model's
    configuration; else ``exc`` itself.  Only what the set reader already refused is looked
    at, so a manifest is never taken for a configuration."""
    if exc.code != "SET_UNSUPPORTED" or not os.path.isfile(path):
        return exc
    try:
        with open_regular(path) as f:
            raw = f.read(MAX_METADATA_LENGTH + 1)
        document = json.loads(raw) if len(raw) <= MAX_METADATA_LENGTH else None
    except (OSError, ValueError):
        return exc
    if not isinstance(document, dict) or "awq2_set" in document:
        return exc
    found = [f"{key} {document[key]!r}" for key in CONFIG_KEYS if key in document]
    if not found:
        return exc
    folder = os.path.dirname(path) or "."
    return error("CONFIG_NOT_WEIGHTS", f"{os.path.basename(path)} is a model's configuration, "
                 f"not its weights: give the model's folder, awq2-dump {shlex.quote(folder)}",
                 expected="weights: an .awq2 file, a model folder, a file set or a checkpoint",
                 found=f"a model configuration ({', '.join(found)})", path=path)  # fmt: skip
