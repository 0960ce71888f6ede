"""Full validation of an open AWQ-v2 file, in the order the spec fixes [RD-2].

The opening checks [RD-1] have already passed when this runs.  Then:

1. index checksum [IDX-4];
2. bucket table [IDX-5, LIM-6];
3. every entry, in index order: bounds, checksum, fields, name, hash, bucket and
   order, canonical packing of names and dims, shape, length, layout, slab bounds
   [ENT-*, NAME-*, IDX-6..8, LAY-*, SLAB-2, SLAB-3];
4. layers: every quantised entry belongs to one whole layer that agrees [LAY-7], and a
   layer's bias fits it [LAY-10];
5. payload placement: overlap, then packing [SLAB-4, SLAB-5];
6. padding [PAD-1..4];
7. metadata [META-1..4, LIM-5].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from reference.format.entrytable import checked_infos
from reference.format.index import Index
from reference.format.rules import QWEIGHT_LAYOUTS, TensorInfo, check_layers
from reference.ground.errors import checksum_mismatch, field_error, over_limit
from reference.ground.hashing import buckets_of
from spec.algorithms import align_up, crc32c
from spec.constants import ALIGNMENT, MAX_BUCKET_LENGTH, SLAB_OFFSET
from spec.registry import DTYPE_BY_NAME, LAYOUT_BY_NAME, LAYOUTS, SCALE_DTYPES
from spec.schema import ENTRY_DTYPE, ENTRY_FIELD_OFFSET, HEADER_FIELD_OFFSET, HEADER_SIZE

#: The roles a quantised layer's parts are named by (``<prefix>.<role>``), numbered from 1 in
#: the order LAY-7 looks them up; 0 is any other name.
PARTS = ("qweight", "scales", "qzeros")
#: Suffixes the entry pass notes, by code: the three parts, then ``bias`` [LAY-10].
SUFFIXES = (*PARTS, "bias")
BIAS = len(SUFFIXES)
_PART_CODE = {part.encode(): code for code, part in enumerate(SUFFIXES, 1)}
#: By layout code: the part code a quantised layout's entry must be named by (0: DENSE), and
#: the layout codes its layer's qweight, scales and qzeros must have [LAY-7].
_ROLE_OF_LAYOUT = np.zeros(256, np.uint8)
_FAMILY_LAYOUTS = np.zeros((256, len(PARTS)), np.int16)
for _layout in LAYOUTS:
    if _layout.quantized:
        _ROLE_OF_LAYOUT[_layout.code] = PARTS.index(_layout.role) + 1
        _family = _layout.name.split("_", 1)[0]
        _FAMILY_LAYOUTS[_layout.code] = [
            LAYOUT_BY_NAME[f"{_family}_{part.upper()}"].code for part in PARTS
        ]


def _prefix_key(prefix: bytes) -> int:
    """Groups layer parts by prefix: Python's hash of bytes (SipHash, keyed per process; a
    64-bit int).  Only a hint: equal keys are confirmed by the bytes (tests make all collide)."""
    return hash(prefix)


class Validated(NamedTuple):
    """What full validation returns: the metadata object, and, when asked for, every
    entry's info in index order where the entry pass checked the table at once and so made
    them anyway (else None: nothing per tensor is kept)."""

    metadata: dict[str, Any]
    infos: list[TensorInfo] | None


class Parts(NamedTuple):
    """What the entry pass keeps for the layer check, a few bytes per entry: of each entry
    named ``<prefix>.<part>``, the part's code and a hash of the prefix bytes (0 otherwise).
    A hash only groups; equal prefixes are confirmed by their bytes [LAY-7]."""

    code: NDArray[np.uint8]
    key: NDArray[np.int64]


#: ``read(view, offset)`` fills ``view`` with the file's bytes from ``offset``: a copy out of
#: the index's buffer by default, or positioned reads, so that padding a full file system
#: never allocated cannot fault [WR-4].
Read = Callable[[memoryview, int], None]


def validate_index(index: Index, read: Read | None = None, *, keep: bool = False) -> Validated:
    """Run RD-2 on an index that passed the opening checks; the first failure is raised.

    ``read(view, offset)`` fetches the padding for its check; without it the buffer is
    copied from.  ``keep``: return every entry's info too, where the entries were checked
    at once (:class:`Validated`).
    Memory: a few NumPy columns, tens of bytes per entry, besides the buffer itself.
    """
    if read is None:
        read = _copier(index)
    _check_index_checksum(index)
    _check_bucket_table(index)
    parts, infos = _check_entries(index, keep)
    _check_layers(index, parts)  # [LAY-7], at the entry records
    del parts
    placed = _placed(index)
    _check_placement(index, placed)
    _check_padding(read, index, placed)
    return Validated(index.metadata(), infos)  # checksum, UTF-8, JSON object, depth [META-*]


def _copier(index: Index) -> Read:
    """The default :data:`Read`: a copy out of the index's buffer."""

    def read(view: memoryview, at: int) -> None:
        view[:] = index.data[at : at + len(view)]

    return read


