"""Fuzz the reference reader with mutated conformance vectors.

Usage::

    python bench/fuzz.py [--inputs N] [--seconds S] [--seed K] [--save-crashes DIR]
                         [--workers W] [--timeout T] [--trace-every N] [--replay N]

Every vector in ``conformance/manifest.json`` is a seed.  Each input is one seed with one to
four mutations applied, chosen by a ``random.Random`` seeded with ``"{seed}/{input number}"``,
so any input can be rebuilt from its number alone (``--replay N`` writes it out):

* bit flips, byte overwrites (random and "interesting" 1/2/4/8-byte values), truncations,
  extensions, insertions and deletions, and splices of two seed files;
* structure-aware edits of every header, trailer, index-entry and bucket-table field, of the
  dims, the names and the metadata, with boundary values (0, 1, max, max + 1, the top bit set,
  small negatives stored as unsigned, each limit and limit + 1, the other entries' values), and
  composite edits that keep related fields consistent (a dimension and the length, dtype and
  length, layout and quantisation fields, a name and its hash, a resized metadata document and
  the index length, a 64 KiB block inserted before the index);
* after most structure-aware edits the checksums are recomputed (``conformance.surgery``'s
  ``FileEditor.refresh``, sometimes partially) so the input gets past the CRCs into the deep
  checks.

Each input runs in a long-lived worker process (one per CPU, restarted after a timeout or a
crash) over the whole reader path: ``reference.open``, ``validate()``, ``entry()``, ``tensor()``
and ``in`` for every name (plus absent names), ``linear()`` and ``dequantize()`` of every layer,
``metadata``, ``entries()``, ``tensors()``, ``read_into()``, ``verify()``.  An input passes when
it is accepted or only ``reference.FormatError`` (or ``KeyError`` for a name that is not there)
escapes.  Anything else is an unexpected exception; a worker that dies (a signal), an input over
the time limit, and an input whose peak memory (tracemalloc peak, or growth of the worker's
``ru_maxrss``) exceeds its file size + 64 MiB are reported too, and make the exit status 1.

Also reported, for information: files that ``validate()`` accepted but a later lookup or layer
call rejected with a ``FormatError`` (checks the lazy path makes and full validation does not).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import random
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
import tracemalloc
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import reference  # noqa: E402
from conformance.surgery import FileEditor  # noqa: E402
from reference.errors import FormatError, TensorNotFoundError  # noqa: E402
from spec.algorithms import bucket_bits_for, crc32c, fnv1a_64  # noqa: E402
from spec.constants import (  # noqa: E402
    ALIGNMENT,
    MAX_BUCKET_BITS,
    MAX_BUCKET_LENGTH,
    MAX_DIMS,
    MAX_METADATA_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TENSORS,
    SLAB_OFFSET,
)
from spec.registry import DTYPE_BY_CODE, DTYPES, LAYOUTS  # noqa: E402
from spec.schema import (  # noqa: E402
    ENTRY_CRC_OFFSET,
    ENTRY_DTYPE,
    ENTRY_SIZE,
    HEADER_CRC_OFFSET,
    HEADER_DTYPE,
    HEADER_SIZE,
    TRAILER_DTYPE,
    TRAILER_SIZE,
)

MANIFEST = ROOT / "conformance" / "manifest.json"
MEMORY_SLACK = 64 << 20  # an input may use its file size plus this much
TRACE_SLOWDOWN = 5  # time limit factor for inputs run under tracemalloc
U64 = (1 << 64) - 1

# --------------------------------------------------------------------------- field catalogue


@dataclass(frozen=True)
class Field:
    name: str
    offset: int
    size: int
    kind: str  # "u" unsigned, "i" signed, "V" raw bytes


def _fields(dtype: np.dtype) -> tuple[Field, ...]:
    out = []
    for name in dtype.names or ():
        sub, offset = dtype.fields[name][:2]  # type: ignore[index]
        out.append(Field(name, offset, sub.itemsize, sub.kind))
    return tuple(out)


HEADER = _fields(HEADER_DTYPE)
ENTRY = _fields(ENTRY_DTYPE)
TRAILER = _fields(TRAILER_DTYPE)
HEADER_BY_NAME = {f.name: f for f in HEADER}
ENTRY_BY_NAME = {f.name: f for f in ENTRY}
TRAILER_BY_NAME = {f.name: f for f in TRAILER}


def get_int(data: bytearray, offset: int, size: int, signed: bool = False) -> int:
    if offset < 0 or offset + size > len(data):
        return 0
    return int.from_bytes(data[offset : offset + size], "little", signed=signed)


def put_int(data: bytearray, offset: int, size: int, value: int) -> None:
    """Store ``value`` modulo 2**(8 size) (so -1 is all ones), if the field is in the file."""
    if 0 <= offset and offset + size <= len(data):
        data[offset : offset + size] = (value % (1 << (8 * size))).to_bytes(size, "little")


# --------------------------------------------------------------------------- file geometry


@dataclass
class Geometry:
    """Where the sections are, as the (possibly already damaged) header says; bounds-checked."""

    size: int
    count: int
    bucket_bits: int
    index_offset: int
    index_length: int
    slots: int
    entries_offset: int
    dims_offset: int
    dims_count: int
    names_offset: int
    names_length: int
    metadata_offset: int
    metadata_length: int

    @classmethod
    def of(cls, data: bytearray) -> Geometry:
        h = {f.name: get_int(data, f.offset, f.size) for f in HEADER if f.kind != "V"}
        bits = h["bucket_bits"]
        slots = (1 << bits) + 1 if bits <= 40 else 0
        count = h["tensor_count"]
        entries = h["index_offset"] + -(-4 * slots // 8) * 8
        dims = entries + ENTRY_SIZE * count
        names = dims + 8 * h["dims_count"]
        metadata = names + h["names_length"]
        return cls(
            len(data),
            count,
            bits,
            h["index_offset"],
            h["index_length"],
            slots,
            entries,
            dims,
            h["dims_count"],
            names,
            h["names_length"],
            metadata,
            h["metadata_length"],
        )

    def inside(self, start: int, length: int) -> bool:
        return 0 <= start and start + length <= self.size - TRAILER_SIZE and length >= 0

    def entries_ok(self) -> bool:
        return self.count > 0 and self.inside(self.entries_offset, ENTRY_SIZE * self.count)

    def table_ok(self) -> bool:
        return self.slots > 0 and self.inside(self.index_offset, 4 * self.slots)

    def entry(self, data: bytearray, i: int) -> dict[str, int]:
        at = self.entries_offset + ENTRY_SIZE * i
        return {f.name: get_int(data, at + f.offset, f.size, f.kind == "i") for f in ENTRY}

    def entry_at(self, i: int) -> int:
        return self.entries_offset + ENTRY_SIZE * i

    def dims_of(self, data: bytearray, i: int) -> tuple[int, list[int]] | None:
        """File offset of entry i's dims and their values, when they are inside the file."""
        e = self.entry(data, i)
        start = self.dims_offset + 8 * e["dims_index"]
        if e["ndim"] > MAX_DIMS or not self.inside(start, 8 * e["ndim"]):
            return None
        return start, [get_int(data, start + 8 * j, 8) for j in range(e["ndim"])]

    def name_range(self, data: bytearray, i: int) -> tuple[int, int] | None:
        e = self.entry(data, i)
        start = self.names_offset + e["name_offset"]
        if not self.inside(start, e["name_length"]):
            return None
        return start, start + e["name_length"]

    def regions(self) -> list[tuple[int, int]]:
        """Byte ranges worth aiming raw mutations at: header, index, trailer."""
        out = [(0, min(HEADER_SIZE, self.size))]
        if 0 <= self.index_offset < self.size:
            out.append((self.index_offset, max(self.index_offset + 1, self.size - TRAILER_SIZE)))
        out.append((max(0, self.size - TRAILER_SIZE), self.size))
        return [(a, b) for a, b in out if a < b]


