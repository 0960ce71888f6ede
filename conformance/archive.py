"""Unpack a published suite archive (``awq2-conformance-<version>.tar.xz``) safely.

The archive comes from outside, so it is read as hostile input: the xz stream is decoded with
a bounded memory limit and at most :data:`MAX_BYTES` of tar data; at most
:data:`MAX_MEMBERS` members; only regular files and folders, with relative names free of
``..``, empty or ``.`` parts and backslashes; nothing is written outside the destination and no
name twice.  Anything else is refused with :class:`ArchiveError`, naming the member, and so is
a member the file system cannot hold (a name too long for it, a file where an earlier member
made a folder, no space left).  Links, devices and FIFOs are never created, and files are
written with mode 0644 whatever the archive says.  After unpacking, :func:`suite_root` finds
the folder holding ``manifest.json`` (the top folder of the published archive, or the
destination itself).
"""

from __future__ import annotations

import errno
import io
import lzma
import os
import tarfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO

#: At most this many bytes of decompressed tar data (the suite is about 21 MiB).
MAX_BYTES = 512 << 20
#: At most this many members (the suite has about 110 files).
MAX_MEMBERS = 10_000
#: The xz decoder may use at most this much memory (xz -9 needs 65 MiB).
XZ_MEMLIMIT = 256 << 20
_CHUNK = 1 << 16
XZ_MAGIC = b"\xfd7zXZ\x00"
#: A member's name is shown up to this many characters in a message.
NAME_SHOWN = 200


class ArchiveError(ValueError):
    """The archive cannot be unpacked safely: the message names the member and the rule."""


class _BoundedXz(io.RawIOBase):
    """The decompressed bytes of one xz file, refusing more than ``limit`` of them."""

    def __init__(self, raw: BinaryIO, limit: int) -> None:
        self._raw = raw
        self._xz = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=XZ_MEMLIMIT)
        self._left = limit
        self._limit = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self._left + 1)
        while not self._xz.eof:
            chunk = b""
            if self._xz.needs_input:
                chunk = self._raw.read(_CHUNK)
                if not chunk:
                    raise ArchiveError("the xz stream ends early (a truncated download?)")
            data = self._xz.decompress(chunk, want)
            if not data:
                continue
            if len(data) > self._left:
                raise ArchiveError(f"more than {self._limit >> 20} MiB once decompressed")
            self._left -= len(data)
            buffer[: len(data)] = data
            return len(data)
        return 0


def _shown(name: str) -> str:
    """A member's name for a message: quoted, and cut when it is long."""
    if len(name) <= NAME_SHOWN:
        return repr(name)
    return f"{name[:NAME_SHOWN]!r}... ({len(name)} characters)"


def _member_path(member: tarfile.TarInfo) -> PurePosixPath:
    """The member's name as a safe relative path, or :class:`ArchiveError`."""
    name = member.name
    parts = name.rstrip("/").split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise ArchiveError(
            f"member {_shown(name)}: expected a relative name without '..', '.', empty parts "
            "or '\\'"
        )
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
        raise ArchiveError(
            f"member {_shown(name)}: expected a regular file or a folder, found a link, device, "
            "sparse or other special file"
        )
    return PurePosixPath(*parts)


def extract(archive: Path, into: Path) -> None:
    """Unpack ``archive`` (a .tar.xz) into the empty folder ``into``, or raise
    :class:`ArchiveError` (``into`` may then hold part of it; the caller removes it)."""
    seen: set[PurePosixPath] = set()
    total = 0
    try:
        with open(archive, "rb") as raw, _BoundedXz(raw, MAX_BYTES) as stream:
            magic = raw.read(len(XZ_MAGIC))
            if magic != XZ_MAGIC:
                raise ArchiveError(
                    f"not a readable .tar.xz archive: expected the xz magic {XZ_MAGIC.hex(' ')}, "
                    f"found {magic.hex(' ') or 'an empty file'}"
                )
            raw.seek(0)
            buffered = io.BufferedReader(stream, _CHUNK)
            with tarfile.open(fileobj=buffered, mode="r|") as tar:
                for count, member in enumerate(tar, 1):
                    if count > MAX_MEMBERS:
                        raise ArchiveError(f"more than {MAX_MEMBERS} members")
                    rel = _member_path(member)
                    if rel in seen:
                        raise ArchiveError(f"member {_shown(member.name)}: twice in the archive")
                    seen.add(rel)
                    total += member.size
                    if total > MAX_BYTES:
                        raise ArchiveError(f"more than {MAX_BYTES >> 20} MiB of files")
                    try:
                        _write(tar, member, into, rel)
                    except OSError as exc:
                        raise ArchiveError(_unwritable(member, into, exc)) from exc
    except (tarfile.TarError, lzma.LZMAError, EOFError) as exc:
        raise ArchiveError(f"not a readable .tar.xz archive: {exc}") from exc
    except OSError as exc:  # the archive itself (a member's own errors are caught above)
        raise ArchiveError(f"{archive}: cannot be read ({exc.strerror or exc})") from exc


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, into: Path, rel: PurePosixPath) -> None:
    target = into.joinpath(*rel.parts)
    for parent in reversed(target.parents):  # no folder on the way may be a link
        if parent == into or into not in parent.parents:
            continue
        if parent.is_symlink() or (parent.exists() and not parent.is_dir()):
            raise ArchiveError(f"member {_shown(member.name)}: a parent is not a folder")
    if os.path.lexists(target) and not (member.isdir() and target.is_dir()):
        made = "a folder" if target.is_dir() else "a file"
        raise ArchiveError(
            f"member {_shown(member.name)}: {'a folder' if member.isdir() else 'a file'} where "
            f"an earlier member made {made} of that name"
        )
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    source = tar.extractfile(member)
    assert source is not None  # a regular file
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(_CHUNK):
            out.write(chunk)


def _unwritable(member: tarfile.TarInfo, into: Path, exc: OSError) -> str:
    """The message for a member the file system of ``into`` refused."""
    if exc.errno == errno.ENAMETOOLONG:
        why = f"its name is too long for the file system it is unpacked into ({exc.strerror})"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = (
            f"no space left to unpack it into {into} ({exc.strerror}); set TMPDIR to a folder "
            "with more room, or unpack the archive elsewhere and give --suite that folder"
        )
    else:
        why = f"cannot be unpacked into {into} ({exc.strerror or exc})"
    return f"member {_shown(member.name)}: {why}"


def suite_root(folder: Path) -> Path:
    """The folder holding ``manifest.json``: ``folder`` itself or its only subfolder."""
    if (folder / "manifest.json").is_file():
        return folder
    entries = list(folder.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / "manifest.json").is_file():
        return entries[0]
    raise ArchiveError("no manifest.json at the top of the archive or in its one top folder")
