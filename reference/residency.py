"""Whether a range of a memory-mapped file is in the page cache: ``mincore(2)``.

:meth:`reference.reader.Reader.read_many_into` asks this to choose how to fill a run of
payloads.  Where the bytes are already in memory, copying them out of the map is the fast
way (the copy runs in user space, the kernel only maps the pages); where they are not,
positioned reads are (the kernel reads ahead in large requests, where a mapped copy waits on
one page fault after another).  ``bench/bench_load.py`` measures both; the figures are in
``docs/benchmarks.md``.

``mincore`` comes from the C library through :mod:`ctypes` (Linux, macOS and the BSDs have
it).  Where it is missing, or fails, the answer is "not resident", which only costs speed:
the caller then reads.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
from functools import cache
from typing import Any

import numpy as np

PAGE = mmap.PAGESIZE


@cache
def _mincore() -> Any:
    """The C library's ``mincore``, or None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.mincore
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    fn.restype = ctypes.c_int
    return fn


def resident(address: int, length: int) -> bool:
    """True when every page of the ``length`` bytes mapped at ``address`` is in the page
    cache; False when one is not, or when nobody can tell (no ``mincore`` here, or it failed:
    for example a range beyond the end of the mapping)."""
    fn = _mincore()
    if fn is None or length <= 0:
        return False
    start = address - address % PAGE  # mincore wants a page-aligned start
    pages = -(-(address + length - start) // PAGE)
    vec = np.zeros(pages, np.uint8)  # one byte per page
    if fn(start, pages * PAGE, vec.ctypes.data) != 0:
        return False
    # Bit 0 of each byte: that page is resident; the other bits are reserved.
    return bool((vec & 1).all())
