"""Using every core: how many there are, and copying bytes that are in memory on all of them.

:meth:`reference.format.reader.Reader.read_many_into` copies payloads whose pages are in the page
cache out of the memory map (:mod:`reference.ground.residency`).  One thread copies at what one
core's share of memory bandwidth allows; NumPy's copy releases the GIL, so on two cores two
threads copied the 1B benchmark's 778 MB in 0.78x the time of one (``bench/bench_load.py``,
``docs/benchmarks.md``).  :func:`copy_out` cuts the runs of a read into pieces of :data:`PIECE`
bytes and spreads them over the calling thread and a shared pool of worker threads, started on
first use and kept for the life of the process (daemon threads, as
:mod:`concurrent.futures` makes them).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Bytes per piece of a parallel copy: large enough that a piece's call overhead (a few
#: microseconds) is lost in its copy (about a millisecond), small enough to balance.
PIECE = 8 << 20

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def available_cores() -> int:
    """The cores this process may use: ``os.process_cpu_count()`` (Python 3.13), else the
    scheduler's affinity mask, else ``os.cpu_count()``."""
    counter = getattr(os, "process_cpu_count", None)
    if counter is not None:
        return int(counter() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(available_cores(), thread_name_prefix="awq2-copy")
        return _pool


def copy_out(source: memoryview, placements: list[tuple[memoryview, int]], threads: int) -> None:
    """Fill each ``(view, at)`` of ``placements`` from ``source[at:]``, on up to ``threads``
    threads (the caller's included), in pieces of at most :data:`PIECE` bytes.  Every run of
    a read goes in one call: the threads meet once, not once per run, and each takes a
    contiguous share of about the same number of bytes (front to back: the caller the
    first)."""
    pieces = [
        (view[start : start + PIECE], at + start)
        for view, at in placements
        for start in range(0, len(view), PIECE)
    ]
    total = sum(len(target) for target, _ in pieces)
    threads = max(1, min(threads, len(pieces)))
    shares: list[list[tuple[memoryview, int]]] = [[] for _ in range(threads)]
    done = 0
    for piece in pieces:
        shares[min(threads - 1, done * threads // total) if total else 0].append(piece)
        done += len(piece[0])
    pending = [_workers().submit(_copy, source, share) for share in shares[1:] if share]
    _copy(source, shares[0])
    for future in pending:
        future.result()


#: Below this many bytes a piece is copied by ``memoryview`` assignment, which costs less
#: per call than NumPy's but holds the GIL.
_SMALL = 1 << 16


def _copy(source: memoryview, pieces: list[tuple[memoryview, int]]) -> None:
    for target, at in pieces:
        if len(target) < _SMALL:
            target[:] = source[at : at + len(target)]
        else:  # NumPy copies without the GIL
            into = np.frombuffer(target, np.uint8)
            np.copyto(into, np.frombuffer(source[at : at + len(target)], np.uint8))