# --------------------------------------------------------------------------- values


def boundary_values(size: int, signed: bool, current: int) -> list[int]:
    """0, 1, max, max + 1, top bit, top bit - 1, small negatives as unsigned, neighbours."""
    bits = 8 * size
    top = 1 << (bits - 1)
    values = [
        0,
        1,
        2,
        (1 << bits) - 1,
        1 << bits,
        top,
        top - 1,
        top + 1,
        -1,
        -2,
        -8,
        current + 1,
        current - 1,
        current * 2,
        current // 2,
        current ^ top,
        current + ALIGNMENT,
        current - ALIGNMENT,
        1 << 31,
        1 << 32,
        (1 << 32) - 1,
        1 << 40,
        1 << 62,
        1 << 63,
    ]
    if signed:
        values += [-(1 << 31), (1 << 31) - 1, -3]
    return values


def field_extras(name: str, geo: Geometry, current: int, e: dict[str, int] | None) -> list[int]:
    """Values that sit on a rule's edge for one named field."""
    c, size = geo.count, geo.size
    extras: dict[str, list[int]] = {
        "version_major": [1, 3, 0xFFFF],
        "version_minor": [0, 1, 0xFFFF],
        "required_flags": [1, 1 << 17, 1 << 63],
        "optional_flags": [1, 1 << 63],
        "alignment": [ALIGNMENT, 4096, ALIGNMENT * 2],
        "slab_offset": [SLAB_OFFSET, 0, HEADER_SIZE, SLAB_OFFSET * 2],
        "index_offset": [
            SLAB_OFFSET,
            size - TRAILER_SIZE,
            size,
            size - TRAILER_SIZE - 8,
            geo.index_offset + 8,
            SLAB_OFFSET - ALIGNMENT,
        ],
        "index_length": [0, size - TRAILER_SIZE - geo.index_offset, geo.index_length + 8],
        "file_size": [size, size - 1, size + 1, 0, HEADER_SIZE + TRAILER_SIZE],
        "tensor_count": [MAX_TENSORS, MAX_TENSORS + 1, c + 1, c - 1, 0, 1 << 40, 1 << 24],
        "dims_count": [c * MAX_DIMS, c * MAX_DIMS + 1, geo.dims_count + 1, 0],
        "names_length": [c * MAX_NAME_LENGTH, c * MAX_NAME_LENGTH + 1, 1 << 60, 0],
        "metadata_length": [
            MAX_METADATA_LENGTH,
            MAX_METADATA_LENGTH + 1,
            0,
            geo.metadata_length + 1,
        ],
        "bucket_bits": [
            bucket_bits_for(c) + 1,
            bucket_bits_for(c) - 1,
            MAX_BUCKET_BITS,
            MAX_BUCKET_BITS + 1,
            63,
            64,
            255,
            20,
        ],
        "ndim": [0, MAX_DIMS, MAX_DIMS + 1, 255],
        "name_length": [0, MAX_NAME_LENGTH, MAX_NAME_LENGTH + 1, 0xFFFF],
        "dtype": [d.code for d in DTYPES] + [0, 16, 255],
        "layout": [lay.code for lay in LAYOUTS] + [10, 255],
        "bits": [0, 2, 3, 4, 8, 16, 32, 255],
        "group_size": [-1, 0, 32, 64, 128, 256, 96, -(1 << 31), (1 << 31) - 1],
        "k": [0, 1, 16, 64, 128, 256, 200, (1 << 32) - 1],
        "n": [0, 1, 8, 64, 72, 128, (1 << 32) - 1],
        "flags": [1, 0x8000],
        "data_offset": [
            0,
            SLAB_OFFSET,
            geo.index_offset,
            geo.index_offset - ALIGNMENT,
            size,
            U64 - ALIGNMENT + 1,
            1 << 63,
        ],
        "data_length": [0, geo.index_offset - (e or {}).get("data_offset", 0), 1 << 63, U64],
        "name_offset": [geo.names_length, geo.names_length - (e or {}).get("name_length", 0) + 1],
        "dims_index": [geo.dims_count, geo.dims_count - (e or {}).get("ndim", 0) + 1],
    }
    return extras.get(name, [])


# --------------------------------------------------------------------------- mutators


@dataclass
class Seed:
    id: str
    data: bytes
    names: tuple[str, ...]
    weight: float
    config: bytes | None = None  # config.json beside an AWQ v1 (safetensors) seed


@dataclass
class Mutant:
    """One input under construction: the editor, what was done, which entries were touched."""

    ed: FileEditor
    rng: random.Random
    seeds: Sequence[Seed]
    steps: list[str] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)
    structured: bool = False
    config: bytes | None = None

    @property
    def data(self) -> bytearray:
        return self.ed.data

    def geo(self) -> Geometry:
        return Geometry.of(self.ed.data)

    def position(self) -> int:
        """A byte position, half the time inside the header, the index or the trailer."""
        n = len(self.data)
        if n == 0:
            return 0
        regions = self.geo().regions()
        if regions and self.rng.random() < 0.6:
            a, b = self.rng.choice(regions)
            return self.rng.randrange(a, b)
        return self.rng.randrange(n)

    def pick_value(self, f: Field, current: int, extras: list[int]) -> int:
        if extras and self.rng.random() < 0.5:
            return self.rng.choice(extras)
        return self.rng.choice(boundary_values(f.size, f.kind == "i", current))


def _bitflip(m: Mutant) -> None:
    for _ in range(m.rng.choice((1, 1, 1, 2, 3, 8))):
        if not m.data:
            return
        at, bit = m.position(), m.rng.randrange(8)
        m.data[at] ^= 1 << bit
        m.steps.append(f"flip bit {bit} of byte {at}")


INTERESTING = (
    0,
    1,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    1 << 63,
    U64,
    ALIGNMENT,
    MAX_TENSORS + 1,
)


def _overwrite(m: Mutant) -> None:
    if not m.data:
        return
    at = m.position()
    if m.rng.random() < 0.5:
        blob = bytes(m.rng.randrange(256) for _ in range(m.rng.randint(1, 8)))
        m.data[at : at + len(blob)] = blob[: max(0, len(m.data) - at)]
        m.steps.append(f"overwrite {len(blob)} random bytes at {at}")
    else:
        size = m.rng.choice((1, 2, 4, 8))
        value = m.rng.choice(INTERESTING)
        put_int(m.data, at - at % size, size, value)
        m.steps.append(f"write u{8 * size} {value:#x} at {at - at % size}")


def _boundaries(m: Mutant) -> list[int]:
    g = m.geo()
    points = [
        0,
        1,
        8,
        HEADER_SIZE,
        SLAB_OFFSET,
        g.index_offset,
        g.entries_offset,
        g.dims_offset,
        g.names_offset,
        g.metadata_offset,
        g.size - TRAILER_SIZE,
        g.size - 8,
        g.size - 1,
    ]
    return [p for p in points if 0 <= p < g.size]


def _truncate(m: Mutant) -> None:
    n = len(m.data)
    if m.rng.random() < 0.6 and n:
        cut = m.rng.choice(_boundaries(m)) + m.rng.choice((-1, 0, 0, 1))
    else:
        cut = m.rng.randrange(n + 1)
    cut = max(0, min(cut, n))
    m.ed.truncate(cut)
    m.steps.append(f"truncate to {cut}")


def _extend(m: Mutant) -> None:
    how = m.rng.randrange(4)
    length = m.rng.choice((1, 8, 32, 4096, ALIGNMENT))
    blob = bytes(length) if m.rng.random() < 0.5 else m.rng.randbytes(length)
    if how == 0:
        m.data.extend(blob)
        m.steps.append(f"append {length} bytes")
    elif how == 1:
        at = m.position()
        m.data[at:at] = blob
        m.steps.append(f"insert {length} bytes at {at}")
    elif how == 2:
        at = m.position()
        del m.data[at : at + length]
        m.steps.append(f"delete {length} bytes at {at}")
    else:
        m.data.extend(m.data[-TRAILER_SIZE:])
        m.steps.append("append a second trailer")


