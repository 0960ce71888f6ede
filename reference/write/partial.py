"""The temporary ("partial") file a writer fills beside its destination [WR-2, WR-3].

A partial of the destination ``<name>`` is named::

    .<name>.<tag>.<host>.<pid>.<random>.awq2-partial

``<tag>`` is 8 hex digits of SHA-256 of the whole destination name, so that a partial of
``ckpt`` is never taken for one of ``ckpt.999999``; ``<name>`` is cut (at a UTF-8 boundary)
when the whole would pass the 255-byte limit on a file name.  ``<host>`` and ``<pid>`` name
the writing process, which holds an exclusive ``flock`` on the file while it writes.

A converter's model folder is filled the same way, in a partial *folder* named like a partial
file but ending in ``.awq2-partial-dir`` (:func:`create_folder`); its writer holds the lock on
the folder itself.

A partial is stale, and a clean-up may remove it, only when all of this holds: its name has
exactly that form for this destination, it was written on this host, no process of that pid
is alive here, and nobody holds its lock (which also covers a writer in another PID
namespace on this machine, whose pid means nothing here).  A partial of another host is
never removed: whether its writer lives cannot be proved from here.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import BinaryIO

#: Suffix of every partial file.
PARTIAL_SUFFIX = ".awq2-partial"
#: Suffix of every partial folder (a model folder being written).
FOLDER_SUFFIX = ".awq2-partial-dir"
#: Longest file name (bytes) on the file systems this runs on (Linux, macOS: NAME_MAX).
NAME_MAX = 255
_RANDOM = 8  # characters of tempfile's random part
_HOST_MAX = 32
_PID_MAX = 10


def host_tag() -> str:
    """This host's name as it appears in partial names: letters, digits and '-', 32 at most."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:_HOST_MAX] or "host"


def _name_tag(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _stem(name: str, suffix: str = PARTIAL_SUFFIX) -> str:
    """``name``, cut so that the longest partial name still fits in NAME_MAX bytes."""
    room = NAME_MAX - len(f"..{'0' * 8}.{'h' * _HOST_MAX}.{'9' * _PID_MAX}.") - _RANDOM
    room -= len(suffix)
    raw = name.encode("utf-8", "surrogateescape")[:room]
    return raw.decode("utf-8", "ignore")


def partial_prefix(dest: Path, suffix: str) -> str:
    """The start of a partial's name for ``dest`` (``tempfile`` adds the random part and
    ``suffix``)."""
    return f".{_stem(dest.name, suffix)}.{_name_tag(dest.name)}.{host_tag()}.{os.getpid()}."


_prefix = partial_prefix


def create(dest: Path) -> tuple[Path, BinaryIO]:
    """A new partial for ``dest``, opened for writing and locked; the caller unlinks it."""
    prefix = _prefix(dest, PARTIAL_SUFFIX)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=PARTIAL_SUFFIX, dir=dest.parent)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the process ends
    except OSError:
        os.close(fd)
        os.unlink(tmp)
        raise
    return Path(tmp), os.fdopen(fd, "w+b")


def create_folder(dest: Path) -> tuple[Path, int]:
    """A new partial folder for ``dest`` and the descriptor that holds its lock; the caller
    closes the descriptor once the folder is renamed into place or removed."""
    parent = dest.parent if str(dest.parent) else Path(".")
    tmp = tempfile.mkdtemp(prefix=_prefix(dest, FOLDER_SUFFIX), suffix=FOLDER_SUFFIX, dir=parent)
    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when the process ends
    except OSError:
        os.close(fd)
        os.rmdir(tmp)
        raise
    return Path(tmp), fd


def _pattern(dest: Path, suffix: str) -> re.Pattern[str]:
    return re.compile(
        rf"\.{re.escape(_stem(dest.name, suffix))}\.{_name_tag(dest.name)}\."
        rf"(?P<host>[A-Za-z0-9-]{{1,{_HOST_MAX}}})\.(?P<pid>[0-9]{{1,{_PID_MAX}}})\."
        rf"[A-Za-z0-9_]{{{_RANDOM}}}{re.escape(suffix)}"
    )


def stale_partials(
    dest: str | os.PathLike[str], *, folders: bool = False, suffix: str | None = None
) -> list[Path]:
    """Partials of ``dest`` whose writers are provably gone (see the module docstring):
    partial files, or with ``folders`` partial folders (never a link to one); ``suffix``
    names another kind of folder named the same way (a replaced folder moved aside)."""
    path = Path(dest)
    if suffix is None:
        suffix = FOLDER_SUFFIX if folders else PARTIAL_SUFFIX
    folders = suffix != PARTIAL_SUFFIX
    pattern, host = _pattern(path, suffix), host_tag()
    try:
        names = os.listdir(path.parent if str(path.parent) else ".")
    except OSError:
        return []
    stale = []
    for name in sorted(names):
        match = pattern.fullmatch(name)
        if match is None or match["host"] != host or _pid_alive(int(match["pid"])):
            continue
        candidate = path.parent / name
        if folders and (candidate.is_symlink() or not candidate.is_dir()):
            continue
        if _lock_is_free(candidate):
            stale.append(candidate)
    return stale


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _lock_is_free(path: Path) -> bool:
    """Nobody holds the partial's lock (its writer, wherever it runs, has ended)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)