def _check_index_checksum(index: Index) -> None:
    """[IDX-4]"""
    h = index.header
    start = h["index_offset"]
    crc = crc32c(index.buf[start : start + h["index_length"]])
    if crc != h["index_crc"]:
        raise checksum_mismatch(
            "BAD_INDEX_CHECKSUM", "index checksum mismatch", start, crc, h["index_crc"]
        )


def _check_bucket_table(index: Index) -> None:
    """Starts at 0, never decreases, ends at tensor_count, no bucket too long [IDX-5, LIM-6]."""
    table = index.buckets.astype(np.int64)
    at = index.bucket_bound_offset
    if table[0] != 0:
        raise field_error(
            "BAD_BUCKET_TABLE", "bucket table does not start at 0", at(0), 0, int(table[0])
        )
    steps = np.diff(table)
    bad = np.flatnonzero(steps < 0)
    if bad.size:
        i = int(bad[0])
        message = f"bucket table decreases after slot {i}"
        raise field_error(
            "BAD_BUCKET_TABLE", message, at(i + 1), f">= {table[i]}", int(table[i + 1])
        )
    if table[-1] != index.tensor_count:
        message = "bucket table does not end at tensor_count"
        last = len(table) - 1
        raise field_error("BAD_BUCKET_TABLE", message, at(last), index.tensor_count, int(table[-1]))
    long = np.flatnonzero(steps > MAX_BUCKET_LENGTH)
    if long.size:
        i = int(long[0])
        raise over_limit(
            "LIMIT_BUCKET", f"bucket {i} too long", at(i), MAX_BUCKET_LENGTH, int(steps[i])
        )


def _check_entries(index: Index, keep: bool) -> tuple[Parts, list[TensorInfo] | None]:
    """Every entry in index order: packing, local rules, bucket and name order [ENT-*, IDX-6..8].

    Nothing is kept per entry but what the layer check needs (:class:`Parts`).  The whole
    table is checked at once first (its infos are returned too when ``keep``); only a table
    that fails somewhere is walked entry by entry, which raises the first failure."""
    checked = _entries_at_once(index, keep)
    if checked is None:
        return _walk_entries(index), None
    parts, infos = checked
    return parts, infos if keep else None