def _splice(m: Mutant) -> None:
    other = m.rng.choice(m.seeds)
    how = m.rng.randrange(4)
    if how == 0:  # this file's prefix, the other's suffix
        at = m.rng.choice([*_boundaries(m), m.rng.randrange(len(m.data) + 1)])
        m.ed.data = m.data[:at] + bytearray(other.data[at:])
        m.steps.append(f"splice {other.id} from byte {at}")
    elif how == 1:  # the other's header
        m.data[:HEADER_SIZE] = other.data[:HEADER_SIZE]
        m.steps.append(f"header of {other.id}")
    elif how == 2:  # the other's trailer
        if len(m.data) >= TRAILER_SIZE:
            m.data[-TRAILER_SIZE:] = other.data[-TRAILER_SIZE:]
            m.steps.append(f"trailer of {other.id}")
    else:  # the other's index and trailer after this file's slab
        og = Geometry.of(bytearray(other.data))
        g = m.geo()
        if 0 < g.index_offset <= len(m.data) and 0 < og.index_offset <= len(other.data):
            m.ed.data = m.data[: g.index_offset] + bytearray(other.data[og.index_offset :])
            m.steps.append(f"index of {other.id}")


def _header_field(m: Mutant) -> None:
    f = m.rng.choice(HEADER)
    g = m.geo()
    if f.kind == "V":
        blob = m.rng.choice((bytes(f.size), b"\x01" * f.size, m.rng.randbytes(f.size)))
        m.data[f.offset : f.offset + f.size] = blob
        m.steps.append(f"header.{f.name} = {blob.hex()}")
    else:
        current = get_int(m.data, f.offset, f.size)
        value = m.pick_value(f, current, field_extras(f.name, g, current, None))
        put_int(m.data, f.offset, f.size, value)
        m.steps.append(f"header.{f.name} = {value % (1 << 8 * f.size):#x} (was {current:#x})")
    m.structured = True


def _trailer_field(m: Mutant) -> None:
    if len(m.data) < TRAILER_SIZE:
        return
    f = m.rng.choice(TRAILER)
    at = len(m.data) - TRAILER_SIZE + f.offset
    if f.kind == "V":
        blob = m.rng.choice((bytes(f.size), m.rng.randbytes(f.size), b"\x89AWQEND\r"))
        m.data[at : at + f.size] = blob
        m.steps.append(f"trailer.{f.name} = {blob.hex()}")
    else:
        current = get_int(m.data, at, f.size)
        value = m.pick_value(f, current, field_extras(f.name, m.geo(), current, None))
        put_int(m.data, at, f.size, value)
        m.steps.append(f"trailer.{f.name} = {value % (1 << 8 * f.size):#x} (was {current:#x})")
    m.structured = True


def _pick_entry(m: Mutant, g: Geometry) -> int | None:
    if not g.entries_ok():
        return None
    return m.rng.randrange(g.count)


def _entry_field(m: Mutant) -> None:
    g = m.geo()
    i = _pick_entry(m, g)
    if i is None:
        return _header_field(m)
    e = g.entry(m.data, i)
    f = m.rng.choice(ENTRY)
    current = e[f.name]
    extras = field_extras(f.name, g, current, e)
    others = [g.entry(m.data, j)[f.name] for j in range(min(g.count, 16))]
    value = m.rng.choice(others) if m.rng.random() < 0.15 else m.pick_value(f, current, extras)
    put_int(m.data, g.entry_at(i) + f.offset, f.size, value)
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}].{f.name} = {value} (was {current})")
    return None


def _bucket_slot(m: Mutant) -> None:
    g = m.geo()
    if not g.table_ok():
        return _header_field(m)
    table = np.frombuffer(m.data, "<u4", g.slots, g.index_offset)
    how = m.rng.randrange(4)
    if how == 0:  # one slot to a boundary value
        slot = m.rng.randrange(g.slots)
        current = int(table[slot])
        value = m.rng.choice(
            [
                0,
                1,
                g.count,
                g.count + 1,
                g.count - 1,
                current + 1,
                current - 1,
                current + MAX_BUCKET_LENGTH,
                current + MAX_BUCKET_LENGTH + 1,
                1 << 31,
                (1 << 32) - 1,
            ]
        )
        put_int(m.data, g.index_offset + 4 * slot, 4, value)
        m.steps.append(f"bucket[{slot}] = {value % (1 << 32)} (was {current})")
    elif how == 1:  # move one boundary by one: an entry changes bucket
        slot = m.rng.randrange(1, g.slots) if g.slots > 1 else 0
        delta = m.rng.choice((-1, 1))
        put_int(m.data, g.index_offset + 4 * slot, 4, int(table[slot]) + delta)
        m.steps.append(f"bucket[{slot}] {delta:+d}")
    elif how == 2:  # one bucket of length L: every slot after `slot` moved to the end
        slot = m.rng.randrange(g.slots)
        length = m.rng.choice((MAX_BUCKET_LENGTH - 1, MAX_BUCKET_LENGTH, MAX_BUCKET_LENGTH + 1))
        start = int(table[slot])
        for s in range(slot + 1, g.slots):
            put_int(m.data, g.index_offset + 4 * s, 4, min(start + length, g.count))
        m.steps.append(f"bucket {slot} spans {length} entries")
    else:  # every entry in one bucket
        slot = m.rng.randrange(g.slots)
        for s in range(g.slots):
            put_int(m.data, g.index_offset + 4 * s, 4, 0 if s <= slot else g.count)
        m.steps.append(f"all entries in bucket {slot}")
    m.structured = True
    return None


def _itemsize(code: int) -> int:
    d = DTYPE_BY_CODE.get(code)
    return d.itemsize if d else 1


def _set_length_from_shape(m: Mutant, g: Geometry, i: int, shape: Sequence[int]) -> None:
    e = g.entry(m.data, i)
    count = 1
    for d in shape:
        count *= d
    put_int(
        m.data,
        g.entry_at(i) + ENTRY_BY_NAME["data_length"].offset,
        8,
        count * _itemsize(e["dtype"]),
    )


def _dim_value(m: Mutant) -> None:
    g = m.geo()
    i = _pick_entry(m, g)
    found = None if i is None else g.dims_of(m.data, i)
    if i is None or found is None or not found[1]:
        return _entry_field(m)
    start, dims = found
    j = m.rng.randrange(len(dims))
    value = m.rng.choice(
        [
            0,
            1,
            2,
            dims[j] + 1,
            dims[j] - 1,
            dims[j] * 2,
            1 << 31,
            1 << 32,
            (1 << 63) - 1,
            1 << 63,
            U64,
            1 << 62,
            (1 << 62) + 1,
            1 << 40,
        ]
    )
    put_int(m.data, start + 8 * j, 8, value)
    dims[j] = value % (1 << 64)
    keep = m.rng.random() < 0.6
    if keep:  # keep data_length consistent, so the deeper checks run
        _set_length_from_shape(m, g, i, dims)
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}] dim {j} = {value} ({'length follows' if keep else 'length kept'})")
    return None


def _retype(m: Mutant) -> None:
    g = m.geo()
    i = _pick_entry(m, g)
    found = None if i is None else g.dims_of(m.data, i)
    if i is None or found is None:
        return _entry_field(m)
    code = m.rng.choice([d.code for d in DTYPES])
    put_int(m.data, g.entry_at(i) + ENTRY_BY_NAME["dtype"].offset, 1, code)
    _set_length_from_shape(m, g, i, found[1])
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}].dtype = {code}, length follows")
    return None


