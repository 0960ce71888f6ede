"""One publishing transaction: a new file or folder is built in a partial beside its
destination and takes the destination's name in one step, or nothing changes [WR-2, CONV-2].

Every tool that writes goes through it (``save``/:class:`~reference.write.writer.Writer`,
``awq2-convert`` to a file, a folder or a set, with or without ``--overwrite``, and
``awq2-meta`` on a file or a set).  It owns:

* the partial's name and lock (:mod:`reference.write.partial`);
* a compare-and-swap against the destination the run started from: the identity of each
  watched path (device, inode and, for a file, size and times) is taken before the source
  is read and compared again at the commit, under an exclusive lock on the destination
  that every commit takes; a destination replaced, removed or created meanwhile by another
  writer is refused (:class:`PublishError`), never silently
  overwritten, and the run's own partial is removed;
* what takes the name: ``rename(2)`` for a file and for a folder onto a missing or empty
  one; for a folder that holds something (``--overwrite``, a set edited), one
  ``renameat2(RENAME_EXCHANGE)``, after which the old folder is under the partial's name and
  removed; where the kernel or the file system cannot exchange, the old folder is renamed
  aside (named as a partial, ``.awq2-replaced``) and the new one onto the name;
* the replaced destination's mode, owner and group kept on what replaces it (the owner and
  group as far as this process may set them: a user can give a file only a group it belongs
  to; what could not be kept is returned, for the command to say);
* SIGINT, SIGTERM and SIGHUP: during the commit they wait until it is done; before it, with
  :func:`interruptible`, SIGTERM and SIGHUP raise :class:`Interrupted` as Ctrl-C raises
  ``KeyboardInterrupt``, so the partial is removed on every path out; the commands then print
  one line and exit ``128 + signal`` (130, 143, 129: :func:`exit_status`);
* what a killed run left: partial files, partial folders and replaced folders of the same
  destination, whose writer is provably gone, removed by the next transaction on it
  (:func:`remove_stale`);
* errors: an ``OSError`` of the commit is raised again as :class:`PublishError`, whose text
  names the user's path and the reason, never a partial's hidden name or a bare errno.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import BinaryIO

from reference.ground.files import fsync_dir
from reference.write import partial

#: Suffix of a replaced folder moved aside (where two folders cannot be exchanged).
REPLACED_SUFFIX = ".awq2-replaced"
_HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_NO_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP}


class PublishError(OSError):
    """The destination could not take the new version; its text names the user's path and
    the reason (``str()`` is that text alone, without ``[Errno N]``).  Nothing changed."""

    def __init__(self, code: int, message: str, path: Path) -> None:
        super().__init__(code, message)
        self.message, self.path = message, path

    def __str__(self) -> str:
        return self.message


class Interrupted(BaseException):
    """SIGTERM or SIGHUP arrived (inside :func:`interruptible`): raised where the program
    stands, as ``KeyboardInterrupt`` for Ctrl-C, so that every clean-up runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def exit_status(exc: BaseException) -> int:
    """``128 + signal``, as a shell reports a process a signal ended: 130 for Ctrl-C, 143 for
    SIGTERM, 129 for SIGHUP."""
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


