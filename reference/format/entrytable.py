"""The whole entry table checked at once: the fast path of
:meth:`reference.format.index.Index.infos`.

Listing a file's tensors runs every check local to an entry on every entry [LIM-3, LIM-4,
ENT-1, ENT-4..7, ENT-9, NAME-1, NAME-2, IDX-7, LAY-1..6].  :meth:`Index.record` and
:meth:`Index.info` do that one entry at a time, in the spec's order, each failure with its
own error; for a model's few hundred entries that walk took 7 ms, a tenth of reading the
1B benchmark's 778 MB from the page cache.

:func:`checked_infos` runs the same checks on the whole table at once (flags, limits and
bounds as NumPy columns, the name hashes by :func:`reference.ground.hashing.fnv1a_64_many`) and
returns the infos when every entry passes every check; otherwise None, and the caller walks
the entries one by one, which finds the first failure and raises it.  So this module only
decides that a table is good; which error a bad table gets is never decided here.  The
payload and layout rules are :mod:`reference.format.rules`' own functions, called per entry (the
extent and layout checks once per distinct set of the fields they read).
``tests/test_entrytable.py`` runs both paths on every conformance vector and on mutated
tables.

It reads each section once, as the caller's ``bytes``: parsed and checksummed from the same
copy [RD-4].
"""

from __future__ import annotations

import numpy as np

from reference.format import rules
from reference.ground.errors import FormatError
from reference.ground.hashing import fnv1a_64_many
from spec.constants import MAX_DIMS, MAX_NAME_LENGTH, SLAB_OFFSET
from spec.geometry import DIM_SIZE, entry_checksum
from spec.schema import ENTRY_DTYPE, ENTRY_SIZE

#: The entry fields the per-entry pass reads, in the order it unpacks them.
_FIELDS = (
    "name_offset",
    "name_length",
    "dims_index",
    "ndim",
    "dtype",
    "layout",
    "data_offset",
    "data_length",
    "data_crc",
    "bits",
    "group_size",
    "k",
    "n",
    "entry_crc",
)


def checked_infos(
    entries: bytes,
    names: bytes,
    dims: bytes,
    *,
    slab_end: int,
    name_base: int = 0,
    dims_base: int = 0,
    collect: bool = True,
) -> list[rules.TensorInfo] | None:
    """Every entry's :class:`TensorInfo`, in order, when all pass every local check; None
    when any fails one (the caller's entry-by-entry walk then reports it).  With ``collect``
    false, an empty list when all pass: checked, and nothing made per entry.

    ``entries`` holds whole entry records (all of them, or a run of them), ``names`` the
    name pool's bytes from ``name_base`` on, ``dims`` the dims section's from dimension
    ``dims_base`` on (the whole sections by default); a name or dims outside what was given
    is a failure.  ``slab_end`` is the header's ``index_offset``."""
    infos: list[rules.TensorInfo] = []
    memo: dict[tuple[object, ...], str] = {}  # each rule once per distinct set of fields
    for start in range(0, len(entries), _CHUNK * ENTRY_SIZE):  # bounded temporaries
        part = entries[start : start + _CHUNK * ENTRY_SIZE]
        into = infos if collect else None
        done = _checked(part, names, dims, slab_end, name_base, dims_base, memo, into)
        if not done:
            return None
    return infos


#: Entries whose columns are converted to Python values at a time (about 0.3 MB of them).
_CHUNK = 1024


def _checked(
    entries: bytes,
    names: bytes,
    dims: bytes,
    slab_end: int,
    name_base: int,
    dims_base: int,
    memo: dict[tuple[object, ...], str],
    infos: list[rules.TensorInfo] | None,
) -> bool:
    """:func:`checked_infos` of a run of at most ``_CHUNK`` entries, appended to ``infos``
    (unless None)."""
    table = np.frombuffer(entries, ENTRY_DTYPE)
    if not _bounds_hold(table, name_base, len(names), dims_base, len(dims) // DIM_SIZE):
        return False
    starts = table["name_offset"].astype(np.int64) - name_base
    pool = np.frombuffer(names, np.uint8)
    if (fnv1a_64_many(pool, starts, table["name_length"]) != table["name_hash"]).any():
        return False  # [IDX-7]
    shapes = np.frombuffer(dims, "<u8").tolist()
    columns = [table[field].tolist() for field in _FIELDS]
    try:
        for i, row in enumerate(zip(*columns, strict=True)):
            (name_at, name_length, dims_at, ndim, dtype_code, layout_code,
             offset, length, data_crc, bits, group_size, k, n, entry_crc) = row  # fmt: skip
            name_at -= name_base
            dims_at -= dims_base
            name = names[name_at : name_at + name_length]
            shape = tuple(shapes[dims_at : dims_at + ndim])
            record = memoryview(entries)[i * ENTRY_SIZE : (i + 1) * ENTRY_SIZE]
            packed = dims[dims_at * DIM_SIZE : (dims_at + ndim) * DIM_SIZE]
            if entry_checksum(record, name, packed) != entry_crc:  # [ENT-9]
                return False
            text = name.decode("utf-8")  # [NAME-2]
            extent = ("extent", shape, dtype_code, length)
            dtype = memo.get(extent)
            if dtype is None:
                dtype = memo[extent] = rules.check_extent(*extent[1:], offset=0)
            rules.check_placement(
                offset, length, slab_offset=SLAB_OFFSET, slab_end=slab_end, offset=0
            )
            layout_key = (layout_code, dtype, shape, bits, group_size, k, n)
            layout = memo.get(layout_key)
            if layout is None:
                layout = memo[layout_key] = rules.check_layout(*layout_key, offset=0)
            if infos is not None:
                info = rules.TensorInfo(
                    text, dtype, shape, layout, offset, length, data_crc, bits, group_size, k, n
                )
                infos.append(info)
    except (FormatError, UnicodeDecodeError):
        return False
    return True


def _bounds_hold(
    table: np.ndarray, name_base: int, names_length: int, dims_base: int, dims_count: int
) -> bool:
    """Flags, limits and section bounds of every entry, as columns [ENT-1, NAME-1, LIM-3,
    LIM-4]: a name inside the ``names_length`` bytes of the pool given (from ``name_base``),
    dims inside the ``dims_count`` given (from ``dims_base``) [ENT-2, ENT-3]."""
    name_offset, dims_index = table["name_offset"], table["dims_index"]
    name_length, ndim = table["name_length"], table["ndim"]
    ok = (table["flags"] == 0) & (name_length >= 1) & (name_length <= MAX_NAME_LENGTH)
    ok &= ndim <= MAX_DIMS
    # Compared before any arithmetic, so that nothing wraps: both offsets are unsigned.
    ok &= (name_offset >= name_base) & (name_offset <= name_base + names_length)
    ok &= (dims_index >= dims_base) & (dims_index <= dims_base + dims_count)
    if not ok.all():
        return False
    name_end = name_offset.astype(np.int64) - name_base + name_length
    dims_end = dims_index.astype(np.int64) - dims_base + ndim
    return bool(((name_end <= names_length) & (dims_end <= dims_count)).all())