def _relayout(m: Mutant) -> None:
    """Give an entry a layout and quantisation fields that fit (or nearly fit) its shape."""
    g = m.geo()
    i = _pick_entry(m, g)
    found = None if i is None else g.dims_of(m.data, i)
    if i is None or found is None:
        return _entry_field(m)
    dims = found[1]
    layout = m.rng.choice([lay.code for lay in LAYOUTS])
    bits = m.rng.choice((4, 4, 8, 3))
    pf = 32 // bits
    rows, cols = [*dims, 1, 1][:2] if len(dims) >= 2 else (1, dims[0] if dims else 1)
    name = next((lay.name for lay in LAYOUTS if lay.code == layout), "")
    if name.endswith("QWEIGHT"):
        k, n = (rows * 16, cols * pf // 16) if name.startswith("MARLIN") else (rows, cols * pf)
    elif name.endswith("QZEROS"):
        k, n = m.rng.choice((128, 256, rows * 128)), cols * pf
    else:
        k, n = m.rng.choice((128, 256, rows * 64)), cols
    group = m.rng.choice((-1, 32, 64, 128, k // max(rows, 1) or 1, 0))
    e_at = g.entry_at(i)
    for fname, value in (
        ("layout", layout),
        ("bits", bits),
        ("k", k),
        ("n", n),
        ("group_size", group),
    ):
        f = ENTRY_BY_NAME[fname]
        put_int(m.data, e_at + f.offset, f.size, value)
    if m.rng.random() < 0.5:
        put_int(m.data, e_at + ENTRY_BY_NAME["dtype"].offset, 1, m.rng.choice((7, 10, 11, 12)))
        _set_length_from_shape(m, g, i, dims)
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}] layout {layout} bits {bits} k {k} n {n} group {group}")
    return None


SUFFIXES = (b".qweight", b".scales", b".qzeros", b".bias", b"\xff", b"\xc3", b"\x00", b".")


def _rename(m: Mutant) -> None:
    """Change a name in place (same length), and usually fix its hash."""
    g = m.geo()
    i = _pick_entry(m, g)
    rng_ = None if i is None else g.name_range(m.data, i)
    if i is None or rng_ is None or rng_[0] == rng_[1]:
        return _entry_field(m)
    start, end = rng_
    name = bytearray(m.data[start:end])
    how = m.rng.randrange(4)
    if how == 0:
        at = m.rng.randrange(len(name))
        name[at] = m.rng.choice((0x00, 0x80, 0xC3, 0xFF, 0x2E, m.rng.randrange(256)))
    elif how == 1:
        suffix = m.rng.choice(SUFFIXES)[: len(name)]
        name[len(name) - len(suffix) :] = suffix
    elif how == 2 and g.entries_ok():  # take another entry's name, cut or padded
        j = m.rng.randrange(g.count)
        other = g.name_range(m.data, j)
        if other is not None:
            src = bytes(m.data[other[0] : other[1]])
            name[:] = (src + b"x" * len(name))[: len(name)]
    else:
        name[:] = bytes(len(name)) if m.rng.random() < 0.3 else name[::-1]
    m.data[start:end] = name
    if m.rng.random() < 0.8:
        put_int(m.data, g.entry_at(i), 8, fnv1a_64(bytes(name)))
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}] name = {bytes(name)[:40]!r}")
    return None


def _copy_entry(m: Mutant) -> None:
    """Copy placement fields from another entry (overlaps, shared payloads) or swap records."""
    g = m.geo()
    if not g.entries_ok() or g.count < 2:
        return _entry_field(m)
    i, j = m.rng.sample(range(g.count), 2)
    if m.rng.random() < 0.5:
        names = m.rng.choice(
            (
                ("data_offset",),
                ("data_offset", "data_length", "data_crc"),
                ("dtype", "layout", "bits", "group_size", "k", "n"),
            )
        )
        for fname in names:
            f = ENTRY_BY_NAME[fname]
            src = g.entry_at(j) + f.offset
            put_int(m.data, g.entry_at(i) + f.offset, f.size, get_int(m.data, src, f.size))
        m.steps.append(f"entry[{i}] takes {'/'.join(names)} of entry[{j}]")
    else:
        a, b = g.entry_at(i), g.entry_at(j)
        m.data[a : a + ENTRY_SIZE], m.data[b : b + ENTRY_SIZE] = (
            m.data[b : b + ENTRY_SIZE],
            m.data[a : a + ENTRY_SIZE],
        )
        m.steps.append(f"swap entries {i} and {j}")
    m.touched |= {i, j}
    m.structured = True
    return None


METADATA_DOCS = (
    b"[" * 70 + b"]" * 70,
    b'{"a":' * 63 + b"1" + b"}" * 63,
    b'{"a":' * 64 + b"1" + b"}" * 64,
    b'{"a":' * 65 + b"1" + b"}" * 65,
    b'{"a":' * 2000 + b"1" + b"}" * 2000,
    b'{"a":1,"a":2}',
    b'{"x":NaN}',
    b'{"x":Infinity}',
    b'{"x":1e999}',
    b'{"x":' + b"9" * 5000 + b"}",
    b'{"x":"\\ud800"}',
    b'{"x":"\xff"}',
    b"\xef\xbb\xbf{}",
    b"[]",
    b"null",
    b"{}",
    b"",
    b'{"x":' + b"[" * 500 + b"]" * 500 + b"}",
    b'{"\x00":1}',
)


def _metadata(m: Mutant) -> None:
    """Replace the metadata: in place (same length), or resized with every length adjusted."""
    g = m.geo()
    if not g.inside(g.metadata_offset, g.metadata_length):
        return _header_field(m)
    doc = m.rng.choice(METADATA_DOCS)
    end = g.metadata_offset + g.metadata_length
    if m.rng.random() < 0.4 and g.metadata_length:
        blob = (doc + b" " * g.metadata_length)[: g.metadata_length]
        m.data[g.metadata_offset : end] = blob
        m.steps.append(f"metadata overwritten with {doc[:30]!r}...")
    elif end == len(m.data) - TRAILER_SIZE:
        m.data[g.metadata_offset : end] = doc
        grow = len(doc) - g.metadata_length
        for name, value in (
            ("metadata_length", len(doc)),
            ("index_length", g.index_length + grow),
            ("file_size", len(m.data)),
        ):
            f = HEADER_BY_NAME[name]
            put_int(m.data, f.offset, f.size, value)
        m.steps.append(f"metadata replaced by {len(doc)} bytes {doc[:30]!r}...")
    m.structured = True
    return None


def _gap(m: Mutant) -> None:
    """Insert (or remove) a 64 KiB block before the index, and move the index pointers."""
    g = m.geo()
    if not SLAB_OFFSET <= g.index_offset <= len(m.data):
        return _header_field(m)
    if m.rng.random() < 0.7:
        m.data[g.index_offset : g.index_offset] = bytes(ALIGNMENT)
        delta = ALIGNMENT
    else:
        del m.data[g.index_offset - ALIGNMENT : g.index_offset]
        delta = -ALIGNMENT
    for name, value in (("index_offset", g.index_offset + delta), ("file_size", len(m.data))):
        f = HEADER_BY_NAME[name]
        put_int(m.data, f.offset, f.size, value)
    m.structured = True
    m.steps.append(f"{delta:+d} bytes before the index")
    return None


MUTATORS: tuple[tuple[Callable[[Mutant], Any], float], ...] = (
    (_bitflip, 8),
    (_overwrite, 7),
    (_truncate, 3),
    (_extend, 3),
    (_splice, 3),
    (_header_field, 12),
    (_trailer_field, 4),
    (_entry_field, 20),
    (_bucket_slot, 6),
    (_dim_value, 8),
    (_retype, 4),
    (_relayout, 6),
    (_rename, 6),
    (_copy_entry, 4),
    (_metadata, 4),
    (_gap, 2),
)
_MUTATOR_FUNCS = [f for f, _ in MUTATORS]
_MUTATOR_WEIGHTS = [w for _, w in MUTATORS]


