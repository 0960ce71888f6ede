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
in one step; a failure removes the temporary folder, so a reader sees no DST or a complete
one.  DST must not exist or be an empty folder; a non-empty one is refused unless the user
asks for it to be replaced (``--overwrite``): then it is moved aside only once the new folder
is complete and verified, and deleted after the new one has taken its name.  The source is
only read, and a DST that holds the source is never replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fnmatch
import os
import platform
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference.ground.files import open_regular
from reference.write import partial

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
def publishing(dst: Path, *, replace: bool = False) -> Iterator[Path]:
    """A temporary sibling folder to fill; renamed to ``dst`` when the block ends normally,
    removed when it raises [CONV-2].  ``dst`` may be missing or an empty folder; with
    ``replace`` it may also be a folder that holds something, which is moved aside once the
    new folder is complete, then deleted (restored if the new one cannot take its place)."""
    parent = dst.parent if str(dst.parent) else Path(".")
    tmp, lock = partial.create_folder(dst)  # named and locked as a partial file is [WR-3]
    try:
        yield tmp
        mask = os.umask(0o022)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes it 0700; DST gets what mkdir would give
        _fsync_dir(tmp)
        if replace and dst.is_dir() and any(dst.iterdir()):
            _swap_in(tmp, dst, parent)
        else:
            _rename_onto(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(lock)
    _fsync_dir(parent)


def _rename_onto(tmp: Path, dst: Path) -> None:
    """One rename onto a missing or empty folder; a DST that gained files meanwhile (another
    conversion got there first) is said with the user's path, never the partial's name."""
    try:
        os.rename(tmp, dst)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            message = f"{dst} was filled while this conversion ran (another process?); it was "
            raise FileExistsError(exc.errno, message + "left as it is") from exc
        if exc.errno == errno.ENOTDIR:
            message = f"{dst} became a file while this conversion ran; it was left as it is"
            raise NotADirectoryError(exc.errno, message) from exc
        raise OSError(exc.errno, f"cannot publish {dst}: {exc.strerror}") from exc


def stale_partial_folders(dst: Path) -> list[Path]:
    """Partial folders of ``dst`` left by conversions that were killed (their process is
    gone and holds no lock): :func:`reference.write.partial.stale_partials`."""
    return partial.stale_partials(dst, folders=True)


def _swap_in(new: Path, dst: Path, parent: Path) -> None:
    """Replace the non-empty folder ``dst`` by ``new``: ``dst`` is renamed aside (onto an empty
    folder of its own, which rename(2) allows), ``new`` takes its name, then the old one is
    deleted.  If ``new`` cannot take the name, the old folder is put back."""
    aside = Path(tempfile.mkdtemp(prefix=".awq2-replaced-", dir=parent))
    try:
        os.rename(dst, aside)
    except BaseException:
        aside.rmdir()
        raise
    try:
        os.rename(new, dst)
    except BaseException:
        os.rename(aside, dst)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def swap_in(new: Path, dst: Path) -> None:
    """Replace the folder ``dst`` by ``new`` in two renames, as ``--overwrite`` does: ``dst``
    aside, ``new`` in its place, the old one deleted (put back if ``new`` cannot take the
    name).  Between the two renames no folder has the name ``dst``."""
    _swap_in(new, dst, dst.parent if str(dst.parent) else Path("."))


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_SYS_RENAMEAT2 = {"x86_64": 316, "amd64": 316, "aarch64": 276, "arm64": 276}


def exchange_folders(a: Path, b: Path) -> None:
    """Exchange the two paths in one step, ``renameat2(RENAME_EXCHANGE)``: a reader sees the
    one or the other at each name, never none.  ``OSError`` with ``ENOSYS`` where the call is
    missing (not Linux, an old C library and no known syscall number), ``EINVAL`` (or
    ``EOPNOTSUPP``) from a file system that cannot exchange."""
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "renameat2(RENAME_EXCHANGE) is Linux's")
    libc = ctypes.CDLL(None, use_errno=True)
    args = (ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(os.fsencode(a)),
            ctypes.c_int(_AT_FDCWD), ctypes.c_char_p(os.fsencode(b)),
            ctypes.c_uint(_RENAME_EXCHANGE))  # fmt: skip
    if hasattr(libc, "renameat2"):
        result = libc.renameat2(*args)
    elif platform.machine().lower() in _SYS_RENAMEAT2:
        number = _SYS_RENAMEAT2[platform.machine().lower()]
        result = libc.syscall(ctypes.c_long(number), *args)
    else:
        raise OSError(errno.ENOSYS, "no renameat2 in this C library")
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"cannot exchange {a} and {b}: {os.strerror(code)}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = [
    "CONFIG_FILE",
    "MODEL_FILE",
    "NOT_COPIED",
    "FolderPlan",
    "check_folder_paths",
    "copy_file",
    "exchange_folders",
    "is_folder_destination",
    "plan_folder",
    "publishing",
    "servable_config",
    "servable_quantization_config",
    "stale_partial_folders",
    "swap_in",
    "write_text",
]
