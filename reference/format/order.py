"""The slab order of an index's entries, found in a few bytes per entry.

:meth:`reference.Reader.entries` lists entries by payload offset, then by name (empty payloads
may share an offset).  Sorting Python objects for that holds every name at once; here the
entries are sorted by offset with NumPy, and only runs of equal offsets are refined, by the
names' bytes eight at a time (big-endian, zero-padded), then by length.  Byte order of UTF-8
is code-point order, so the result is the order ``sorted(key=(offset, name))`` gives.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from reference.format.index import Index

_CHUNK = 8  # name bytes compared per round: one uint64


def slab_order(index: Index) -> NDArray[np.int64]:
    """Entry numbers sorted by (data_offset, name), the order ``Reader.entries()`` lists.

    Reads the entries' fields unchecked: on a file not validated, the order of bad entries is
    arbitrary (but nothing is read out of bounds), and checking them is the caller's part."""
    e = index.entries
    order = np.argsort(e["data_offset"], kind="stable")
    offsets = e["data_offset"][order]
    starts = np.ones(len(order), bool)  # True where a run of equal keys starts
    np.not_equal(offsets[1:], offsets[:-1], out=starts[1:])
    del offsets
    step, last = 0, False
    while not last:
        single = starts.copy()
        single[:-1] &= starts[1:]
        tied = np.flatnonzero(~single)  # positions in runs longer than one
        del single
        if not tied.size:
            break
        members = order[tied]
        lengths = e["name_length"][members].astype(np.int64)
        last = not (lengths > step * _CHUNK).any()
        if last:  # names equal but for trailing NULs: shorter first; equal names (a file
            key = lengths.astype(np.uint64)  # not validated) stay in index order
        else:
            key = _name_chunk(index, members, lengths, step)
        del lengths
        runs = np.cumsum(starts)[tied]
        perm = np.lexsort((key, runs))
        order[tied] = members[perm]
        key = key[perm]
        starts[tied[1:]] |= key[1:] != key[:-1]
        step += 1
    return order  # type: ignore[no-any-return]


def _name_chunk(
    index: Index, members: NDArray[np.int64], lengths: NDArray[np.int64], step: int
) -> NDArray[np.uint64]:
    """Name bytes ``[8 step, 8 step + 8)`` of each entry as a big-endian uint64, zero-padded."""
    at = index.geometry.names.offset + index.entries["name_offset"][members].astype(np.int64)
    at += step * _CHUNK
    left = lengths - step * _CHUNK
    key = np.zeros(len(members), np.uint64)
    for b in range(_CHUNK):
        byte = np.zeros(len(members), np.uint64)
        there = (left > b) & (at + b < len(index.buf))  # unchecked entries cannot fault
        byte[there] = index.buf[at[there] + b]
        key <<= np.uint64(8)
        key |= byte
    return key
