"""Opening the files a tool was given: regular files only, never blocking on the way in.

A FIFO, a character device (``/dev/zero``) or a socket named as a model file would make a
plain ``open()`` wait for a writer forever, or feed bytes without end.  Every reader and tool
in this package opens its inputs here: non-blocking, checked with ``fstat``, and refused with
:class:`NotRegularFileError` (an ``OSError``, so the tools report it as an unreadable input,
exit status 3) unless the path names a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


class NotRegularFileError(OSError):
    """The path exists but is not a regular file (a FIFO, a device, a socket, a folder)."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``open(path, "rb")`` for a regular file; :class:`NotRegularFileError` for anything else,
    without waiting (a FIFO with no writer is refused at once, not waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(
                errno.EINVAL, f"not a regular file ({_kind(mode)})", str(path)
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def fsync_dir(folder: str | os.PathLike[str]) -> None:
    """Make a rename in ``folder`` durable (POSIX); a no-op where folders cannot be opened or
    synced."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["NotRegularFileError", "fsync_dir", "open_regular"]
