"""Copying a byte range from one open file to another inside the kernel.

:func:`copy_range` uses ``copy_file_range(2)``: no byte passes through this process, and
on a file system that shares extents (btrfs, XFS with ``reflink=1``, bcachefs; NFS 4.2 and
SMB by a server-side copy) the kernel clones the range instead of copying it, so copying a
file's payloads costs metadata, not I/O.  Where the call is missing or refused for these two
files (``EXDEV`` across file systems on older kernels, ``EINVAL``, ``ENOSYS``,
``EOPNOTSUPP``/``ENOTSUP``, or a kernel that copies nothing and says 0), the rest of the range
is copied by positioned reads and writes, in bounded chunks.  Either way the result is
the same bytes; :class:`Copied` says how many went which way.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass

#: Why ``copy_file_range`` may refuse two ordinary files that a plain copy still copies.
FALLBACK_ERRNOS = frozenset(
    {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}
)
#: The most bytes one ``copy_file_range`` call is asked for (the kernel takes at most
#: about 2 GiB at once anyway).
_KERNEL_STEP = 1 << 30
#: The buffer of the plain copy.
_CHUNK = 8 << 20


@dataclass
class Copied:
    """Bytes copied by the kernel (``copy_file_range``) and by plain reads and writes."""

    by_kernel: int = 0
    by_copy: int = 0


def copy_range(src: int, dst: int, src_offset: int, dst_offset: int, length: int) -> Copied:
    """Copy ``length`` bytes of the descriptor ``src`` from ``src_offset`` to ``dst`` at
    ``dst_offset``; neither descriptor's file position moves.  ``OSError`` (``EIO``) when
    ``src`` ends before the range does, or for any other failure of the copy."""
    copied = Copied()
    done = 0
    kernel = hasattr(os, "copy_file_range")
    while kernel and done < length:
        try:
            got = os.copy_file_range(src, dst, min(_KERNEL_STEP, length - done),
                                     src_offset + done, dst_offset + done)  # fmt: skip
        except OSError as exc:
            if exc.errno not in FALLBACK_ERRNOS:
                raise
            break
        if got == 0:  # the end of src, or a file system that copies nothing: see below
            break
        done += got
        copied.by_kernel += got
    copied.by_copy = _plain_copy(src, dst, src_offset + done, dst_offset + done, length - done)
    return copied


def _plain_copy(src: int, dst: int, src_offset: int, dst_offset: int, length: int) -> int:
    """Copy by ``pread``/``pwrite`` in bounded chunks; the bytes copied (``length``)."""
    buffer = memoryview(bytearray(min(_CHUNK, length)))
    done = 0
    while done < length:
        want = buffer[: min(len(buffer), length - done)]
        got = os.preadv(src, [want], src_offset + done)
        if got == 0:
            raise OSError(errno.EIO, f"the source ended {length - done} bytes before the "
                          f"end of the range (at byte {src_offset + done})")  # fmt: skip
        written = 0
        while written < got:
            written += os.pwrite(dst, want[written:got], dst_offset + done + written)
        done += got
    return done


__all__ = ["FALLBACK_ERRNOS", "Copied", "copy_range"]