# --------------------------------------------------------------------------- AWQ v1 inputs
# reference.open reads a file that starts like safetensors (u64 length, then "{") as an AWQ v1
# checkpoint, with config.json from its folder [V1-1]; these seeds and mutators cover that path.


def st_split(data: bytes | bytearray) -> tuple[Any, bytes] | None:
    """(parsed JSON header, data buffer) of a safetensors file, or None."""
    if len(data) < 8:
        return None
    (length,) = struct.unpack_from("<Q", data)
    if length > len(data) - 8:
        return None
    try:
        return json.loads(bytes(data[8 : 8 + length])), bytes(data[8 + length :])
    except ValueError:
        return None


def st_join(header: Any, buffer: bytes) -> bytes:
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + buffer


ST_VALUES: dict[str, tuple[Any, ...]] = {
    "dtype": (
        "F16",
        "BF16",
        "I32",
        "F32",
        "F64",
        "BOOL",
        "U8",
        "F8_E4M3",
        "XX",
        1,
        None,
        [],
        {"a": 1},
    ),
    "shape": ([], [0], [-1], [1 << 63], [1 << 64], [1.5], "ab", [[1]], [True], [0, 1 << 63], None),
    "data_offsets": (
        [-1, 2],
        [0, 1 << 64],
        [0, 1 << 63],
        "xy",
        [0],
        [0, 2, 4],
        [1.5, 2],
        None,
        [True, 2],
    ),
}


ST_SHAPES = ([0, 1 << 63], [0, (1 << 64) - 1], [0, (1 << 62) + 1], [1 << 62, 0, 2], [1, 0],
             [0], [], [1], [2, 2, 2, 2, 2, 2, 2, 2, 2])  # fmt: skip


def _st_reshape(m: Mutant, header: dict[str, Any], buffer: bytes, name: str) -> bytes | None:
    """A new shape for one tensor; its payload is cut or zero-padded to fit and the later
    payloads move with it, so the file stays consistent (like _dim_value's length follows).
    Returns the new data buffer, or None when the entry is not one to reshape."""
    spec = header[name]
    d = next((d for d in DTYPES if isinstance(spec, dict) and d.name == spec.get("dtype")), None)
    offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
    if d is None or not (isinstance(offsets, list) and len(offsets) == 2):
        return None
    start, end = offsets
    if not (type(start) is int and type(end) is int and 0 <= start <= end <= len(buffer)):
        return None
    shape = list(m.rng.choice(ST_SHAPES))
    count = 1
    for v in shape:
        count *= v
    length = count * d.itemsize
    if length - (end - start) > 1 << 20:
        return None
    payload = (buffer[start:end] + bytes(max(0, length - (end - start))))[:length]
    grow = length - (end - start)
    for other in header.values():
        o = other.get("data_offsets") if isinstance(other, dict) else None
        if other is not spec and isinstance(o, list) and o and all(type(v) is int for v in o):
            other["data_offsets"] = [v + grow if v >= end else v for v in o]
    spec["shape"] = shape
    spec["data_offsets"] = [start, start + length]
    m.steps.append(f"{name}.shape = {shape}, payload and later offsets follow")
    return buffer[:start] + payload + buffer[end:]


def _st_header(m: Mutant) -> None:
    """A structure-aware edit of the safetensors JSON header; the length prefix follows."""
    parsed = st_split(m.data)
    if parsed is None:
        return _overwrite(m)
    header, buffer = parsed
    rng = m.rng
    names = [k for k in header if k != "__metadata__"] if isinstance(header, dict) else []
    how = rng.randrange(9)
    if not names or how == 0:
        header = rng.choice(([], 1, {}, "x", {"__metadata__": {}}, None))
        m.steps.append(f"safetensors header = {header!r}")
    elif how == 1:
        header["__metadata__"] = rng.choice(([1], {"a": 1}, "x", None, {"format": "pt"}))
        m.steps.append(f"__metadata__ = {header['__metadata__']!r}")
    elif how == 2:
        name = rng.choice(names)
        new = rng.choice(("qweight", "scales", "qzeros", "bias", "weight", ""))
        header[name.rpartition(".")[0] + "." + new] = header.pop(name)
        m.steps.append(f"rename {name} -> ...{new}")
    elif how == 3:
        name = rng.choice(names)
        header[name] = rng.choice((1, None, [], "x", {}))
        m.steps.append(f"{name} = {header[name]!r}")
    elif how == 4 and (reshaped := _st_reshape(m, header, buffer, rng.choice(names))):
        buffer = reshaped
    else:
        name = rng.choice(names)
        spec = header[name] if isinstance(header[name], dict) else {}
        key = rng.choice(tuple(ST_VALUES))
        current = spec.get(key)
        if rng.random() < 0.1:
            spec.pop(key, None)
            m.steps.append(f"{name}.{key} removed")
        else:
            values: list[Any] = list(ST_VALUES[key])
            if isinstance(current, list) and all(type(v) is int for v in current):
                values += [
                    current[::-1],
                    [v + 1 for v in current],
                    [v * 2 for v in current],
                    current[:-1],
                    [*current, 1],
                    [v - 1 for v in current],
                ]
            spec[key] = rng.choice(values)
            m.steps.append(f"{name}.{key} = {spec[key]!r} (was {current!r})")
        header[name] = spec
    m.ed.data = bytearray(st_join(header, buffer))
    m.structured = True
    return None


CONFIG_VALUES: dict[str, tuple[Any, ...]] = {
    "bits": (3, 4, 8, 4.0, "4", None, True, 16, -4),
    "group_size": (0, -1, -2, 7, 64, 128, 128.0, "128", True, None, 1 << 40),
    "zero_point": (False, None, 0, "no"),
    "version": ("gemv", "GEMM", 1, None, "marlin"),
    "quant_method": ("gptq", None, 5, "AWQ"),
    "modules_to_not_convert": (None, "lm_head", [1], ["model"], [""], {}, ["q_proj"]),
}


def _config(m: Mutant) -> None:
    """Edit config.json beside an AWQ v1 input: quantisation fields and hidden_size."""
    try:
        config = json.loads(m.config or b"{}")
    except ValueError:
        config = {}
    rng = m.rng
    how = rng.randrange(6)
    if how == 0 or not isinstance(config, dict):
        config = rng.choice(([], 1, {}, {"quantization_config": 1}, "x"))
        m.steps.append(f"config.json = {config!r}")
    elif how == 1:
        config["hidden_size"] = rng.choice((0, "x", 1.5, None, 64, 1 << 63))
        m.steps.append(f"config hidden_size = {config['hidden_size']!r}")
    else:
        q = config.get("quantization_config")
        q = q if isinstance(q, dict) else {}
        key = rng.choice(tuple(CONFIG_VALUES))
        q[key] = rng.choice(CONFIG_VALUES[key])
        config["quantization_config"] = q
        m.steps.append(f"config quantization_config.{key} = {q[key]!r}")
    m.config = json.dumps(config).encode()
    m.structured = True


V1_MUTATORS: tuple[tuple[Callable[[Mutant], Any], float], ...] = (
    (_bitflip, 10),
    (_overwrite, 10),
    (_truncate, 5),
    (_extend, 3),
    (_st_header, 50),
    (_config, 15),
)
_V1_FUNCS = [f for f, _ in V1_MUTATORS]
_V1_WEIGHTS = [w for _, w in V1_MUTATORS]


