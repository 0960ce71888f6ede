"""SRC and DST checked before anything is read or written: the one source guard, so that
DST never replaces, deletes or joins a file of SRC, whatever form names them (a folder, a
manifest, a member, a link to one) [CONV-2, SET-8]."""

from __future__ import annotations

import os
from pathlib import Path

from reference.conversion.source import has_layers
from reference.ground.cli import EXIT_IO, EXIT_USAGE
from reference.ground.errors import FormatError
from reference.ground.files import open_regular
from reference.ground.text import escape
from reference.sets import folder
from reference.sets.fileset import is_set_path
from reference.sets.setmanifest import read_manifest
from reference.write.partial import NAME_MAX
from spec.constants import MAGIC, SET_MANIFEST


def check_paths(
    src: Path, dst: Path | None, *, to_folder: bool = False, overwrite: bool = False
) -> tuple[int, str] | None:
    """What is wrong with SRC and DST before anything is read or written: ``(exit status,
    message)``, or None.  A missing or unreadable SRC, and a DST whose folder does not exist,
    are I/O errors; an existing DST without ``overwrite`` (but an empty folder for a model
    folder), a DST file that is a folder, would replace a file of the source, or has a name
    too long to write, and a DST folder that :func:`reference.sets.folder.check_folder_paths`
    refuses, are usage errors [CONV-2]."""
    if not src.exists():
        return EXIT_IO, f"cannot read {escape(str(src))}: no such file or folder"
    if not src.is_dir():
        try:
            with open_regular(src) as f:
                head = f.read(len(MAGIC))
        except OSError as exc:
            return EXIT_IO, f"cannot read {escape(str(src))}: {exc.strerror or exc}"
        if head == MAGIC and not has_layers(src):  # nothing to reshard
            return EXIT_USAGE, (
                f"{escape(str(src))} is already an AWQ-v2 file, with no quantised layer to "
                "reshard (awq2-dump explains it)"
            )
    if dst is None:
        return None
    if not dst.parent.is_dir():  # said with the user's path, not a hidden partial name's
        why = "does not exist" if not dst.parent.exists() else "is not a folder"
        return EXIT_IO, (
            f"cannot write {escape(str(dst))}: its folder {escape(str(dst.parent))} {why} "
            "(create it first)"
        )
    if len(dst.name.encode("utf-8", "surrogateescape")) > NAME_MAX:
        return EXIT_USAGE, f"DST's file name is longer than {NAME_MAX} bytes"
    if to_folder:
        problem = folder.check_folder_paths(src, dst, overwrite=overwrite)
        problem = problem or source_guard(src, dst, to_folder=True)
        return None if problem is None else (EXIT_USAGE, escape(problem))
    if dst.is_dir():
        return EXIT_USAGE, (
            f"DST {escape(str(dst))} is a folder; a DST ending in .awq2 names the file to write"
        )
    problem = source_guard(src, dst, to_folder=False)
    if problem is not None:
        return EXIT_USAGE, escape(problem)
    if (dst.exists() or dst.is_symlink()) and not overwrite:
        return EXIT_USAGE, (
            f"DST {escape(str(dst))} exists; pass --overwrite to replace it (only once the new "
            "file is complete and verified)"
        )
    return None


def source_files(src: Path) -> tuple[list[Path], Path | None]:
    """Every file SRC consists of, and the folder of the set it is (None if it is not one):
    a folder's regular files (links followed); a set's manifest and every member it lists
    (whether or not they are in the folder: a member may be a link elsewhere) and every
    ``.awq2`` file of its folder [SET-8]; a file itself."""
    if src.is_dir():
        files = [p for p in src.iterdir() if p.is_file()]
        set_folder = src if os.path.lexists(src / SET_MANIFEST) else None
    elif is_set_path(src):
        files, set_folder = [src], src.parent
    else:
        return [src], None
    if set_folder is not None:
        manifest = set_folder / SET_MANIFEST if src.is_dir() else src
        try:
            listed = [set_folder / m.name for m in read_manifest(manifest).members]
        except (FormatError, OSError):  # refused later, when it is read; its folder still counts
            listed = []
        files += [*listed, *set_folder.glob("*.awq2")]
    return files, set_folder


def source_guard(src: Path, dst: Path, *, to_folder: bool) -> str | None:
    """The one check that DST never replaces, deletes or joins the source, whatever form
    names them (a folder, a manifest, a member, a link to one): a message naming DST, or None.

    Refused: a file DST that is any file of SRC (:func:`source_files`, links resolved); a
    file DST inside the folder of a set SRC (a new ``.awq2`` there joins the set,
    ``SET_EXTRA_FILE``, and a member's name replaces it); a folder DST that holds any file of
    SRC, links resolved (``--overwrite`` would delete it) [CONV-2]."""
    files, set_folder = source_files(src)
    real = {Path(os.path.realpath(f)) for f in files if os.path.exists(f)}
    shown = escape(str(dst))
    if to_folder:
        target = Path(os.path.realpath(dst))
        held = sorted(f for f in real if f == target or target in f.parents)
        if held:
            return (f"DST {shown} holds {escape(str(held[0]))}, a file of the source; replacing "
                    "DST would delete it")  # fmt: skip
        return None
    if os.path.exists(dst) and Path(os.path.realpath(dst)) in real:
        return f"DST {shown} is a file of the source; it would be lost"
    if set_folder is not None and os.path.realpath(dst.parent) == os.path.realpath(set_folder):
        return (f"DST {shown} is inside the folder of the source set {escape(str(set_folder))}: "
                "a new .awq2 file there joins the set (SET_EXTRA_FILE) and a member's name "
                "replaces it; write DST elsewhere")  # fmt: skip
    return None
