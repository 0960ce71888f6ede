"""Scratch arrays that a thread reuses from one layer to the next, where it asks to.

Repacking a layer needs temporaries as large as the layer (the codes of a 4096 x 14336 layer
are 59 MB).  Allocated afresh for every layer, each one is new memory that the kernel must
zero page by page on first touch; a converter's worker threads spent a fifth of their time
there (``perf``: ``clear_page_erms`` under ``folio_zero_user``, with ``--jobs 2`` on the 1B
benchmark shape), because memory freed on one thread is handed back to the system rather than
kept for the next layer.  Inside :func:`reusing` (or on a thread started with
:func:`keep`), :func:`empty` returns a view of a buffer this thread keeps under a key, grown
when a larger one is asked for, so the same pages serve every layer.

Only true temporaries may come from here: the array is overwritten by the next request under
the same key on the same thread, so it must not outlive the function that asked for it (or be
handed on as a result).  Outside :func:`reusing` and :func:`keep`, :func:`empty` is
``numpy.empty``: a library caller keeps no memory it did not ask for.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from numpy.typing import DTypeLike, NDArray

_local = threading.local()


def empty(key: str, shape: tuple[int, ...], dtype: DTypeLike) -> NDArray[Any]:
    """An uninitialised C-contiguous array: this thread's buffer ``key`` when it reuses
    memory, else a new one."""
    buffers: dict[str, NDArray[np.uint8]] | None = getattr(_local, "buffers", None)
    if buffers is None:
        return np.empty(shape, dtype=dtype)
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if key not in buffers or buffers[key].nbytes < nbytes:
        buffers.pop(key, None)  # the smaller one goes before the larger one is allocated
        buffers[key] = np.empty(nbytes, dtype=np.uint8)
    return buffers[key][:nbytes].view(dt).reshape(shape)


@contextmanager
def reusing() -> Iterator[None]:
    """Within the block, this thread's :func:`empty` reuses memory; it is freed at the end
    (nested blocks share the outer one's buffers)."""
    if getattr(_local, "buffers", None) is not None:
        yield
        return
    _local.buffers = {}
    try:
        yield
    finally:
        _local.buffers = None


def keep() -> None:
    """Make this thread's :func:`empty` reuse memory for the rest of its life (a thread
    pool's ``initializer``: the buffers go with the thread)."""
    _local.buffers = {}
