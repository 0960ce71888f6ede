"""A servable model folder: ``model.awq2``, a ``config.json`` that names the loader, and every
other file of the source checkpoint, published all at once [CONV-1, CONV-2].

What goes into ``DST/`` [CONV-1]:

* ``model.awq2``, the converted weights;
* ``config.json``: the source's ``config.json`` with ``quantization_config`` replaced by
  :func:`servable_quantization_config` (the other keys unchanged, in their order);
* a byte-identical copy of every other regular file at the top of the source folder
  (tokenizer files, ``generation_config.json``, chat template, licence, README,
  ``recipe.yaml`` ...), except the weights and what only described them: ``*.safetensors``,
  ``*.safetensors.index.json``, AutoAWQ's ``quant_config.json`` and ``*.awq2``.

Not copied, each named in the summary with the reason [CONV-2]: sub-folders, symbolic links
that lead out of the source folder (a link to a file inside it is copied as that file), and
anything that is not a regular file (FIFOs, sockets, devices).  Copies are streamed, 1 MiB
at a time.

Publication [CONV-2]: everything is written into a temporary sibling folder (a partial
folder, named and locked as :mod:`reference.write.partial` describes, so that a later run can
tell one left by a killed conversion and remove it), flushed to storage, then renamed to DST
in one step by the one publishing transaction of every writing tool
(:mod:`reference.write.publish`); a failure removes the temporary folder, so a reader sees no
DST or a complete one.  DST must not exist or be an empty folder; a non-empty one is refused
unless the user asks for it to be replaced (``--overwrite``): then the two are exchanged only
once the new folder is complete and verified, and the old one is deleted.  The source is
only read, and a DST that holds the source is never replaced.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference.ground.files import open_regular
from reference.write.publish import Transaction, Watched

#: The weights file inside the folder.
MODEL_FILE = "model.awq2"
CONFIG_FILE = "config.json"
#: Source files that are not copied: the weights and what only described them.
NOT_COPIED = ("*.safetensors", "*.safetensors.index.json", "quant_config.json", "*.awq2")
#: ``quantization_config.source_format`` by checkpoint family.
SOURCE_FORMATS = {"V1": "awq", "CT": "compressed-tensors"}
_COPY_CHUNK = 1 << 20


@dataclass
class FolderPlan:
    """Which files of the source folder are copied, and which are left out and why."""

    copies: list[Path] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, reason)


def is_folder_destination(dst: str) -> bool:
    """DST names a model folder unless it names an ``.awq2`` file: a DST that ends with a path
    separator, or whose name does not end in ``.awq2`` (in any case), is a folder [CONV-1]."""
    ends = dst.endswith(os.sep) or (os.altsep is not None and dst.endswith(os.altsep))
    return ends or not dst.lower().endswith(".awq2")


def check_folder_paths(src: Path, dst: Path, *, overwrite: bool = False) -> str | None:
    """What makes ``src -> dst/`` impossible, before anything is read: a message, or None.
    An existing non-empty DST is refused unless ``overwrite`` [CONV-2]."""
    if not src.is_dir():
        return ("a model folder DST needs a checkpoint folder as SRC (its other files are "
                "copied); to write a single file, end DST with .awq2")  # fmt: skip
    if not (src / CONFIG_FILE).is_file():
        return f"a model folder DST needs {CONFIG_FILE} in SRC (an engine reads it)"
    if dst.exists() and not dst.is_dir():
        return (f"DST {dst} is an existing file; a DST that does not end in .awq2 names a "
                "model folder")  # fmt: skip
    inside = src.resolve()
    target = dst.resolve()
    if target == inside or inside in target.parents:
        return f"DST {dst} is inside SRC; the source is never written to"
    if target in inside.parents:
        return f"SRC {src} is inside DST {dst}; replacing DST would delete the source"
    if dst.is_dir() and os.stat(dst).st_dev != os.stat(target.parent).st_dev:
        return (f"DST {dst} is a mount point (a file system of its own): a model folder is "
                "published by renaming a sibling folder onto DST, which cannot cross file "
                f"systems; name a folder inside it, such as {dst / 'model'}")  # fmt: skip
    if dst.is_dir() and any(dst.iterdir()) and not overwrite:
        return (f"DST {dst} is a folder that is not empty; pass --overwrite to replace it "
                "(only once the new folder is complete and verified)")  # fmt: skip
    return None


def plan_folder(src: Path) -> FolderPlan:
    """The files to copy, in name order, and the entries left out with the reason [CONV-2]."""
    plan, root = FolderPlan(), src.resolve()
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        name = entry.name
        if name == CONFIG_FILE or any(fnmatch.fnmatchcase(name, p) for p in NOT_COPIED):
            continue
        reason = _not_copied_because(Path(entry.path), root)
        if reason is None:
            plan.copies.append(Path(entry.path))
        else:
            plan.skipped.append((name, reason))
    return plan


def _not_copied_because(path: Path, root: Path) -> str | None:
    if path.is_symlink():
        if root not in path.resolve().parents:
            return "a symbolic link that leads out of the source folder"
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "a folder (only the files at the top of the source are copied)"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    return None


def servable_quantization_config(
    layers: dict[str, tuple[int, int]], source_family: str
) -> dict[str, Any]:
    """``quantization_config`` of the folder's ``config.json`` [CONV-1], from each layer's
    ``(bits, group_size)``: ``bits`` and ``group_size`` are numbers when every layer has the
    same; when layers differ, each is the sorted list of the values found and
    ``layer_group_sizes`` / ``layer_bits`` map every layer prefix to its own."""
    bits = sorted({b for b, _ in layers.values()})
    groups = sorted({g for _, g in layers.values()})
    config: dict[str, Any] = {
        "quant_method": "awq_v2",
        "bits": bits[0] if len(bits) == 1 else bits,
        "group_size": groups[0] if len(groups) == 1 else groups,
        "source_format": SOURCE_FORMATS.get(source_family, source_family),
    }
    if len(bits) > 1:
        config["layer_bits"] = {p: b for p, (b, _) in layers.items()}
    if len(groups) > 1:
        config["layer_group_sizes"] = {p: g for p, (_, g) in layers.items()}
    return config


def servable_config(config: dict[str, Any], quantization: dict[str, Any]) -> dict[str, Any]:
    """The source's ``config.json`` with ``quantization_config`` replaced (kept in its place;
    added at the end when the source had none)."""
    out = dict(config)
    out["quantization_config"] = quantization
    return out


def copy_file(src: Path, dst: Path) -> None:
    """Stream a regular file's bytes to a new file, then flush it to storage."""
    with open_regular(src) as fin, open(dst, "xb") as fout:
        shutil.copyfileobj(fin, fout, _COPY_CHUNK)
        fout.flush()
        os.fsync(fout.fileno())


def write_text(path: Path, text: str) -> None:
    """A new UTF-8 text file, flushed to storage."""
    with open(path, "x", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def publishing(
    dst: Path, *, replace: bool = False, watched: Watched | None = None
) -> Iterator[Path]:
    """A temporary sibling folder to fill; published as ``dst`` when the block ends normally,
    removed when it raises [CONV-2]: one :class:`reference.write.publish.Transaction`.
    ``dst`` may be missing or an empty folder; with ``replace`` it may also be a folder that
    holds something, which the new one replaces in one exchange once it is complete.
    ``watched``: the identities the run started from (by default ``dst`` as it is now); a
    destination changed since is refused, never overwritten."""
    with Transaction(dst, folder=True, replace=replace, watched=watched) as publish:
        yield publish.tmp


__all__ = [
    "CONFIG_FILE",
    "MODEL_FILE",
    "NOT_COPIED",
    "FolderPlan",
    "check_folder_paths",
    "copy_file",
    "is_folder_destination",
    "plan_folder",
    "publishing",
    "servable_config",
    "servable_quantization_config",
    "write_text",
]