def _entries_at_once(index: Index, keep: bool = False) -> tuple[Parts, list[TensorInfo]] | None:
    """The checks of :func:`_walk_entries` on runs of ``_RUN`` entries at a time: the packing
    of names and dims, every local rule (:func:`reference.format.entrytable.checked_infos`), each
    entry in its bucket, and names strictly rising within a bucket.  None if any fails.
    The infos are returned when ``keep`` (else an empty list: memory stays per run)."""
    g, count = index.geometry, index.tensor_count
    parts = Parts(np.zeros(count, np.uint8), np.zeros(count, np.int64))
    infos: list[TensorInfo] = []
    bounds = index.buckets.astype(np.int64)
    name_at = dims_at = 0  # where the next entry's name and dims must start [ENT-2, ENT-3]
    previous_bucket, previous_name = -1, b""
    for lo in range(0, count, _RUN):
        hi = min(lo + _RUN, count)
        entries = bytes(index.data[g.entry_offset(lo) : g.entry_offset(hi)])  # one copy [RD-4]
        table = np.frombuffer(entries, ENTRY_DTYPE)
        name_ends = name_at + np.cumsum(table["name_length"], dtype=np.int64)
        dims_ends = dims_at + np.cumsum(table["ndim"], dtype=np.int64)
        # As int64, an offset of 2**63 or more turns negative: never equal to a start.
        for field, ends, first in (
            ("name_offset", name_ends, name_at),
            ("dims_index", dims_ends, dims_at),
        ):
            starts = np.concatenate(([first], ends[:-1]))
            if (table[field].astype(np.int64) != starts).any():
                return None
        name_end, dims_end = int(name_ends[-1]), int(dims_ends[-1])
        if name_end > index.header["names_length"] or dims_end > index.header["dims_count"]:
            return None
        names = bytes(index.data[g.names.offset + name_at : g.names.offset + name_end])
        dims = bytes(index.data[g.dim_offset(dims_at) : g.dim_offset(dims_end)])
        run = checked_infos(
            entries, names, dims, slab_end=index.header["index_offset"],
            name_base=name_at, dims_base=dims_at, collect=keep,
        )  # fmt: skip
        if run is None:
            return None
        bucket = buckets_of(table["name_hash"], index.bucket_bits).astype(np.int64)
        position = np.arange(lo, hi)
        if not ((bounds[bucket] <= position) & (position < bounds[bucket + 1])).all():
            return None  # [IDX-6, IDX-8]
        cuts = [*(table["name_offset"] - name_at).tolist(), name_end - name_at]
        for i, b, start, end in zip(
            range(lo, hi), bucket.tolist(), cuts[:-1], cuts[1:], strict=True
        ):
            name = names[start:end]
            if b == previous_bucket and name <= previous_name:  # [NAME-3, IDX-6]
                return None
            previous_bucket, previous_name = b, name
            prefix, dot, part = name.rpartition(b".")
            code = _PART_CODE.get(part, 0) if dot else 0
            if code:
                parts.code[i], parts.key[i] = code, _prefix_key(prefix)
        if keep:
            infos += run
        name_at, dims_at = name_end, dims_end
    if name_at != index.header["names_length"] or dims_at != index.header["dims_count"]:
        return None  # bytes no entry uses [ENT-2, ENT-3]
    return parts, infos


#: Entries the table-at-once pass copies and checks at a time: its memory is per run, not
#: per entry (``tests/test_memory.py``).
_RUN = 1024


def _walk_entries(index: Index) -> Parts:
    """The entry pass one entry at a time, in the spec's order: the first failure raised."""
    parts = Parts(np.zeros(index.tensor_count, np.uint8), np.zeros(index.tensor_count, np.int64))
    cursors = {"name_offset": 0, "dims_index": 0}
    previous_bucket, previous_name = -1, b""
    table = index.buckets
    for i in range(index.tensor_count):
        rec = index.record(i)
        f = rec.fields
        for field, what in (("name_offset", "name"), ("dims_index", "dims")):  # [ENT-2, ENT-3]
            if f[field] != cursors[field]:
                message = f"entry {i} {what} not packed in entry order"
                where = rec.offset + ENTRY_FIELD_OFFSET[field]
                raise field_error("BAD_ENTRY_FIELD", message, where, cursors[field], f[field])
        cursors["name_offset"] += f["name_length"]
        cursors["dims_index"] += f["ndim"]
        info = index.info(rec)
        bucket = index.bucket_of(rec)
        if not table[bucket] <= i < table[bucket + 1]:  # [IDX-6, IDX-8]
            message = f"entry {i} ({info.name!r}) outside its bucket {bucket}"
            bounds = f"[{table[bucket]}, {table[bucket + 1]})"
            raise field_error("BAD_ENTRY_ORDER", message, rec.offset, bounds, i)
        if bucket == previous_bucket and rec.name == previous_name:  # [NAME-3]
            message = f"duplicate name {info.name!r}"
            raise field_error("DUPLICATE_NAME", message, rec.offset, "unique names", info.name)
        if bucket == previous_bucket and rec.name < previous_name:  # [IDX-6]
            message = f"entry {i} ({info.name!r}) out of name order"
            raise field_error(
                "BAD_ENTRY_ORDER", message, rec.offset, f"> {previous_name!r}", rec.name
            )
        previous_bucket, previous_name = bucket, rec.name
        prefix, dot, part = rec.name.rpartition(b".")
        code = _PART_CODE.get(part, 0) if dot else 0
        if code:
            parts.code[i], parts.key[i] = code, _prefix_key(prefix)
    for field, cursor in (
        ("names_length", cursors["name_offset"]),
        ("dims_count", cursors["dims_index"]),
    ):
        if index.header[field] != cursor:  # [ENT-2, ENT-3], at the header field
            message = f"{field} holds bytes no entry uses"
            where = HEADER_FIELD_OFFSET[field]
            raise field_error("BAD_ENTRY_FIELD", message, where, cursor, index.header[field])
    return parts