def signal_name(exc: BaseException) -> str:
    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal.Signals(signum).name


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Interrupted` in the main thread while the block runs
    (the previous handlers are put back after); elsewhere (another thread) nothing changes.
    A signal ignored when the command started stays ignored: under ``nohup`` a hang-up
    leaves the work running, as the user asked."""
    if not hasattr(signal, "SIGHUP") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupted(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    old = {
        s: signal.signal(s, raise_interrupted)
        for s in (signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(s) != signal.SIG_IGN
    }
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait until the block ends (the commit: the new version takes
    the name and the old one is removed); one that came meanwhile is delivered after, and its
    interruption then finds the work done."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - POSIX only
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ------------------------------------------------------------------ what the run started from


@dataclass(frozen=True)
class Identity:
    """What a path was when the run started: its kind and inode and, for a file, its size and
    times (a file rewritten in place keeps its inode)."""

    kind: str
    dev: int
    ino: int
    size: int = 0
    mtime_ns: int = 0
    ctime_ns: int = 0


def identity(path: Path) -> Identity | None:
    """``path``'s identity (a link followed), or None when nothing is there."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return Identity("folder", st.st_dev, st.st_ino)
    return Identity("file", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


Watched = dict[Path, "Identity | None"]


def watch(*paths: Path) -> Watched:
    """The identities to hold the commit against: take them before the source is read."""
    return {path: identity(path) for path in paths}


def _changed(watched: Watched) -> Path | None:
    for path, was in watched.items():
        if identity(path) != was:
            return path
    return None


# ------------------------------------------------------------------ what a killed run left


def remove_stale(dest: Path, say: Callable[[str], object] | None = None) -> list[Path]:
    """Remove the partial files, partial folders and replaced folders of ``dest`` whose writer
    is provably gone (:func:`reference.write.partial.stale_partials`); ``say`` is told each."""
    removed = []
    for suffix in (partial.PARTIAL_SUFFIX, partial.FOLDER_SUFFIX, REPLACED_SUFFIX):
        for left in partial.stale_partials(dest, suffix=suffix):
            what = (
                "partial file"
                if suffix == partial.PARTIAL_SUFFIX
                else ("partial folder" if suffix == partial.FOLDER_SUFFIX else "replaced folder")
            )
            if say is not None:
                say(f"removing a {what} left by an interrupted run: {left}")
            if left.is_dir() and not left.is_symlink():
                shutil.rmtree(left, ignore_errors=True)
            else:
                left.unlink(missing_ok=True)
            removed.append(left)
    return removed


# ------------------------------------------------------------------ the transaction


class Transaction:
    """A new version of ``dest`` being built in a partial (``.tmp``; for a file, ``.file`` is
    open on it, locked).  :meth:`commit` publishes it, :meth:`abort` removes it; a
    transaction is used once.  ``watched`` (by default ``dest`` as it is now) is what the
    commit compares against; ``like`` is the path whose mode, owner and group the new
    version takes (by default ``dest`` when it exists); ``say`` is told what a user should
    know (the two renames used where two folders cannot be exchanged)."""

    def __init__(self, dest: str | os.PathLike[str], *, folder: bool = False,
                 replace: bool = True, watched: Watched | None = None,
                 like: Path | None = None,
                 say: Callable[[str], object] | None = None) -> None:  # fmt: skip
        self.dest = Path(dest)
        self.say = say
        self.folder, self.replace = folder, replace
        self.watched = watch(self.dest) if watched is None else watched
        self.like = like
        self.not_kept: list[str] = []  # what of the old owner and group could not be kept
        self.file: BinaryIO | None = None
        self._lock = -1
        self._done = False
        try:
            if folder:
                tmp, self._lock = partial.create_folder(self.dest)
                self.tmp = Path(tmp)
            else:
                tmp, self.file = partial.create(self.dest)
                self.tmp = Path(tmp)
        except OSError as exc:
            raise _named(exc, self.dest, "cannot create the new version beside it") from exc

    # -------------------------------------------------------------- the end

    def abort(self) -> None:
        """Remove the partial; the destination stays as it was.  Never raises."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):
            if self.file is not None and not self.file.closed:
                self.file.close()
        if self.folder:
            shutil.rmtree(self.tmp, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                self.tmp.unlink(missing_ok=True)
        self._release()

    def commit(self) -> None:
        """Publish: under the parent folder's lock, with signals held, refuse a destination
        that changed since the run started, give the new version the old one's mode, owner
        and group, and take the name in one step (removing the old folder after an
        exchange).  Any failure removes the partial and leaves the destination as it was."""
        if self._done:
            raise ValueError("the transaction has ended")
        parent = self.dest.parent if str(self.dest.parent) else Path(".")
        try:
            with signals_held(), _locked(self.dest):
                moved = _changed(self.watched)
                if moved is not None:
                    raise PublishError(errno.EBUSY, f"{moved} changed while this run was "
                                       "writing its new version (another writer?); it was left "
                                       "as the other writer made it, and nothing was "
                                       "published", self.dest)  # fmt: skip
                self._keep_attributes()
                if self.file is not None:
                    self.file.flush()
                    os.fsync(self.file.fileno())
                old = self._take_name()
                self._done = True
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
            with contextlib.suppress(OSError):
                if self.file is not None:
                    self.file.close()
            self._release()
            fsync_dir(parent)
        except PublishError:
            self.abort()
            raise
        except OSError as exc:
            self.abort()
            raise _named(exc, self.dest, "cannot publish the new version") from exc
        except BaseException:
            self.abort()
            raise

    def _release(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def _take_name(self) -> Path | None:
        """Rename the partial onto ``dest``; the old folder's new path when one was replaced."""
        if not self.folder:
            os.replace(self.tmp, self.dest)
            return None
        fsync_dir(self.tmp)
        if not self.dest.is_dir() or not any(os.scandir(self.dest)):
            _rename_onto(self.tmp, self.dest)
            return None
        if not self.replace:
            raise PublishError(errno.ENOTEMPTY, f"{self.dest} was filled while this run was "
                               "writing (another process?); it was left as it is",
                               self.dest)  # fmt: skip
        try:
            exchange_folders(self.tmp, self.dest)
            return self.tmp  # the old folder, now under the partial's name
        except OSError as exc:
            if exc.errno not in _NO_EXCHANGE:
                raise
            if self.say is not None:
                self.say(f"this system cannot exchange two folders in one step ({exc.strerror});"
                         f" the old {self.dest} is moved aside and the new one renamed in its "
                         "place")  # fmt: skip
        return _move_aside_and_rename(self.tmp, self.dest)

    def _keep_attributes(self) -> None:
        """The replaced version's mode, owner and group, on the new one (a new destination:
        a file gets what ``open`` gives, a folder what ``mkdir`` gives)."""
        like = self.like if self.like is not None else self.dest
        try:
            old = os.stat(like)
        except OSError:
            old = None
        if old is None or stat.S_ISDIR(old.st_mode) != self.folder:
            os.chmod(self.tmp, (0o777 if self.folder else 0o666) & ~_umask())
            return
        self.not_kept = keep_owner(self.tmp, old)
        os.chmod(self.tmp, stat.S_IMODE(old.st_mode))

    # -------------------------------------------------------------- as a context

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._done:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def keep_owner(path: Path, old: os.stat_result) -> list[str]:
    """Give ``path`` the owner and group of ``old`` as far as this process may (a user keeps
    only a group it belongs to; root keeps both); what could not be kept, said in words."""
    now = os.stat(path)
    if (now.st_uid, now.st_gid) == (old.st_uid, old.st_gid):
        return []
    try:
        os.chown(path, old.st_uid, old.st_gid, follow_symlinks=False)
        return []
    except PermissionError:
        pass
    lost = [] if now.st_uid == old.st_uid else [f"owner {old.st_uid}"]
    try:
        os.chown(path, -1, old.st_gid, follow_symlinks=False)
    except PermissionError:
        lost.append(f"group {old.st_gid}")
    return lost


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def _locked(dest: Path) -> Iterator[None]:
    """An exclusive ``flock`` on what ``dest`` is now, while a commit compares and renames: two
    commits onto one destination take turns, and the second then finds it changed.  Nothing
    there (a new destination), or nothing this process may open, is not locked: the compare
    still runs, and a folder is only ever renamed onto a missing or empty one, which the
    kernel refuses once another has filled it."""
    try:
        fd = os.open(dest, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _rename_onto(tmp: Path, dst: Path) -> None:
    """One rename onto a missing or empty folder."""
    try:
        os.rename(tmp, dst)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise PublishError(
                exc.errno,
                f"{dst} was filled while this run was writing "
                "(another process?); it was left as it is",
                dst,
            ) from exc
        if exc.errno == errno.ENOTDIR:
            raise PublishError(exc.errno, f"{dst} became a file while this run was writing; "
                               "it was left as it is", dst) from exc  # fmt: skip
        raise


def _move_aside_and_rename(new: Path, dst: Path) -> Path:
    """Where two folders cannot be exchanged: ``dst`` renamed aside (a replaced folder, named
    as a partial so that a killed run's is found), ``new`` onto its name; the old one put
    back if ``new`` cannot take it.  Between the two renames no folder has the name."""
    parent = dst.parent if str(dst.parent) else Path(".")
    prefix = partial.partial_prefix(dst, REPLACED_SUFFIX)
    aside = Path(tempfile.mkdtemp(prefix=prefix, suffix=REPLACED_SUFFIX, dir=parent))
    try:
        os.rename(dst, aside)  # onto an empty folder of its own, which rename(2) allows
    except BaseException:
        aside.rmdir()
        raise
    try:
        os.rename(new, dst)
    except BaseException:
        os.rename(aside, dst)
        raise
    return aside


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


def _named(exc: OSError, dest: Path, doing: str) -> PublishError:
    """``exc`` said with the user's path: what was being done and the system's reason."""
    if isinstance(exc, PublishError):
        return exc
    code = exc.errno or errno.EIO
    reason = os.strerror(code) if exc.errno else str(exc)
    hint = {errno.ENOSPC: " (the disk is full)", errno.EDQUOT: " (over the disk quota)",
            errno.EACCES: f" (the folder {dest.parent} is not writable by this user)",
            errno.EPERM: f" (the folder {dest.parent} is not writable by this user)",
            errno.EROFS: " (a read-only file system)"}.get(code, "")  # fmt: skip
    return PublishError(code, f"{dest}: {doing}: {reason}{hint}; nothing was changed", dest)


def named_error(exc: OSError, dest: Path, doing: str) -> PublishError:
    """An ``OSError`` met while building the new version of ``dest`` (a full disk, a folder
    not writable), said with the user's path instead of the partial's."""
    return _named(exc, dest, doing)


__all__ = [
    "REPLACED_SUFFIX",
    "Identity",
    "Interrupted",
    "PublishError",
    "Transaction",
    "Watched",
    "exchange_folders",
    "exit_status",
    "identity",
    "interruptible",
    "keep_owner",
    "named_error",
    "remove_stale",
    "signal_name",
    "signals_held",
    "watch",
]