def v1_seeds() -> list[Seed]:
    """Two AWQ v1 seeds: a tiny AutoAWQ Llama checkpoint, and dense tensors of every dtype."""
    from reference.examples import LlamaShape, write_checkpoint

    shape = LlamaShape(
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=32,
        group_size=64,
        attention_bias=True,
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_checkpoint(Path(tmp) / "ckpt", shape)
        llama = (folder / "model.safetensors").read_bytes()
        config = (folder / "config.json").read_bytes()
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    buffer = b""
    rng = np.random.default_rng(5)
    for d in DTYPES:
        raw = rng.integers(0, 256, 6 * d.itemsize, dtype=np.uint8).tobytes()
        header[f"dense.{d.name}"] = {
            "dtype": d.name,
            "shape": [2, 3],
            "data_offsets": [len(buffer), len(buffer) + len(raw)],
        }
        buffer += raw
    dense = st_join(header, buffer)
    out = []
    for sid, data, cfg in (("v1_llama", llama, config), ("v1_dense", dense, b"{}")):
        parsed = st_split(data)
        names = tuple(k for k in parsed[0] if k != "__metadata__") if parsed else ()
        out.append(Seed(sid, data, names, 8.0, cfg))
    return out


# --------------------------------------------------------------------------- checksums


def _entry_crc(data: bytearray, g: Geometry, i: int) -> None:
    at = g.entry_at(i)
    e = g.entry(data, i)
    name_start = g.names_offset + e["name_offset"]
    dims_start = g.dims_offset + 8 * e["dims_index"]
    name = bytes(data[name_start : name_start + e["name_length"]])
    dims = bytes(data[dims_start : dims_start + 8 * e["ndim"]])
    put_int(
        data,
        at + ENTRY_CRC_OFFSET,
        4,
        crc32c(bytes(data[at : at + ENTRY_CRC_OFFSET]) + name + dims),
    )


def refresh(m: Mutant) -> None:
    """Recompute checksums with FileEditor, sometimes leaving one stale; never fails."""
    mode = m.rng.choices(
        ("full", "no-entries", "no-metadata", "no-trailer", "header-only"), (76, 6, 6, 6, 6)
    )[0]
    ed, g = m.ed, m.geo()
    m.steps.append(f"refresh {mode}")
    with contextlib.suppress(Exception):
        if mode == "header-only":
            put_int(ed.data, HEADER_CRC_OFFSET, 4, crc32c(bytes(ed.data[:HEADER_CRC_OFFSET])))
            return
        entries = mode != "no-entries"
        if entries and g.count > 256 and g.entries_ok():  # only the touched entries: fast
            for i in m.touched:
                if 0 <= i < g.count:
                    _entry_crc(ed.data, g, i)
            entries = False
        ed.refresh(entries=entries, metadata=mode != "no-metadata", trailer=mode != "no-trailer")
        return
    with contextlib.suppress(Exception):  # the editor could not follow the damaged layout
        ed.refresh(entries=False, metadata=False)
        return
    with contextlib.suppress(Exception):
        put_int(ed.data, HEADER_CRC_OFFSET, 4, crc32c(bytes(ed.data[:HEADER_CRC_OFFSET])))
        ed.set_trailer(header_crc=get_int(ed.data, HEADER_CRC_OFFSET, 4)).refresh_trailer_crc()


@dataclass
class Input:
    data: bytes
    config: bytes | None  # config.json to put beside it (AWQ v1 inputs), else none
    base: Seed
    steps: list[str]


def make_input(seeds: Sequence[Seed], seed: int, number: int) -> Input:
    """Input ``number``: deterministic in (seed, number)."""
    rng = random.Random(f"{seed}/{number}")
    base = rng.choices(seeds, [s.weight for s in seeds])[0]
    m = Mutant(FileEditor(base.data), rng, seeds, config=base.config)
    v1 = base.config is not None
    funcs, weights = (_V1_FUNCS, _V1_WEIGHTS) if v1 else (_MUTATOR_FUNCS, _MUTATOR_WEIGHTS)
    for _ in range(rng.choices((1, 2, 3, 4), (50, 25, 15, 10))[0]):
        rng.choices(funcs, weights)[0](m)
    if not v1 and rng.random() < (0.85 if m.structured else 0.25):
        refresh(m)
    return Input(bytes(m.ed.data), m.config, base, m.steps)


# --------------------------------------------------------------------------- the reader path


@dataclass
class Result:
    number: int
    size: int
    outcome: str  # "accepted", "rejected" or "unexpected"
    code: str | None = None  # first FormatError code (open, validate or verify level)
    stage: str = ""
    exc_type: str = ""
    site: str = ""
    message: str = ""
    trace: str = ""
    traced: bool = False  # run under tracemalloc
    peak: int = 0  # tracemalloc peak during the input, bytes
    rss_growth: int = 0  # peak RSS during the input minus RSS before it, bytes
    seconds: float = 0.0
    lazy_after_valid: list[tuple[str, str]] = field(default_factory=list)  # (call, code)


class _State:
    def __init__(self) -> None:
        self.stage = "open"
        self.code: str | None = None
        self.validated = False
        self.lazy: list[tuple[str, str]] = []


def _call(st: _State, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one reader call; FormatError and TensorNotFoundError are expected outcomes."""
    st.stage = stage
    try:
        return fn(*args)
    except FormatError as exc:
        if st.validated:
            st.lazy.append((stage.split("(")[0], exc.code))
        return None
    except TensorNotFoundError:
        return None


def _touch(array: Any) -> None:
    """Read the first and last element of a view (faults its pages in)."""
    if isinstance(array, np.ndarray) and array.size:
        flat = array.reshape(-1)
        _ = flat[0], flat[-1]


def _names_in(reader: Any, hints: Sequence[str]) -> list[str]:
    """Hinted names, plus every name the entries hold (read entry by entry, checks and all)."""
    names = dict.fromkeys(hints)
    record = getattr(reader, "_record", None)
    if record is not None:
        for i in range(min(len(reader), 4096)):
            try:
                raw = record(i).name
            except FormatError:
                continue
            with contextlib.suppress(UnicodeDecodeError):
                names[bytes(raw).decode("utf-8")] = None
    else:
        with contextlib.suppress(FormatError):
            names.update(dict.fromkeys(reader.names()))
    return list(names)


def exercise(path: Path, hints: Sequence[str], st: _State) -> None:
    """The whole reader path over one file."""
    st.stage = "open"
    try:
        reader = reference.open(path)
    except FormatError as exc:
        st.code = exc.code
        return
    try:
        st.stage = "validate"
        try:
            reader.validate()
            st.validated = True
        except FormatError as exc:
            st.code = exc.code
        st.stage = "names"
        names = _names_in(reader, hints)
        for name in names:
            _call(st, f"entry({name!r})", reader.entry, name)
            _touch(_call(st, f"tensor({name!r})", reader.tensor, name))
            _call(st, f"contains({name!r})", reader.__contains__, name)
        for absent in ("", "\ud800", "absent.tensor", *(n + "x" for n in names[:2])):
            st.stage = f"absent({absent!r})"
            if absent not in names:
                _call(st, f"entry({absent!r})", reader.entry, absent)
                _call(st, f"tensor({absent!r})", reader.tensor, absent)
        prefixes = {n[: -len(".qweight")] for n in names if n.endswith(".qweight")}
        prefixes.update(_call(st, "layers", reader.layers) or ())
        for prefix in sorted(prefixes):
            layer = _call(st, f"linear({prefix!r})", reader.linear, prefix)
            if layer is not None:
                _touch(layer.qweight)
            _call(st, f"dequantize({prefix!r})", reader.dequantize, prefix)
        _call(st, "metadata", lambda: reader.metadata)
        if isinstance(reader, reference.Reader):
            infos = _call(st, "entries", reader.entries) or []
            for _info, view in _call(st, "tensors", lambda: list(reader.tensors())) or []:
                _touch(view)
            for info in infos[:8]:
                _call(
                    st, f"read_into({info.name!r})", reader.read_into, info, bytearray(info.length)
                )
        st.stage = "verify"
        try:
            reader.verify()
        except FormatError as exc:
            if st.code is None:
                st.code = exc.code
    finally:
        stage, st.stage = st.stage, "close"
        reader.close()
        st.stage = stage


def _site(exc: BaseException) -> str:
    """file:line (function) of the innermost frame of this project, else the innermost one."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if str(ROOT) in f.filename and "bench/fuzz.py" not in f.filename]
    f = (ours or frames or [None])[-1]
    if f is None:
        return "?"
    return f"{os.path.relpath(f.filename, ROOT)}:{f.lineno} ({f.name})"


def _rss_status() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes, from /proc (0, 0 where there is none)."""
    rss = hwm = 0
    with contextlib.suppress(OSError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    return rss, hwm


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def run_one(path: Path, number: int, data: bytes, hints: Sequence[str], trace: bool) -> Result:
    """One input; peak memory is the growth of the peak RSS during it (VmHWM reset before it,
    else ru_maxrss growth) and, when ``trace``, the tracemalloc peak."""
    path.write_bytes(data)
    st = _State()
    exact = _reset_peak_rss()
    rss0 = _rss_status()[0] if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if trace:
        tracemalloc.start(1)
    started = time.perf_counter()
    result = Result(number, len(data), "rejected")
    try:
        exercise(path, hints, st)
    except Exception as exc:  # the finding: anything but FormatError / TensorNotFoundError
        result.outcome = "unexpected"
        result.exc_type = type(exc).__name__
        result.site = _site(exc)
        result.message = str(exc)[:300]
        result.trace = traceback.format_exc(limit=12)[-4000:]
    result.seconds = time.perf_counter() - started
    if trace:
        result.traced = True
        result.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    peak_rss = (
        _rss_status()[1] if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    result.rss_growth = max(0, peak_rss - rss0)
    result.stage = st.stage
    result.code = st.code
    result.lazy_after_valid = st.lazy[:4]
    if result.outcome != "unexpected":
        result.outcome = "accepted" if st.code is None else "rejected"
    return result


# --------------------------------------------------------------------------- seeds


def _names_of(data: bytes) -> tuple[str, ...]:
    names = []
    with contextlib.suppress(Exception):
        g = Geometry.of(bytearray(data))
        if g.entries_ok():
            buf = bytearray(data)
            for i in range(g.count):
                r = g.name_range(buf, i)
                if r is not None:
                    with contextlib.suppress(UnicodeDecodeError):
                        names.append(bytes(buf[r[0] : r[1]]).decode("utf-8"))
    return tuple(names)


def load_seeds(v1: bool = True) -> list[Seed]:
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    seeds = []
    for v in manifest["vectors"]:
        data = (MANIFEST.parent / v["file"]).read_bytes()
        names = _names_of(data)
        weight = (3.0 if v["expect"] != "reject" else 1.0) / (1 + len(names) / 300)
        seeds.append(Seed(v["id"], data, names, weight))
    if v1:
        seeds += v1_seeds()
    return seeds


# --------------------------------------------------------------------------- workers


@dataclass
class Config:
    seed: int
    timeout: float
    trace_every: int  # tracemalloc on every N-th input (0: never); it slows Python code 3-15x
    memory_limit: int

    def traced(self, number: int) -> bool:
        return bool(self.trace_every) and number % self.trace_every == 0

    def time_limit(self, number: int) -> float:
        return self.timeout * (TRACE_SLOWDOWN if self.traced(number) else 1)


def _worker(conn: mpc.Connection, seeds: list[Seed], config: Config, run_dir: Path) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    warnings.simplefilter("ignore", RuntimeWarning)  # inf/NaN scales overflow in dequantize
    if config.memory_limit:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (config.memory_limit, config.memory_limit))
    parent = os.getppid()
    folder = run_dir / str(os.getpid())  # the parent removes run_dir, even after a SIGKILL
    folder.mkdir()
    path = folder / "input.awq2"
    try:
        while True:
            while not conn.poll(1.0):  # other workers hold our pipe too: watch the parent
                if os.getppid() != parent:
                    return
            number = conn.recv()
            if number is None:
                break
            item = make_input(seeds, config.seed, number)
            beside = folder / "config.json"
            if item.config is None:
                beside.unlink(missing_ok=True)
            else:
                beside.write_bytes(item.config)
            conn.send(run_one(path, number, item.data, item.base.names, config.traced(number)))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Worker:
    def __init__(self, ctx: Any, seeds: list[Seed], config: Config, run_dir: Path) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker, args=(child, seeds, config, run_dir), daemon=True
        )
        self.process.start()
        child.close()
        self.number: int | None = None
        self.deadline = 0.0

    def send(self, number: int, timeout: float) -> None:
        self.number = number
        self.deadline = time.monotonic() + timeout
        self.conn.send(number)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            os.kill(self.process.pid, signal.SIGKILL)  # this worker only, by its pid
        self.process.join(5)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conn.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.kill()


# --------------------------------------------------------------------------- the run


@dataclass
class Summary:
    inputs: int = 0
    accepted: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    unexpected: dict[str, list[Result]] = field(default_factory=dict)
    deaths: list[tuple[int, str]] = field(default_factory=list)
    timeouts: list[int] = field(default_factory=list)
    over_memory: list[Result] = field(default_factory=list)
    lazy: Counter[tuple[str, str]] = field(default_factory=Counter)
    lazy_example: dict[tuple[str, str], int] = field(default_factory=dict)
    peak: Result | None = None
    rss: Result | None = None
    traced: int = 0
    slowest: Result | None = None
    busy: float = 0.0  # seconds the workers spent inside inputs
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.unexpected or self.deaths or self.timeouts or self.over_memory)

    def add(self, r: Result) -> None:
        self.inputs += 1
        if r.outcome == "unexpected":
            self.unexpected.setdefault(f"{r.exc_type} at {r.site}", []).append(r)
        elif r.outcome == "accepted":
            self.accepted += 1
        else:
            self.codes[r.code or "?"] += 1
        for key in r.lazy_after_valid:
            self.lazy[key] += 1
            self.lazy_example.setdefault(key, r.number)
        if r.peak > r.size + MEMORY_SLACK or r.rss_growth > r.size + MEMORY_SLACK:
            self.over_memory.append(r)
        self.traced += r.traced
        self.busy += r.seconds
        if self.slowest is None or r.seconds > self.slowest.seconds:
            self.slowest = r
        if self.peak is None or r.peak > self.peak.peak:
            self.peak = r
        if self.rss is None or r.rss_growth > self.rss.rss_growth:
            self.rss = r


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def save_input(
    folder: Path | None, seeds: list[Seed], seed: int, number: int, kind: str, detail: str
) -> str:
    if folder is None:
        return ""
    folder.mkdir(parents=True, exist_ok=True)
    item = make_input(seeds, seed, number)
    stem = folder / f"{kind}-{seed}-{number}"
    stem.with_suffix(".awq2").write_bytes(item.data)
    if item.config is not None:
        stem.with_suffix(".config.json").write_bytes(item.config)
    recipe = "\n".join(f"  {s}" for s in item.steps)
    stem.with_suffix(".txt").write_text(
        f"input {number} of --seed {seed}: {kind}\nbase: {item.base.id}\nmutations:\n{recipe}\n\n"
        f"{detail}\n",
        encoding="utf-8",
    )
    return str(stem.with_suffix(".awq2"))


def fuzz(args: argparse.Namespace, seeds: list[Seed]) -> Summary:
    config = Config(args.seed, args.timeout, args.trace_every, args.memory_limit << 20)
    ctx = mp.get_context("fork")
    shm = Path("/dev/shm")
    run_dir = Path(tempfile.mkdtemp(prefix="awq2-fuzz-", dir=shm if shm.is_dir() else None))
    workers = [Worker(ctx, seeds, config, run_dir) for _ in range(args.workers)]
    summary = Summary()
    saved: Counter[str] = Counter()
    crash_dir = Path(args.save_crashes) if args.save_crashes else None
    started = time.monotonic()
    stop_at = started + args.seconds if args.seconds else None
    next_number, last_report = 0, started

    def more() -> bool:
        if args.inputs is not None and next_number >= args.inputs:
            return False
        return stop_at is None or time.monotonic() < stop_at

    def replace(w: Worker) -> Worker:
        w.kill()
        fresh = Worker(ctx, seeds, config, run_dir)
        workers[workers.index(w)] = fresh
        return fresh

    try:
        while True:
            for w in workers:
                if w.number is None and more():
                    w.send(next_number, config.time_limit(next_number))
                    next_number += 1
            busy = [w for w in workers if w.number is not None]
            if not busy:
                break
            wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready = mpc.wait([w.conn for w in busy], timeout=wait)
            for w in busy:
                number = w.number
                assert number is not None
                if w.conn in ready:
                    try:
                        r: Result = w.conn.recv()
                    except (EOFError, OSError):
                        w.process.join(5)
                        code = w.process.exitcode
                        why = f"worker died, exit code {code}"
                        if code is not None and code < 0:
                            why += f" ({signal.Signals(-code).name})"
                        where = save_input(crash_dir, seeds, args.seed, number, "death", why)
                        summary.deaths.append((number, why + (f", saved {where}" if where else "")))
                        summary.inputs += 1
                        replace(w)
                        continue
                    w.number = None
                    summary.add(r)
                    key = f"{r.exc_type} at {r.site}"
                    if r.outcome == "unexpected" and saved[key] < 3:
                        saved[key] += 1
                        save_input(
                            crash_dir,
                            seeds,
                            args.seed,
                            number,
                            "crash",
                            f"{key}\nstage: {r.stage}\n{r.trace}",
                        )
                elif time.monotonic() >= w.deadline:
                    summary.timeouts.append(number)
                    summary.inputs += 1
                    save_input(
                        crash_dir,
                        seeds,
                        args.seed,
                        number,
                        "timeout",
                        f"over {config.time_limit(number)} s",
                    )
                    replace(w)
            now = time.monotonic()
            if not args.quiet and now - last_report >= args.progress:
                last_report = now
                rate = summary.inputs / (now - started)
                bad = sum(map(len, summary.unexpected.values())) + len(summary.deaths)
                print(
                    f"  ... {summary.inputs} inputs, {rate:.0f}/s, {summary.accepted} accepted, "
                    f"{bad} unexpected, {len(summary.timeouts)} timeouts",
                    file=sys.stderr,
                    flush=True,
                )
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        for w in workers:
            w.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    summary.seconds = time.monotonic() - started
    return summary


def report(s: Summary, args: argparse.Namespace, seeds: int) -> None:
    rate = s.inputs / s.seconds if s.seconds else 0.0
    print(
        f"fuzz: {s.inputs} inputs from {seeds} seed vectors, --seed {args.seed}, "
        f"{args.workers} workers, {s.seconds:.1f} s" + (" (interrupted)" if s.interrupted else "")
    )
    print(f"  accepted:              {s.accepted}")
    print(f"  rejected:              {sum(s.codes.values())}")
    for code, n in s.codes.most_common():
        print(f"    {code:<24} {n}")
    n_unexpected = sum(map(len, s.unexpected.values()))
    print(f"  unexpected exceptions: {n_unexpected}")
    for key, results in sorted(s.unexpected.items(), key=lambda kv: -len(kv[1])):
        r = results[0]
        print(f"    {key}: {len(results)} inputs, e.g. input {r.number} ({r.stage}): {r.message}")
    print(f"  worker deaths:         {len(s.deaths)}")
    for number, why in s.deaths[:10]:
        print(f"    input {number}: {why}")
    print(
        f"  timeouts (> {args.timeout:g} s):   {len(s.timeouts)}"
        + (f"  e.g. inputs {s.timeouts[:5]}" if s.timeouts else "")
    )
    print(f"  over memory (> size + {_mib(MEMORY_SLACK)}): {len(s.over_memory)}")
    for r in s.over_memory[:5]:
        print(
            f"    input {r.number}: {_mib(r.size)} file, tracemalloc peak {_mib(r.peak)}, "
            f"ru_maxrss growth {_mib(r.rss_growth)}"
        )
    if s.rss is not None:
        print(
            f"  peak memory:           RSS growth {_mib(s.rss.rss_growth)} (input "
            f"{s.rss.number}, {_mib(s.rss.size)} file; every input)"
        )
    if s.peak is not None and s.traced:
        print(
            f"                         tracemalloc {_mib(s.peak.peak)} (input {s.peak.number}, "
            f"{_mib(s.peak.size)} file; {s.traced} inputs traced)"
        )
    if s.lazy:
        print("  validated, then rejected by a later call (information):")
        for (call, code), n in s.lazy.most_common(10):
            print(f"    {call} -> {code}: {n} (e.g. input {s.lazy_example[(call, code)]})")
    if s.slowest is not None:
        print(
            f"  slowest input:         {s.slowest.seconds:.2f} s (input {s.slowest.number}, "
            f"{_mib(s.slowest.size)} file{', traced' if s.slowest.traced else ''}); "
            f"mean {s.busy / max(s.inputs, 1) * 1e3:.1f} ms"
        )
    print(f"  inputs/s:              {rate:.1f}")
    print("  result:                " + ("FAIL" if s.failed else "ok"))


def replay(args: argparse.Namespace) -> int:
    """Write input --replay N to a file and run it here, in this process (for debugging)."""
    seeds = load_seeds(not args.v2_only)
    item = make_input(seeds, args.seed, args.replay)
    out = Path(args.out or f"fuzz-input-{args.seed}-{args.replay}.awq2")
    out.write_bytes(item.data)
    if item.config is not None:
        (out.parent / "config.json").write_bytes(item.config)
        print(f"wrote {out.parent / 'config.json'} too (AWQ v1 input)")
    print(
        f"input {args.replay} (--seed {args.seed}): base {item.base.id}, {len(item.data)} bytes "
        f"-> {out}"
    )
    for s in item.steps:
        print(f"  {s}")
    st = _State()
    try:
        exercise(out, item.base.names, st)
    except Exception:
        traceback.print_exc()
        print(f"stage: {st.stage}")
        return 1
    print("accepted" if st.code is None else f"rejected: {st.code}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/fuzz.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--inputs", type=int, default=None, help="stop after N inputs")
    parser.add_argument("--seconds", type=float, default=None, help="stop after S seconds")
    parser.add_argument("--seed", type=int, default=0, help="mutation seed (default 0)")
    parser.add_argument("--save-crashes", metavar="DIR", help="write failing inputs here")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per input")
    parser.add_argument(
        "--memory-limit",
        type=int,
        default=4096,
        metavar="MIB",
        help="RLIMIT_AS of each worker (0: none)",
    )
    parser.add_argument(
        "--trace-every",
        type=int,
        default=8,
        metavar="N",
        help="tracemalloc peak on every N-th input (1: all, 0: none; default 8); "
        "every input gets its peak RSS",
    )
    parser.add_argument("--progress", type=float, default=30.0, help="seconds between lines")
    parser.add_argument(
        "--v2-only",
        action="store_true",
        help="no AWQ v1 (safetensors) seeds, only the conformance vectors",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--replay", type=int, metavar="N", help="rebuild and run input N here")
    parser.add_argument("--out", help="file for --replay")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args)
    if args.inputs is None and args.seconds is None:
        args.inputs = 10_000
    # stop cleanly, with the summary, on Ctrl-C or SIGTERM (a CI job cancelled), even when
    # started in the background by a shell that made SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    seeds = load_seeds(not args.v2_only)
    summary = fuzz(args, seeds)
    report(summary, args, len(seeds))
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