# ------------------------------------------------------------------ layers [LAY-7]


def _check_layers(index: Index, parts: Parts) -> None:
    """LAY-7 as :func:`reference.format.rules.check_layers` states it, from columns, not infos.

    Every quantised entry is looked up with its layer's three parts, all at once: entries named
    ``<prefix>.<part>`` are grouped by prefix (hash, then bytes).  The first offender in index
    order is then handed, with its layer's entries only, to ``check_layers``, so the error is
    the one a walk over every entry reports."""
    e = index.entries
    want_role = _ROLE_OF_LAYOUT[e["layout"]]
    quantised = np.flatnonzero(want_role)
    if not quantised.size:
        return
    misnamed = quantised[parts.code[quantised] != want_role[quantised]]
    named = np.flatnonzero(parts.code)
    group = np.full(index.tensor_count, -1, np.int64)  # an exact prefix group per named entry
    group[named], count = _prefix_groups(index, named, parts)
    members = np.full((count, len(SUFFIXES)), -1, np.int64)  # by group and suffix: the entry
    members[group[named], parts.code[named].astype(np.int64) - 1] = named
    del named
    good = quantised[parts.code[quantised] == want_role[quantised]]
    bad = _disagreeing(index, good, members[group[good], : len(PARTS)])
    biases = np.flatnonzero(parts.code == BIAS)
    unfit = biases[_unfit_biases(index, biases, members[group[biases], 0])]
    offenders = np.concatenate([misnamed[:1], good[bad][:1], unfit[:1]])
    if not offenders.size:
        return
    first = int(offenders.min())
    layer = members[group[first]] if group[first] >= 0 else np.array([first])
    _report_layer(index, sorted({first, *(int(j) for j in layer if j >= 0)}))


def _prefix_groups(
    index: Index, named: NDArray[np.int64], parts: Parts
) -> tuple[NDArray[np.int64], int]:
    """A group number per named entry, equal exactly when the prefixes' bytes are; the count.

    Sorted by hash; every entry of a run of equal hashes is compared by its bytes, so that a
    crafted hash collision splits the run instead of joining two layers."""
    keys = parts.key[named]
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    starts = np.ones(len(keys), bool)
    np.not_equal(keys[1:], keys[:-1], out=starts[1:])
    del keys
    groups = np.cumsum(starts) - 1
    count = int(groups[-1]) + 1 if len(groups) else 0
    bounds = np.append(np.flatnonzero(starts), len(starts))
    shared = np.flatnonzero(np.diff(bounds) > 1)  # runs of more than one hash
    e, pool = index.entries, index.geometry.names.offset
    for lo, hi in zip(bounds[shared], bounds[shared + 1], strict=True):
        seen: dict[bytes, int] = {}
        for at in range(int(lo), int(hi)):
            i = int(named[order[at]])
            start = pool + int(e[i]["name_offset"])
            cut = int(e[i]["name_length"]) - len(SUFFIXES[parts.code[i] - 1]) - 1
            prefix = bytes(index.data[start : start + cut])  # the real bytes
            number = seen.setdefault(prefix, len(seen))
            if number:
                groups[at] = count + number - 1
        count += len(seen) - 1
    out = np.empty(len(named), np.int64)
    out[order] = groups
    return out, count


