"""Background write-back: flush a file being written to storage on a thread of its own.

A writer that streams gigabytes leaves them all dirty in the page cache, to be flushed by the
one ``fsync`` before the rename [WR-2].  That flush is then the last thing the writer does, on
its own, while every core waits.  :class:`Writeback` starts an ``fdatasync`` of the file each
time another ``every`` bytes have been written (one at a time: a flush still running when the
next is due is left to finish, and the count carries over), so the storage writes overlap the
work that produces the next bytes and the final ``fsync`` has little left to do.  It also keeps
the dirty memory of a long conversion near ``every`` bytes instead of the kernel's limit.

The file descriptor must stay open until :meth:`Writeback.close` has returned: that is what
makes it safe to close or reuse the descriptor afterwards.  An error of a flush (``EIO``, a
full disk) is raised by the next :meth:`Writeback.wrote` or by :meth:`Writeback.close`.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor

#: Bytes written between two flushes: large enough that each flush is one long sequential
#: write, small enough that a few of them cover a layer of a large model.
WRITEBACK_BYTES = 64 << 20

# fdatasync (the data and the size, not the times) where the platform has it, else fsync.
_datasync = getattr(os, "fdatasync", os.fsync)


class Writeback:
    """Flushes of one open file descriptor, started by :meth:`wrote`, on one thread."""

    def __init__(self, fd: int, every: int | None = None):
        """``every``: bytes between flushes, default :data:`WRITEBACK_BYTES`."""
        every = WRITEBACK_BYTES if every is None else every
        if every <= 0:
            raise ValueError(f"every must be positive, got {every}")
        self._fd = fd
        self._every = every
        self._pending = 0
        self._flush: Future[None] | None = None
        self._pool: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="awq2-writeback"
        )
        self.flushes = 0  # started so far (for tests and benchmarks)

    def wrote(self, nbytes: int) -> None:
        """Count ``nbytes`` more written; start a flush if ``every`` bytes are waiting and no
        flush is running.  Raises the error of a finished flush, if it failed."""
        if self._pool is None:
            raise ValueError("write-back is closed")
        self._pending += nbytes
        if self._pending < self._every:
            return
        if self._flush is not None:
            if not self._flush.done():
                return  # the one in flight takes what it finds; the next takes the rest
            self._flush.result()
        self._pending = 0
        self._flush = self._pool.submit(_datasync, self._fd)
        self.flushes += 1

    def close(self) -> None:
        """Wait for the flush in flight and stop the thread; raise that flush's error.
        Idempotent: only the first call waits or raises."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        try:
            if self._flush is not None:
                self._flush.result()
        finally:
            pool.shutdown(wait=True)
