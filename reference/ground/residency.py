"""Whether a range of a memory-mapped file is in the page cache: ``mincore(2)``.

:meth:`reference.format.reader.Reader.read_many_into` asks this to choose how to fill a run of
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


#: :func:`resident` looks at one page in every this many bytes (and at the last page).
SAMPLE_STRIDE = 1 << 20


def resident(address: int, length: int, *, stride: int = SAMPLE_STRIDE) -> bool:
    """True when the ``length`` bytes mapped at ``address`` look in the page cache: the first
    page, one page in every ``stride`` bytes after it and the last page all are (asking for
    every page cost 13 ms for the 1B benchmark's 778 MB, 12% of reading it; the sample
    costs well under 1 ms).  False when one is not, or when nobody can tell (no
    ``mincore`` here, or it failed).  A wrong guess costs speed only, never bytes."""
    fn = _mincore()
    if fn is None or length <= 0:
        return False
    first = address - address % PAGE  # mincore wants a page-aligned start
    last = address + length - 1
    last -= last % PAGE
    step = max(stride - stride % PAGE, PAGE)
    vec = np.zeros(1, np.uint8)
    out = vec.ctypes.data
    for page in (*range(first, last, step), last):
        # Bit 0 of the byte: that page is resident; the other bits are reserved.
        if fn(page, PAGE, out) != 0 or not vec[0] & 1:
            return False
    return True