def _disagreeing(
    index: Index, good: NDArray[np.int64], layer: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Which well-named quantised entries ``good`` have a part missing or disagreeing; ``layer``
    holds the entry of each part of their layer (-1: none)."""
    e = index.entries
    found = np.where(layer >= 0, layer, 0)
    bad = layer < 0
    bad |= e["layout"][found] != _FAMILY_LAYOUTS[e["layout"][good]]
    for field in ("k", "n", "bits", "group_size"):
        bad |= e[field][found] != e[field][good][:, None]
    return np.asarray(bad.any(axis=1))


#: Layout codes whose entry makes ``<prefix>.bias`` a layer's bias, and the dtype codes a
#: bias may have [LAY-10].
_QWEIGHT_CODES = np.array([LAYOUT_BY_NAME[name].code for name in sorted(QWEIGHT_LAYOUTS)])
_BIAS_DTYPES = np.array([DTYPE_BY_NAME[name].code for name in sorted(SCALE_DTYPES)])


def _unfit_biases(
    index: Index, biases: NDArray[np.int64], qweight: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Which entries ``biases`` (named ``<prefix>.bias``) are the bias of a layer, its
    qweight entry being ``qweight`` (-1: none), and do not fit it [LAY-10]."""
    e = index.entries
    found = np.where(qweight >= 0, qweight, 0)
    layer = (qweight >= 0) & np.isin(e["layout"][found], _QWEIGHT_CODES)
    one_dim = e["ndim"][biases] == 1
    first = np.where(one_dim, e["dims_index"][biases], 0).astype(np.int64)
    dims = index.dims[first] if len(index.dims) else np.zeros(len(biases), np.uint64)
    fits = (
        (e["layout"][biases] == LAYOUT_BY_NAME["DENSE"].code)
        & np.isin(e["dtype"][biases], _BIAS_DTYPES)
        & one_dim
        & (dims == e["n"][found].astype(np.uint64))
    )
    return np.asarray(layer & ~fits)


def _report_layer(index: Index, layer: list[int]) -> None:
    """Raise the error ``check_layers`` reports for the first offender, which ``layer`` holds
    with its layer's other entries (in index order; the walk reaches it first)."""
    infos = [index.info(index.record(i)) for i in layer]
    check_layers(infos, lambda j: index.geometry.entry_offset(layer[j]))
    raise AssertionError(f"LAY-7: entries {layer} passed on their own")  # pragma: no cover


# ------------------------------------------------------------------ payloads [SLAB-4, SLAB-5]


class Placed(NamedTuple):
    """The non-empty payloads in slab order (ties in index order): entry, offset, end."""

    entry: NDArray[np.int64]
    offset: NDArray[np.int64]
    end: NDArray[np.int64]


def _placed(index: Index) -> Placed:
    e = index.entries
    entry = np.flatnonzero(e["data_length"])
    offset = e["data_offset"][entry].astype(np.int64)  # <= index_offset [SLAB-3]: fits
    order = np.argsort(offset, kind="stable")
    entry, offset = entry[order], offset[order]
    del order
    end = offset + e["data_length"][entry].astype(np.int64)
    return Placed(entry, offset, end)


def _name(index: Index, i: int) -> str:
    return index.info(index.record(i)).name


def check_slab(index: Index) -> None:
    """Payload placement alone, for an index whose entries passed their local checks: no two
    payloads overlap, and each lies at the next 64 KiB boundary [SLAB-4, SLAB-5] (what
    ``reference.torch.load_file`` checks besides the entries, as safetensors checks its
    header's offsets: no tensor shares another's bytes)."""
    _check_placement(index, _placed(index))


def _check_placement(index: Index, placed: Placed) -> None:
    """Overlap, then packing [SLAB-4, SLAB-5]."""
    offset, end = placed.offset, placed.end
    expected = np.empty_like(offset)
    expected[:1] = SLAB_OFFSET
    expected[1:] = (end[:-1] + (ALIGNMENT - 1)) // ALIGNMENT * ALIGNMENT
    overlap = np.zeros(len(offset), bool)
    np.less(offset[1:], end[:-1], out=overlap[1:])
    bad = np.flatnonzero(overlap | (offset != expected))
    if bad.size:
        k = int(bad[0])
        at, name = int(offset[k]), _name(index, int(placed.entry[k]))
        if overlap[k]:
            message = f"payload of {name!r} overlaps the one before"
            raise field_error("OVERLAP", message, at, f">= {int(end[k - 1])}", at)
        message = f"payload of {name!r} not at the next 64 KiB boundary"
        raise field_error("SLAB_GAP", message, at, int(expected[k]), at)
    last = align_up(int(end[-1]), ALIGNMENT) if len(end) else SLAB_OFFSET
    index_offset = index.header["index_offset"]
    if index_offset != last:
        message = "index not at the first 64 KiB boundary after the last payload"
        raise field_error("SLAB_GAP", message, index_offset, last, index_offset)


# ------------------------------------------------------------------ padding [PAD-*]


#: Bytes of padding read before they are scanned together: one NumPy scan per batch, not
#: one per gap (a model has a gap after every payload).
_PAD_BATCH = 1 << 22


def _check_padding(read: Read, index: Index, placed: Placed) -> None:
    """PAD-1 (header area), PAD-2 (slab gaps), PAD-3 (bucket table padding) [PAD-4]."""
    ranges: list[tuple[int, int, Callable[[], str]]] = [
        (HEADER_SIZE, SLAB_OFFSET, lambda: "the header padding")
    ]
    for i, end in zip(placed.entry.tolist(), placed.end.tolist(), strict=True):
        after = lambda i=i: f"the padding after {_name(index, i)!r}"  # noqa: E731
        ranges.append((end, align_up(end, ALIGNMENT), after))
    if not len(placed.entry):
        ranges.append((SLAB_OFFSET, index.header["index_offset"], lambda: "the empty slab"))
    pad = index.geometry.bucket_padding
    ranges.append((pad.offset, pad.end, lambda: "the bucket table padding"))
    _all_zero(read, ranges)


def _all_zero(read: Read, ranges: list[tuple[int, int, Callable[[], str]]]) -> None:
    """Every byte of every ``[start, end)`` is zero; else NONZERO_PADDING at the first
    non-zero byte, ranges taken in order.  Read into one buffer, up to ``_PAD_BATCH`` bytes
    at a time, each batch scanned at once."""
    pieces = [  # no piece larger than a batch
        (at, min(at + _PAD_BATCH, end), what)
        for start, end, what in ranges
        for at in range(start, end, _PAD_BATCH)
    ]
    scratch = memoryview(bytearray(min(_PAD_BATCH, sum(end - at for at, end, _ in pieces))))
    batch: list[tuple[int, int, Callable[[], str]]] = []
    used = 0
    for at, end, what in pieces:
        if used + end - at > len(scratch):
            _scan(scratch[:used], batch)
            batch, used = [], 0
        read(scratch[used : used + end - at], at)
        batch.append((at, end, what))
        used += end - at
    _scan(scratch[:used], batch)


def _scan(data: memoryview, batch: list[tuple[int, int, Callable[[], str]]]) -> None:
    """``data`` holds the bytes of each ``(start, end, what)`` of ``batch``, one after
    another; raise at the first non-zero one."""
    if not len(data) or not np.frombuffer(data, np.uint8).max():  # max: 4x faster than any
        return
    pos = 0
    for start, end, what in batch:
        piece = np.frombuffer(data[pos : pos + end - start], np.uint8)
        nonzero = np.flatnonzero(piece)
        if nonzero.size:
            found = f"0x{int(piece[nonzero[0]]):02x}"
            at, message = start + int(nonzero[0]), f"non-zero byte in {what()}"
            raise field_error("NONZERO_PADDING", message, at, 0, found)
        pos += end - start
