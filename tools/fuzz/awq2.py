"""Mutators of AWQ-v2 files: structure-aware edits of every header, trailer, entry and
bucket-table field, of the dims, the names and the metadata, and checksum refreshes.

Field values are boundary values (0, 1, max, max + 1, the top bit, small negatives stored as
unsigned, each limit and limit + 1, the other entries' values); composite edits keep related
fields consistent (a dimension and the length, dtype and length, layout and quantisation
fields, a name and its hash, a resized metadata document and the index length, a 64 KiB block
inserted before the index).  :func:`refresh` then recomputes the checksums with
``tools.vectors.surgery.FileEditor`` (sometimes leaving one stale) so that inputs get past the
CRCs into the deep checks.  Where the sections are comes from :class:`tools.fuzz.view.FileView`
(:mod:`spec.geometry`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from spec.algorithms import bucket_bits_for, crc32c, fnv1a_64
from spec.constants import (
    ALIGNMENT,
    MAX_BUCKET_BITS,
    MAX_BUCKET_LENGTH,
    MAX_DIMS,
    MAX_METADATA_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TENSORS,
    SLAB_OFFSET,
)
from spec.geometry import DIM_SIZE
from spec.registry import DTYPE_BY_CODE, DTYPES, LAYOUTS
from spec.schema import ENTRY_SIZE, HEADER_CRC_OFFSET, HEADER_SIZE, TRAILER_SIZE
from tools.fuzz.mutant import (
    U64,
    Mutant,
    bitflip,
    extend,
    overwrite,
    splice,
    truncate,
)
from tools.fuzz.view import (
    ENTRY,
    ENTRY_BY_NAME,
    HEADER,
    HEADER_BY_NAME,
    TRAILER,
    Field,
    FileView,
    get_int,
    put_int,
)

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


def _pick_value(m: Mutant, f: Field, current: int, extras: list[int]) -> int:
    if extras and m.rng.random() < 0.5:
        return m.rng.choice(extras)
    return m.rng.choice(boundary_values(f.size, f.kind == "i", current))


def field_extras(name: str, view: FileView, current: int, e: dict[str, int] | None) -> list[int]:
    """Values that sit on a rule's edge for one named field (``e``: the entry's fields)."""
    c, size, h, geo = view.count, view.size, view.header, view.geo
    entry = e or {}
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
            view.index_offset + 8,
            SLAB_OFFSET - ALIGNMENT,
        ],
        "index_length": [0, size - TRAILER_SIZE - view.index_offset, h["index_length"] + 8],
        "file_size": [size, size - 1, size + 1, 0, HEADER_SIZE + TRAILER_SIZE],
        "tensor_count": [MAX_TENSORS, MAX_TENSORS + 1, c + 1, c - 1, 0, 1 << 40, 1 << 24],
        "dims_count": [c * MAX_DIMS, c * MAX_DIMS + 1, h["dims_count"] + 1, 0],
        "names_length": [c * MAX_NAME_LENGTH, c * MAX_NAME_LENGTH + 1, 1 << 60, 0],
        "metadata_length": [
            MAX_METADATA_LENGTH,
            MAX_METADATA_LENGTH + 1,
            0,
            geo.metadata.length + 1,
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
            view.index_offset,
            view.index_offset - ALIGNMENT,
            size,
            U64 - ALIGNMENT + 1,
            1 << 63,
        ],
        "data_length": [0, view.index_offset - entry.get("data_offset", 0), 1 << 63, U64],
        "name_offset": [geo.names.length, geo.names.length - entry.get("name_length", 0) + 1],
        "dims_index": [h["dims_count"], h["dims_count"] - entry.get("ndim", 0) + 1],
    }
    return extras.get(name, [])


def _header_field(m: Mutant) -> None:
    f = m.rng.choice(HEADER)
    g = m.view()
    if f.kind == "V":
        blob = m.rng.choice((bytes(f.size), b"\x01" * f.size, m.rng.randbytes(f.size)))
        m.data[f.offset : f.offset + f.size] = blob
        m.steps.append(f"header.{f.name} = {blob.hex()}")
    else:
        current = get_int(m.data, f.offset, f.size)
        value = _pick_value(m, f, current, field_extras(f.name, g, current, None))
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
        value = _pick_value(m, f, current, field_extras(f.name, m.view(), current, None))
        put_int(m.data, at, f.size, value)
        m.steps.append(f"trailer.{f.name} = {value % (1 << 8 * f.size):#x} (was {current:#x})")
    m.structured = True


def _pick_entry(m: Mutant, g: FileView) -> int | None:
    if not g.entries_ok():
        return None
    return m.rng.randrange(g.count)


def _entry_field(m: Mutant) -> None:
    g = m.view()
    i = _pick_entry(m, g)
    if i is None:
        return _header_field(m)
    e = g.entry(m.data, i)
    f = m.rng.choice(ENTRY)
    current = e[f.name]
    extras = field_extras(f.name, g, current, e)
    others = [g.entry(m.data, j)[f.name] for j in range(min(g.count, 16))]
    value = m.rng.choice(others) if m.rng.random() < 0.15 else _pick_value(m, f, current, extras)
    put_int(m.data, g.geo.entry_offset(i) + f.offset, f.size, value)
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}].{f.name} = {value} (was {current})")
    return None


def _bucket_slot(m: Mutant) -> None:
    g = m.view()
    if not g.table_ok():
        return _header_field(m)
    table = np.frombuffer(m.data, "<u4", g.geo.bucket_slots, g.index_offset)
    how = m.rng.randrange(4)
    if how == 0:  # one slot to a boundary value
        slot = m.rng.randrange(g.geo.bucket_slots)
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
        put_int(m.data, g.bucket_at(slot), 4, value)
        m.steps.append(f"bucket[{slot}] = {value % (1 << 32)} (was {current})")
    elif how == 1:  # move one boundary by one: an entry changes bucket
        slot = m.rng.randrange(1, g.geo.bucket_slots) if g.geo.bucket_slots > 1 else 0
        delta = m.rng.choice((-1, 1))
        put_int(m.data, g.bucket_at(slot), 4, int(table[slot]) + delta)
        m.steps.append(f"bucket[{slot}] {delta:+d}")
    elif how == 2:  # one bucket of length L: every slot after `slot` moved to the end
        slot = m.rng.randrange(g.geo.bucket_slots)
        length = m.rng.choice((MAX_BUCKET_LENGTH - 1, MAX_BUCKET_LENGTH, MAX_BUCKET_LENGTH + 1))
        start = int(table[slot])
        for s in range(slot + 1, g.geo.bucket_slots):
            put_int(m.data, g.bucket_at(s), 4, min(start + length, g.count))
        m.steps.append(f"bucket {slot} spans {length} entries")
    else:  # every entry in one bucket
        slot = m.rng.randrange(g.geo.bucket_slots)
        for s in range(g.geo.bucket_slots):
            put_int(m.data, g.bucket_at(s), 4, 0 if s <= slot else g.count)
        m.steps.append(f"all entries in bucket {slot}")
    m.structured = True
    return None


def _itemsize(code: int) -> int:
    d = DTYPE_BY_CODE.get(code)
    return d.itemsize if d else 1


def _set_length_from_shape(m: Mutant, g: FileView, i: int, shape: Sequence[int]) -> None:
    e = g.entry(m.data, i)
    count = 1
    for d in shape:
        count *= d
    f = ENTRY_BY_NAME["data_length"]
    put_int(m.data, g.geo.entry_offset(i) + f.offset, f.size, count * _itemsize(e["dtype"]))


def _dim_value(m: Mutant) -> None:
    g = m.view()
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
    put_int(m.data, start + DIM_SIZE * j, DIM_SIZE, value)
    dims[j] = value % (1 << 64)
    keep = m.rng.random() < 0.6
    if keep:  # keep data_length consistent, so the deeper checks run
        _set_length_from_shape(m, g, i, dims)
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}] dim {j} = {value} ({'length follows' if keep else 'length kept'})")
    return None


def _retype(m: Mutant) -> None:
    g = m.view()
    i = _pick_entry(m, g)
    found = None if i is None else g.dims_of(m.data, i)
    if i is None or found is None:
        return _entry_field(m)
    code = m.rng.choice([d.code for d in DTYPES])
    put_int(m.data, g.geo.entry_offset(i) + ENTRY_BY_NAME["dtype"].offset, 1, code)
    _set_length_from_shape(m, g, i, found[1])
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}].dtype = {code}, length follows")
    return None


def _relayout(m: Mutant) -> None:
    """Give an entry a layout and quantisation fields that fit (or nearly fit) its shape."""
    g = m.view()
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
    e_at = g.geo.entry_offset(i)
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
    g = m.view()
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
        f = ENTRY_BY_NAME["name_hash"]
        put_int(m.data, g.geo.entry_offset(i) + f.offset, f.size, fnv1a_64(bytes(name)))
    m.touched.add(i)
    m.structured = True
    m.steps.append(f"entry[{i}] name = {bytes(name)[:40]!r}")
    return None


def _copy_entry(m: Mutant) -> None:
    """Copy placement fields from another entry (overlaps, shared payloads) or swap records."""
    g = m.view()
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
            src = g.geo.entry_offset(j) + f.offset
            put_int(m.data, g.geo.entry_offset(i) + f.offset, f.size, get_int(m.data, src, f.size))
        m.steps.append(f"entry[{i}] takes {'/'.join(names)} of entry[{j}]")
    else:
        a, b = g.geo.entry_offset(i), g.geo.entry_offset(j)
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
    g = m.view()
    if not g.inside(g.geo.metadata.offset, g.geo.metadata.length):
        return _header_field(m)
    doc = m.rng.choice(METADATA_DOCS)
    end = g.geo.metadata.offset + g.geo.metadata.length
    if m.rng.random() < 0.4 and g.geo.metadata.length:
        blob = (doc + b" " * g.geo.metadata.length)[: g.geo.metadata.length]
        m.data[g.geo.metadata.offset : end] = blob
        m.steps.append(f"metadata overwritten with {doc[:30]!r}...")
    elif end == len(m.data) - TRAILER_SIZE:
        m.data[g.geo.metadata.offset : end] = doc
        grow = len(doc) - g.geo.metadata.length
        for name, value in (
            ("metadata_length", len(doc)),
            ("index_length", g.header["index_length"] + grow),
            ("file_size", len(m.data)),
        ):
            f = HEADER_BY_NAME[name]
            put_int(m.data, f.offset, f.size, value)
        m.steps.append(f"metadata replaced by {len(doc)} bytes {doc[:30]!r}...")
    m.structured = True
    return None


def _gap(m: Mutant) -> None:
    """Insert (or remove) a 64 KiB block before the index, and move the index pointers."""
    g = m.view()
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
    (bitflip, 8),
    (overwrite, 7),
    (truncate, 3),
    (extend, 3),
    (splice, 3),
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
FUNCS = [f for f, _ in MUTATORS]
WEIGHTS = [w for _, w in MUTATORS]


# --------------------------------------------------------------------------- checksums


def refresh(m: Mutant) -> None:
    """Recompute checksums with FileEditor, sometimes leaving one stale; never fails."""
    mode = m.rng.choices(
        ("full", "no-entries", "no-metadata", "no-trailer", "header-only"), (76, 6, 6, 6, 6)
    )[0]
    ed, g = m.ed, m.view()
    m.steps.append(f"refresh {mode}")
    with contextlib.suppress(Exception):
        if mode == "header-only":
            put_int(ed.data, HEADER_CRC_OFFSET, 4, crc32c(bytes(ed.data[:HEADER_CRC_OFFSET])))
            return
        entries = mode != "no-entries"
        if entries and g.count > 256 and g.entries_ok():  # only the touched entries: fast
            for i in m.touched:
                if 0 <= i < g.count:
                    ed.refresh_entry_crc(i)
            entries = False
        ed.refresh(entries=entries, metadata=mode != "no-metadata", trailer=mode != "no-trailer")
        return
    with contextlib.suppress(Exception):  # the editor could not follow the damaged layout
        ed.refresh(entries=False, metadata=False)
        return
    with contextlib.suppress(Exception):
        put_int(ed.data, HEADER_CRC_OFFSET, 4, crc32c(bytes(ed.data[:HEADER_CRC_OFFSET])))
        ed.set_trailer(header_crc=get_int(ed.data, HEADER_CRC_OFFSET, 4)).refresh_trailer_crc()
