"""Vectorised FNV-1a 64 and bucket numbers over many names at once, and a file's SHA-256.

The scalar definitions are :func:`spec.algorithms.fnv1a_64` and
:func:`spec.algorithms.bucket_of`; these give the same numbers for a whole
name pool in O(total name bytes) time and O(number of names) memory, which the
writer (hashing every name) and full validation (re-hashing every name) need.
:func:`sha256_of` is the SHA-256 a converter's provenance and a set's manifest record.
"""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np
from numpy.typing import NDArray

from reference.ground.files import open_regular
from spec.algorithms import FNV64_OFFSET_BASIS, FNV64_PRIME


def fnv1a_64_many(
    pool: NDArray[np.uint8], offsets: NDArray[np.integer], lengths: NDArray[np.integer]
) -> NDArray[np.uint64]:
    """FNV-1a 64 of ``pool[offsets[i] : offsets[i] + lengths[i]]`` for every i.

    Names are processed longest first, so step j updates a prefix of the rows:
    one gather and one multiply (wrapping mod 2**64) per byte position.
    """
    count = len(offsets)
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-lengths, kind="stable")
    sorted_lengths = lengths[order]
    starts = np.asarray(offsets, dtype=np.int64)[order]
    h = np.full(count, FNV64_OFFSET_BASIS, dtype=np.uint64)
    prime = np.uint64(FNV64_PRIME)
    longest = int(sorted_lengths[0]) if count else 0
    # active[j] = how many names are longer than j
    active = np.searchsorted(-sorted_lengths, -np.arange(longest), side="left")
    with np.errstate(over="ignore"):
        for j in range(longest):
            rows = int(active[j])
            byte = pool[starts[:rows] + j].astype(np.uint64)
            h[:rows] = (h[:rows] ^ byte) * prime
    out = np.empty(count, dtype=np.uint64)
    out[order] = h
    return out


def buckets_of(hashes: NDArray[np.uint64], bucket_bits: int) -> NDArray[np.uint64]:
    """Vectorised :func:`spec.algorithms.bucket_of`."""
    mask = np.uint64((1 << bucket_bits) - 1)
    return (hashes ^ (hashes >> np.uint64(32))) & mask


class Stopped(Exception):
    """The hashing was stopped: whoever asked for the digest gave up and will not read it."""


def sha256_of(path: str | os.PathLike[str], *, stop: threading.Event | None = None) -> str:
    """SHA-256 of a regular file, read through one 1 MiB buffer (no memory sized by the
    file).  ``stop``, once set, ends the reading at the next buffer (raising
    :class:`Stopped`)."""
    digest, buffer = hashlib.sha256(), bytearray(1 << 20)
    view = memoryview(buffer)
    with open_regular(path) as f:
        while got := f.readinto(buffer):  # type: ignore[attr-defined]  # a BufferedReader
            if stop is not None and stop.is_set():
                raise Stopped(os.fspath(path))
            digest.update(view[:got])
    return digest.hexdigest()
