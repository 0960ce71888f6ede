"""The catalogue of malformed files: one named edit of a valid file per broken rule.

Each :class:`Mutation` edits a valid base file (``tools.vectors.surgery.FileEditor``)
so that exactly one rule is broken, names the error code a conforming reader
reports, the requirement ids it covers, and the check level that finds it:

* ``open``: the O(1) checks every open performs [RD-1];
* ``validate``: full validation [RD-2];
* ``verify``: payload checksums [ENT-10].

The conformance generator turns each into a must-reject vector; the test suite
applies each to its own sample file.  Bases: ``"sample"`` (a few dense tensors of
several dtypes, one of them over 64 KiB, an empty and a 0-d tensor, one 4-bit
Marlin layer with bias, metadata), ``"pair"`` (two same-length names in one
bucket), ``"many"`` (100 tensors) and ``"zero_size"`` (zero-size tensors ``u8`` U8 [0, 1],
``f16`` F16 [0, 1] and ``u8.3d`` U8 [0, 1, 1], whose dims the 64-bit boundary vectors set).

The 64-bit vectors break a rule only exact integer arithmetic sees: a product or a sum that
wraps in u64, a value that binary64 rounds (to a multiple of 65536, or below 2**63).  See
``docs/spec/implementers.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spec.algorithms import bucket_of, fnv1a_64
from spec.constants import MAX_METADATA_LENGTH, MAX_TENSORS, SLAB_OFFSET
from spec.geometry import pack_dims
from spec.registry import DTYPE_BY_NAME, LAYOUT_BY_NAME
from spec.schema import ENTRY_SIZE, HEADER_SIZE
from tools.vectors.surgery import FileEditor


@dataclass(frozen=True)
class Mutation:
    id: str
    edit: Callable[[FileEditor], object]
    code: str
    requirements: tuple[str, ...]
    level: str  # "open", "validate" or "verify"
    description: str
    base: str = "sample"


# ----------------------------------------------------------------------------- locating helpers


def biggest(ed: FileEditor) -> int:
    """Position of the entry with the longest payload."""
    return int(np.argmax(ed.entries()["data_length"]))


def nonempty(ed: FileEditor) -> list[int]:
    """Positions of entries with a payload, in slab order."""
    order = np.argsort(ed.entries()["data_offset"], kind="stable")
    return [int(i) for i in order if ed.entries()[i]["data_length"]]


def last_entry(ed: FileEditor) -> int:
    return int(ed.h("tensor_count")) - 1


def dims_at(ed: FileEditor, i: int) -> int:
    return ed.geometry.dim_offset(int(ed.entries()[i]["dims_index"]))


def bucket_table(ed: FileEditor) -> np.ndarray:
    """Writable view of the bucket table."""
    geo = ed.geometry
    return np.frombuffer(ed.data, "<u4", geo.bucket_slots, geo.buckets.offset)


# ----------------------------------------------------------------------------- edits


def _overlap(ed: FileEditor) -> None:
    a, b = nonempty(ed)[:2]
    ed.set_entry(b, data_offset=int(ed.entries()[a]["data_offset"])).refresh()


def _gap_before_index(ed: FileEditor) -> None:
    at = ed.index_offset
    ed.data[at:at] = bytes(65536)
    ed.set_header(index_offset=at + 65536, file_size=len(ed.data)).refresh()


def _gap_before_payload(ed: FileEditor) -> None:
    """The last payload in slab order one 64 KiB block later than packing puts it."""
    i = nonempty(ed)[-1]
    at = int(ed.entries()[i]["data_offset"])
    ed.data[at:at] = bytes(65536)
    ed.set_header(index_offset=ed.index_offset + 65536, file_size=len(ed.data))
    ed.set_entry(i, data_offset=at + 65536).refresh()  # the entry where the header now puts it


def _layer_lacks_qzeros(ed: FileEditor) -> None:
    """The qzeros entry renamed (same length, bucket and order) and made DENSE: a plain
    tensor, valid on its own, so that only the layer's missing role breaks a rule."""
    _rename_suffix(".qzeros", ".qzero")(ed)
    ed.set_entry(_entry_named_stem(ed, ".qzero"), layout=0, bits=0, group_size=0, k=0, n=0)
    ed.refresh()


def _bad_utf8_name(ed: FileEditor) -> None:
    start, end = ed.name_range(last_entry(ed))
    ed.set_bytes(start, b"\xff" * (end - start)).refresh()


def _bucket_table_decreasing(ed: FileEditor) -> None:
    table = bucket_table(ed)
    steps = np.diff(table.astype(np.int64))
    i = int(np.flatnonzero(steps > 0)[-1])  # the last non-empty bucket
    table[i + 1] = table[i] - 1 if table[i] else 0
    if table[i + 1] >= table[i]:
        table[i] = table[i + 1] + 1
    ed.refresh()


def _bucket_bound(at: int, value: Callable[[FileEditor], int]) -> Callable[[FileEditor], None]:
    """Bound ``at`` of the bucket table (-1: the last) set to ``value(ed)``, checksums refreshed."""

    def edit(ed: FileEditor) -> None:
        bucket_table(ed)[at] = value(ed)
        ed.refresh()

    return edit


def _entry_outside_its_bucket(ed: FileEditor) -> None:
    """One inner bound raised by one: the first entry of that bucket now lies in the range of
    the bucket before it (bounds still start at 0, never decrease, end at the count)."""
    table = bucket_table(ed)
    steps = np.diff(table.astype(np.int64))
    i = int(np.flatnonzero(steps[1:] > 0)[0]) + 1  # bucket i >= 1 is not empty
    table[i] += 1
    ed.refresh()


def _one_long_bucket(ed: FileEditor) -> None:
    table = bucket_table(ed)
    table[1:] = table[-1]  # every entry in bucket 0
    ed.refresh()


def _long_second_bucket(ed: FileEditor) -> None:
    """Bucket 0 empty and every entry in bucket 1: the first bucket too long is not the
    first bucket, so its slot is not the table's first [RD-7]."""
    table = bucket_table(ed)
    table[1] = 0
    table[2:] = table[-1]
    ed.refresh()


def _shape_overflow(ed: FileEditor) -> None:
    ed.set_bytes(dims_at(ed, biggest(ed)), pack_dims([1 << 63])).refresh()


def _hidden_payload(ed: FileEditor) -> None:
    i = nonempty(ed)[0]
    end = int(ed.entries()[i]["data_offset"] + ed.entries()[i]["data_length"])
    ed.set_bytes(end + 5, b"PK\x03\x04")  # a zip header in the padding: no checksum covers it


def _duplicate(ed: FileEditor) -> None:
    """Base "pair": rename the second name to the first (same length, same bucket)."""
    from spec.algorithms import fnv1a_64

    first_start, first_end = ed.name_range(0)
    first = bytes(ed.data[first_start:first_end])
    start, _ = ed.name_range(1)
    ed.set_bytes(start, first).set_entry(1, name_hash=fnv1a_64(first)).refresh()


def _names_out_of_order(ed: FileEditor) -> None:
    """Base "pair": swap the two names (and hashes), so the bucket is in descending order."""
    (a0, a1), (b0, b1) = ed.name_range(0), ed.name_range(1)
    first, second = bytes(ed.data[a0:a1]), bytes(ed.data[b0:b1])
    h0, h1 = int(ed.entries()[0]["name_hash"]), int(ed.entries()[1]["name_hash"])
    ed.set_bytes(a0, second).set_bytes(b0, first)
    ed.set_entry(0, name_hash=h1).set_entry(1, name_hash=h0).refresh()


def _entry_named(ed: FileEditor, suffix: str) -> int:
    for i in range(int(ed.h("tensor_count"))):
        start, end = ed.name_range(i)
        if bytes(ed.data[start:end]).endswith(suffix.encode()):
            return i
    raise KeyError(suffix)


def _entry_named_stem(ed: FileEditor, stem: str) -> int:
    """The entry whose name ends in ``stem`` plus one character (see :func:`_rename_suffix`)."""
    for i in range(int(ed.h("tensor_count"))):
        start, end = ed.name_range(i)
        if bytes(ed.data[start : end - 1]).endswith(stem.encode()):
            return i
    raise KeyError(stem)


def _set_quant(suffix: str, **fields: int) -> Callable[[FileEditor], object]:
    return lambda ed: ed.set_entry(_entry_named(ed, suffix), **fields).refresh()


def _rename_suffix(suffix: str, stem: str) -> Callable[[FileEditor], object]:
    """Rename the entry ending in ``suffix`` to one ending in ``stem`` plus one more
    character, picked so that the name keeps its length, its bucket and its place in the
    bucket's order: the file stays valid except for what the new name means."""
    assert len(stem) + 1 == len(suffix)

    def edit(ed: FileEditor) -> object:
        i = _entry_named(ed, suffix)
        start, end = ed.name_range(i)
        old = bytes(ed.data[start:end])
        bits = int(ed.h("bucket_bits"))
        bucket = bucket_of(fnv1a_64(old), bits)
        names = [bytes(ed.data[slice(*ed.name_range(j))]) for j in range(len(ed.entries()))]
        mates = [
            n for j, n in enumerate(names) if j != i and bucket_of(fnv1a_64(n), bits) == bucket
        ]
        for c in b"abcdefghijklmnopqrstuvwxyz0123456789":
            new = old[: -len(suffix)] + stem.encode() + bytes([c])
            if new in names or bucket_of(fnv1a_64(new), bits) != bucket:
                continue
            if all((m < new) == (m < old) for m in mates):
                ed.set_bytes(start, new).set_entry(i, name_hash=fnv1a_64(new))
                return ed.refresh()
        raise AssertionError(f"no same-bucket rename for {old!r}")

    return edit


def _set_dims(name: str, dims: tuple[int, ...]) -> Callable[[FileEditor], object]:
    """Give the entry ``name`` the dims ``dims`` (as many as it has) [ENT-5]."""
    return lambda ed: ed.set_bytes(dims_at(ed, ed.entry_of(name)), pack_dims(dims)).refresh()


#: 3 x this is 2**63 - 2, the largest multiple of 3 below 2**63.
THIRD = ((1 << 63) - 1) // 3
#: 103 x this is 2**63 + 24, yet binary64 rounds the product below 2**63 (to 2**63 - 1024).
OVER_103 = -(-(1 << 63) // 103)


def _huge_index_offset(offset: int, length: int | None = None) -> Callable[[FileEditor], object]:
    """Header (only) with ``index_offset`` (and ``index_length``) set, checksums refreshed."""
    fields = {"index_offset": offset} | ({} if length is None else {"index_length": length})
    return lambda ed: ed.set_header(**fields).refresh(entries=False, metadata=False, trailer=False)


def _index_end_wraps(ed: FileEditor) -> object:
    """index_offset 2**64 - 65536 and index_length file_size - 32 + 65536: the FILE-4 sum is
    file_size in wrapping u64 arithmetic, 2**64 + file_size in fact."""
    start = (1 << 64) - 65536
    return _huge_index_offset(start, len(ed.data) - 32 + 65536)(ed)


def _flip_payload(ed: FileEditor) -> None:
    ed.flip_bit(int(ed.entries()[biggest(ed)]["data_offset"]) + 3, 6)


def _truncate_at(where: Callable[[FileEditor], int]) -> Callable[[FileEditor], object]:
    return lambda ed: ed.truncate(where(ed))


def _first_payload_middle(ed: FileEditor) -> int:
    i = nonempty(ed)[0]
    return int(ed.entries()[i]["data_offset"] + ed.entries()[i]["data_length"] // 2)


def _metadata_bom(ed: FileEditor) -> None:
    ed.set_bytes(ed.metadata_offset, b"\xef\xbb\xbf").refresh()  # over the first 3 JSON bytes


def _metadata(raw: bytes) -> Callable[[FileEditor], object]:
    """Replace the metadata document by ``raw`` (any length)."""
    return lambda ed: ed.replace_metadata(raw).refresh()


def _not_awq2(ed: FileEditor) -> None:
    """Another format's whole file, shorter than the magic: the 6 bytes of a GIF signature."""
    ed.data[:] = b"GIF89a"


def _grow_index(ed: FileEditor, at: int, raw: bytes, **counts: int) -> None:
    """Insert ``raw`` into the index region at ``at``, growing the header ``counts`` by the
    given amounts and ``index_length`` and ``file_size`` by its length."""
    ed.data[at:at] = raw
    grown = {name: ed.h(name) + by for name, by in counts.items()}
    ed.set_header(index_length=ed.h("index_length") + len(raw), file_size=len(ed.data), **grown)
    ed.refresh()


def _spare_name_byte(ed: FileEditor) -> None:
    """A name pool one byte longer than the names: every entry stays valid [ENT-2]."""
    _grow_index(ed, ed.metadata_offset, b"x", names_length=1)


def _spare_dim(ed: FileEditor) -> None:
    """A dims section one u64 longer than the shapes: every entry stays valid [ENT-3]."""
    _grow_index(ed, ed.names_offset, pack_dims([1]), dims_count=1)


def _empty_entry(ed: FileEditor) -> int:
    return next(i for i, e in enumerate(ed.entries()) if not e["data_length"])


def _truncated_utf8_name(ed: FileEditor) -> None:
    """The last name's last two bytes become E2 82: a 3-byte sequence cut short."""
    _, end = ed.name_range(last_entry(ed))
    ed.set_bytes(end - 2, b"\xe2\x82").refresh()


def _stray_continuation_in_name(ed: FileEditor) -> None:
    """The last name's fourth byte becomes 0x80, a continuation byte with no lead byte: the
    ill-formed sequence starts there, three bytes into the name [NAME-2, RD-7]."""
    start, end = ed.name_range(last_entry(ed))
    assert end - start > 4 and bytes(ed.data[start : start + 3]).isascii()
    ed.set_bytes(start + 3, b"\x80").refresh()


def _bias(ed: FileEditor, **fields: int) -> None:
    """Retype the sample layer's bias (F16 [64], 128 bytes) keeping its byte length."""
    i = _entry_named(ed, ".bias")
    if "dim" in fields:
        ed.set_bytes(dims_at(ed, i), pack_dims([fields.pop("dim")]))
    ed.set_entry(i, **fields).refresh()


def _metadata_duplicate_key(ed: FileEditor) -> None:
    doc = b'{"a":1,"a":2}'
    length = ed.h("metadata_length")
    ed.set_bytes(ed.metadata_offset, doc + b" " * (length - len(doc))).refresh()


# ----------------------------------------------------------------------------- the catalogue

M = Mutation
MUTATIONS: tuple[Mutation, ...] = (
    # truncation at every structural boundary [FILE-1]
    M("truncated_empty", _truncate_at(lambda ed: 0), "TRUNCATED", ("FILE-1",), "open", "zero bytes"),
    M("truncated_in_magic", _truncate_at(lambda ed: 5), "TRUNCATED", ("FILE-1", "HDR-1"), "open", "5 bytes"),
    M("truncated_after_header", _truncate_at(lambda ed: HEADER_SIZE), "TRUNCATED", ("FILE-1",), "open", "the header alone"),
    M("truncated_in_padding", _truncate_at(lambda ed: 0x8000), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "cut inside the zero padding"),
    M("truncated_at_slab", _truncate_at(lambda ed: SLAB_OFFSET), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "cut where the slab starts"),
    M("truncated_in_payload", _truncate_at(_first_payload_middle), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "cut inside a payload"),
    M("truncated_at_index", _truncate_at(lambda ed: ed.index_offset), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "cut where the index starts"),
    M("truncated_in_entries", _truncate_at(lambda ed: ed.entries_offset + ENTRY_SIZE // 2), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "cut inside an entry"),
    M("truncated_in_names", _truncate_at(lambda ed: ed.names_offset + 1), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "cut inside the name pool"),
    M("truncated_before_trailer", _truncate_at(lambda ed: ed.trailer_offset), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "the trailer missing"),
    M("truncated_last_byte", _truncate_at(lambda ed: len(ed.data) - 1), "TRUNCATED", ("FILE-1", "FILE-2"), "open", "one byte short"),
    # header [HDR, VER]
    M("bad_magic", lambda ed: ed.set_bytes(0, b"GGUF"), "BAD_MAGIC", ("HDR-1",), "open", "another format's magic"),
    M("short_not_awq2", _not_awq2, "BAD_MAGIC", ("HDR-1",), "open", "the 6 bytes GIF89a: the magic is compared before the size"),
    M("magic_crlf_damage", lambda ed: ed.set_bytes(4, b"\n\x1a\n\x02"), "BAD_MAGIC", ("HDR-1",), "open", "CR LF -> LF conversion"),
    M("major_version_3", lambda ed: ed.set_header(version_major=3).refresh(), "UNSUPPORTED_VERSION", ("VER-2",), "open", "major 3, checksums valid"),
    M("major_version_1_bad_crc", lambda ed: ed.set_header(version_major=1), "UNSUPPORTED_VERSION", ("VER-2", "HDR-4"), "open", "version is checked before the checksum"),
    M("header_checksum", lambda ed: ed.flip_bit(0x48, 0), "BAD_HEADER_CHECKSUM", ("HDR-4", "CRC-1"), "open", "one bit of tensor_count flipped"),
    M("unknown_required_flag", lambda ed: ed.set_header(required_flags=1 << 17).refresh(), "UNKNOWN_REQUIRED_FLAG", ("VER-3",), "open", "required flag bit 17"),
    M("unknown_required_flag_bit_40", lambda ed: ed.set_header(required_flags=1 << 40).refresh(), "UNKNOWN_REQUIRED_FLAG", ("VER-3",), "open", "required flag bit 40: lost by 32-bit bitwise operators (JavaScript's & on a Number)"),
    M("unknown_required_flag_bit_63", lambda ed: ed.set_header(required_flags=1 << 63).refresh(), "UNKNOWN_REQUIRED_FLAG", ("VER-3",), "open", "required flag bit 63, the sign bit of an i64"),
    M("reserved_header_byte", lambda ed: ed.set_header(reserved1=b"\x00\x01\x00").refresh(), "BAD_HEADER_FIELD", ("HDR-5",), "open", "reserved byte set in a 2.0 file"),
    M("alignment_4096", lambda ed: ed.set_header(alignment=4096).refresh(), "BAD_HEADER_FIELD", ("HDR-2",), "open", "alignment field not 65536"),
    M("slab_offset_moved", lambda ed: ed.set_header(slab_offset=0x20000).refresh(), "BAD_HEADER_FIELD", ("HDR-2",), "open", "slab_offset not 0x10000"),
    M("index_offset_misaligned", lambda ed: ed.set_header(index_offset=ed.index_offset + 8).refresh(entries=False, metadata=False, trailer=False), "BAD_HEADER_FIELD", ("HDR-3",), "open", "index_offset not 64 KiB aligned"),
    M("file_longer_than_header", lambda ed: ed.data.extend(bytes(16)), "FILE_SIZE_MISMATCH", ("FILE-2", "FILE-4"), "open", "16 bytes appended"),
    # limits and index layout [LIM, IDX]
    M("too_many_tensors", lambda ed: ed.set_header(tensor_count=MAX_TENSORS + 1).refresh(entries=False, metadata=False), "LIMIT_TENSORS", ("LIM-1", "LIM-2"), "open", "max_tensors + 1"),
    M("tensor_count_2_pow_40", lambda ed: ed.set_header(tensor_count=1 << 40).refresh(entries=False, metadata=False), "LIMIT_TENSORS", ("LIM-1", "LIM-2"), "open", "a count that would allocate 64 TiB"),
    M("bucket_bits_not_canonical", lambda ed: ed.set_header(bucket_bits=20).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT", ("IDX-5", "LIM-7"), "open", "a 2**20-slot table for a few tensors"),
    M("metadata_too_long", lambda ed: ed.set_header(metadata_length=MAX_METADATA_LENGTH + 1).refresh(entries=False, metadata=False), "LIMIT_METADATA", ("LIM-1", "LIM-5"), "open", "max_metadata_length + 1"),
    M("names_length_huge", lambda ed: ed.set_header(names_length=1 << 60).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT", ("IDX-3", "IDX-10", "LIM-1"), "open", "name pool larger than the count allows"),
    M("index_length_wrong", lambda ed: ed.set_header(index_length=ed.h("index_length") - 8).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT", ("IDX-1", "IDX-3"), "open", "index_length 8 short"),
    M("dims_count_over_limit", lambda ed: ed.set_header(dims_count=ed.h("tensor_count") * 8 + 1).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT", ("IDX-10",), "open", "dims_count one more than tensor_count x max_dims (found unreached by the C loader's coverage)"),
    M("counts_disagree_with_index_length", lambda ed: ed.set_header(dims_count=ed.h("dims_count") - 1).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT", ("IDX-3",), "open", "dims_count one less, index_length as it was: the sections add up to 8 bytes less (found unreached by the C loader's coverage)"),
    # trailer [TRL]
    M("trailer_magic", lambda ed: ed.set_bytes(len(ed.data) - 1, b"\r"), "BAD_TRAILER_MAGIC", ("TRL-1",), "open", "last byte changed"),
    M("trailer_checksum", lambda ed: ed.flip_bit(len(ed.data) - 20, 3), "BAD_TRAILER_CHECKSUM", ("TRL-2",), "open", "one trailer bit flipped"),
    M("trailer_disagrees", lambda ed: ed.set_trailer(index_offset=ed.index_offset + 65536).refresh_trailer_crc(), "TRAILER_MISMATCH", ("TRL-3",), "open", "trailer points elsewhere, its own checksum valid"),
    M("trailer_index_length_disagrees", lambda ed: ed.set_trailer(index_length=ed.h("index_length") + 8).refresh_trailer_crc(), "TRAILER_MISMATCH", ("TRL-3",), "open", "trailer's index_length 8 more than the header's, its own checksum valid (found unreached by the C loader's coverage)"),
    M("trailer_header_crc_disagrees", lambda ed: ed.set_trailer(header_crc=ed.h("header_crc") ^ 1).refresh_trailer_crc(), "TRAILER_MISMATCH", ("TRL-3",), "open", "trailer's copy of header_crc one bit off, its own checksum valid (found unreached by the C loader's coverage)"),
    # index [IDX, ENT, NAME]
    M("index_checksum", lambda ed: ed.flip_bit(ed.names_offset, 0), "BAD_INDEX_CHECKSUM", ("IDX-4", "CRC-1", "RD-6"), "validate", "one name bit flipped"),
    M("bucket_table_decreasing", _bucket_table_decreasing, "BAD_BUCKET_TABLE", ("IDX-5",), "validate", "a bucket bound out of order"),
    M("bucket_too_long", _one_long_bucket, "LIMIT_BUCKET", ("LIM-6", "IDX-5"), "validate", "100 entries in one bucket", base="many"),
    M("bucket_too_long_second_bucket", _long_second_bucket, "LIMIT_BUCKET", ("LIM-6", "RD-7"), "validate", "bucket 0 empty and 100 entries in bucket 1: reported at bucket 1's first slot, index_offset + 4", base="many"),
    M("bucket_table_first_not_zero", _bucket_bound(0, lambda ed: 1), "BAD_BUCKET_TABLE", ("IDX-5",), "validate", "buckets[0] is 1 (found unreached by the C loader's coverage)"),
    M("bucket_table_end_not_count", _bucket_bound(-1, lambda ed: ed.h("tensor_count") + 1), "BAD_BUCKET_TABLE", ("IDX-5",), "validate", "the last bound one more than tensor_count (found unreached by the C loader's coverage)"),
    M("entry_outside_its_bucket", _entry_outside_its_bucket, "BAD_ENTRY_ORDER", ("IDX-6", "IDX-8"), "validate", "a bound raised by one: an entry in the range of the bucket before its own (found unreached by the C loader's coverage)", base="many"),
    M("entry_checksum", lambda ed: ed.flip_bit(ed.entry_offset(0) + 8, 1).refresh(entries=False), "BAD_ENTRY_CHECKSUM", ("ENT-9", "CRC-1"), "validate", "entry bytes changed, entry_crc not"),
    M("entry_flags", lambda ed: ed.set_entry(0, flags=1).refresh(), "BAD_ENTRY_FIELD", ("ENT-1",), "validate", "reserved entry flags"),
    M("dims_index_not_canonical", lambda ed: ed.set_entry(last_entry(ed), dims_index=0).refresh(), "BAD_ENTRY_FIELD", ("ENT-3",), "validate", "dims not packed in entry order"),
    M("name_outside_pool", lambda ed: ed.set_entry(last_entry(ed), name_offset=ed.h("names_length")).refresh(entries=False), "BAD_ENTRY_FIELD", ("ENT-2", "IDX-9"), "validate", "the last entry's name starts at the end of the name pool (found unreached by the C loader's coverage)"),
    M("dims_outside_section", lambda ed: ed.set_entry(last_entry(ed), dims_index=ed.h("dims_count") + 1).refresh(entries=False), "BAD_ENTRY_FIELD", ("ENT-3", "IDX-9"), "validate", "the last entry's dims start past the dims section (found unreached by the C loader's coverage)"),
    M("names_length_unused_byte", _spare_name_byte, "BAD_ENTRY_FIELD", ("ENT-2",), "validate", "names_length one more than the names add up to"),
    M("dims_count_unused_dim", _spare_dim, "BAD_ENTRY_FIELD", ("ENT-3",), "validate", "dims_count one more than the ndims add up to"),
    M("name_offset_not_canonical", lambda ed: ed.set_entry(0, name_offset=1).refresh(), "BAD_ENTRY_FIELD", ("ENT-2",), "validate", "names not packed in entry order"),
    M("unknown_dtype", lambda ed: ed.set_entry(0, dtype=99).refresh(), "BAD_DTYPE", ("ENT-4", "ENT-7"), "validate", "dtype 99"),
    M("reserved_layout", lambda ed: ed.set_entry(0, layout=7).refresh(), "BAD_LAYOUT", ("LAY-1",), "validate", "layout 7 (reserved for W4A8)"),
    M("dense_with_bits", lambda ed: ed.set_entry(_entry_named(ed, "norm.weight"), bits=4).refresh(), "BAD_QUANT_FIELDS", ("LAY-2",), "validate", "DENSE entry with bits = 4"),
    M("name_hash", lambda ed: ed.set_entry(0, name_hash=int(ed.entries()[0]["name_hash"]) ^ 1).refresh(), "BAD_NAME_HASH", ("IDX-7",), "validate", "hash off by one bit"),
    M("name_truncated_utf8", _truncated_utf8_name, "BAD_NAME_UTF8", ("NAME-2",), "validate", "a name ending in E2 82, a 3-byte sequence cut short"),
    M("name_invalid_utf8_inside", _stray_continuation_in_name, "BAD_NAME_UTF8", ("NAME-2", "RD-7"), "validate", "a stray continuation byte 0x80 as a name's fourth byte: reported at that byte in the name pool, not at the name's first byte"),
    M("empty_name", lambda ed: ed.set_entry(last_entry(ed), name_length=0).refresh(), "EMPTY_NAME", ("NAME-1",), "validate", "zero-length name"),
    M("invalid_utf8_name", _bad_utf8_name, "BAD_NAME_UTF8", ("NAME-2",), "validate", "name bytes 0xFF"),
    M("duplicate_name", _duplicate, "DUPLICATE_NAME", ("NAME-3", "IDX-8"), "validate", "two entries named alike", base="pair"),
    M("names_out_of_order", _names_out_of_order, "BAD_ENTRY_ORDER", ("IDX-8",), "validate", "a bucket's names in descending order", base="pair"),
    M("name_too_long", lambda ed: ed.set_entry(0, name_length=1025).refresh(entries=False), "LIMIT_NAME_LENGTH", ("LIM-3",), "validate", "name_length 1025"),
    M("too_many_dims", lambda ed: ed.set_entry(0, ndim=9).refresh(entries=False), "LIMIT_DIMS", ("LIM-4",), "validate", "ndim 9"),
    M("shape_overflow", _shape_overflow, "BAD_SHAPE", ("ENT-5",), "validate", "a dimension of 2**63"),
    # 64-bit boundaries: wrong only in wrapping u64 or binary64 arithmetic [ENT-5, FILE-4, SLAB-2, SLAB-3]
    M("dim_u8_2p63", _set_dims("u8", (0, 1 << 63)), "BAD_SHAPE", ("ENT-5",), "validate", "U8 [0, 2**63]: the non-zero dims x 1 reach 2**63", base="zero_size"),
    M("dim_f16_2p62", _set_dims("f16", (0, 1 << 62)), "BAD_SHAPE", ("ENT-5",), "validate", "F16 [0, 2**62]: the non-zero dims x 2 reach 2**63", base="zero_size"),
    M("dims_u8_3_by_third_plus_1", _set_dims("u8.3d", (0, 3, THIRD + 1)), "BAD_SHAPE", ("ENT-5",), "validate", f"U8 [0, 3, {THIRD + 1}]: 3 x {THIRD + 1} = 2**63 + 1", base="zero_size"),
    M("dims_u8_103_rounds_below_2p63", _set_dims("u8.3d", (0, 103, OVER_103)), "BAD_SHAPE", ("ENT-5",), "validate", f"U8 [0, 103, {OVER_103}]: 2**63 + 24, which binary64 rounds to 2**63 - 1024", base="zero_size"),
    M("dims_nonzero_product_wraps_to_0", _set_dims("u8.3d", (0, 1 << 32, 1 << 32)), "BAD_SHAPE", ("ENT-5",), "validate", "U8 [0, 2**32, 2**32]: the non-zero dims multiply to 2**64, 0 in wrapping u64", base="zero_size"),
    M("shape_wraps_to_data_length_0", _set_dims("u8", (1 << 32, 1 << 32)), "BAD_SHAPE", ("ENT-5", "ENT-6"), "validate", "U8 [2**32, 2**32] with data_length 0: the product wraps to 0 in u64", base="zero_size"),
    M("misaligned_offset_2p60_plus_8", lambda ed: ed.set_entry(biggest(ed), data_offset=(1 << 60) + 8).refresh(), "MISALIGNED_OFFSET", ("SLAB-2", "ENT-7"), "validate", "data_offset 2**60 + 8: binary64 rounds it to 2**60, a multiple of 65536; alignment is checked before the bounds"),
    M("payload_end_wraps", lambda ed: ed.set_entry(biggest(ed), data_offset=(1 << 64) - 65536).refresh(), "OUT_OF_BOUNDS", ("SLAB-3", "ENT-7"), "validate", "data_offset 2**64 - 65536 under a 120000-byte payload: the end wraps to 54464 in u64"),
    M("index_offset_2p60_plus_8", _huge_index_offset((1 << 60) + 8), "BAD_HEADER_FIELD", ("HDR-3",), "open", "index_offset 2**60 + 8: binary64 rounds it to 2**60, a multiple of 65536"),
    M("index_end_wraps", _index_end_wraps, "BAD_INDEX_LAYOUT", ("FILE-4", "IDX-1"), "open", "index_offset 2**64 - 65536: index_offset + index_length + 32 equals file_size only in wrapping u64"),
    M("length_not_shape", lambda ed: ed.set_entry(biggest(ed), data_length=int(ed.entries()[biggest(ed)]["data_length"]) - 4).refresh(), "BAD_LENGTH", ("ENT-6", "ENT-7"), "validate", "data_length 4 short"),
    M("misaligned_payload", lambda ed: ed.set_entry(biggest(ed), data_offset=int(ed.entries()[biggest(ed)]["data_offset"]) + 8).refresh(), "MISALIGNED_OFFSET", ("SLAB-2", "ENT-7"), "validate", "payload 8 bytes past a boundary"),
    M("payload_past_slab", lambda ed: ed.set_entry(biggest(ed), data_offset=ed.index_offset).refresh(), "OUT_OF_BOUNDS", ("SLAB-3", "ENT-7"), "validate", "payload inside the index"),
    M("payload_before_slab", lambda ed: ed.set_entry(biggest(ed), data_offset=0).refresh(), "OUT_OF_BOUNDS", ("SLAB-3",), "validate", "payload over the header"),
    M("empty_payload_past_index", lambda ed: ed.set_entry(_empty_entry(ed), data_offset=ed.index_offset + 65536).refresh(), "OUT_OF_BOUNDS", ("SLAB-3", "SLAB-7"), "validate", "an empty payload 64 KiB past index_offset"),
    M("empty_payload_misaligned", lambda ed: ed.set_entry(_empty_entry(ed), data_offset=SLAB_OFFSET + 8).refresh(), "MISALIGNED_OFFSET", ("SLAB-2", "SLAB-7"), "validate", "an empty payload 8 bytes past a boundary"),
    M("overlapping_payloads", _overlap, "OVERLAP", ("SLAB-4",), "validate", "two payloads at one offset"),
    M("gap_before_index", _gap_before_index, "SLAB_GAP", ("SLAB-1", "SLAB-5"), "validate", "a spare 64 KiB before the index"),
    M("gap_before_payload", _gap_before_payload, "SLAB_GAP", ("SLAB-5",), "validate", "a spare 64 KiB before the last payload (found unreached by the C loader's coverage)"),
    M("hidden_bytes_in_header_padding", lambda ed: ed.set_bytes(0x8000, b"\x01"), "NONZERO_PADDING", ("PAD-1", "PAD-4"), "validate", "one byte in the header padding"),
    M("hidden_bytes_after_bucket_table", lambda ed: ed.set_bytes(ed.entries_offset - 1, b"\x01").refresh(), "NONZERO_PADDING", ("PAD-3", "PAD-4", "IDX-2"), "validate", "the bucket table's padding not zero"),
    M("hidden_payload_in_slab_gap", _hidden_payload, "NONZERO_PADDING", ("PAD-2", "PAD-4"), "validate", "a zip header after a payload"),
    # quantised layers [LAY]
    M("marlin_k_not_multiple_of_128", _set_quant(".qweight", k=200), "BAD_QUANT_FIELDS", ("LAY-4", "LAY-5"), "validate", "k = 200 in a MARLIN_QWEIGHT entry"),
    M("group_size_not_dividing_k", _set_quant(".scales", group_size=96), "BAD_QUANT_FIELDS", ("LAY-4",), "validate", "group size 96 with k = 128"),
    M("bits_3", _set_quant(".qzeros", bits=3), "BAD_QUANT_FIELDS", ("LAY-3",), "validate", "bits = 3"),
    M("quant_k_zero", _set_quant(".qweight", k=0), "BAD_QUANT_FIELDS", ("LAY-3",), "validate", "k = 0 in a MARLIN_QWEIGHT entry (found unreached by the C loader's coverage)"),
    M("n_not_multiple_of_pack_factor", _set_quant(".qweight", n=68), "BAD_QUANT_FIELDS", ("LAY-4",), "validate", "n = 68 with bits 4: not a multiple of the pack factor 8 (found unreached by the C loader's coverage)"),
    M("marlin_n_not_multiple_of_64", _set_quant(".qweight", n=72), "BAD_QUANT_FIELDS", ("LAY-4",), "validate", "n = 72 in a MARLIN_QWEIGHT entry: a multiple of 8, not of 64 (found unreached by the C loader's coverage)"),
    M("marlin_group_size_16", _set_quant(".qweight", group_size=16), "BAD_QUANT_FIELDS", ("LAY-4",), "validate", "MARLIN_QWEIGHT with group size 16, a divisor of k = 128 (found unreached by the C loader's coverage)"),
    M("qweight_dtype_u32", _set_quant(".qweight", dtype=DTYPE_BY_NAME["U32"].code), "BAD_QUANT_FIELDS", ("LAY-5",), "validate", "MARLIN_QWEIGHT stored as U32 (same size as I32) (found unreached by the C loader's coverage)"),
    M("scales_dtype_i16", _set_quant(".scales", dtype=DTYPE_BY_NAME["I16"].code), "BAD_QUANT_FIELDS", ("LAY-6",), "validate", "MARLIN_SCALES stored as I16 (same size as F16) (found unreached by the C loader's coverage)"),
    M("scales_shape_wrong", _set_quant(".scales", n=128), "BAD_QUANT_FIELDS", ("LAY-5",), "validate", "scales entry says n = 128, stores [G, 64]"),
    M("layer_mixed_layout_families", _set_quant(".scales", layout=LAYOUT_BY_NAME["AWQ_SCALES"].code), "BAD_QUANT_FIELDS", ("LAY-7",), "validate", "AWQ_SCALES (same dtype and shape) beside MARLIN_QWEIGHT and MARLIN_QZEROS"),
    M("layer_without_qzeros", _rename_suffix(".qzeros", ".qzero"), "BAD_QUANT_FIELDS", ("LAY-7",), "validate", "a MARLIN_QZEROS entry renamed <prefix>.qzero? (one letter changed): not named for its role, and the layer lacks qzeros"),
    M("layer_lacks_qzeros", _layer_lacks_qzeros, "BAD_QUANT_FIELDS", ("LAY-7",), "validate", "the qzeros entry renamed <prefix>.qzero? and made DENSE: the layer has no qzeros (found unreached by the C loader's coverage)"),
    M("layer_bias_shape_wrong", lambda ed: _bias(ed, dtype=DTYPE_BY_NAME["F32"].code, dim=32), "BAD_QUANT_FIELDS", ("LAY-10",), "validate", "a layer's bias F32 [32] where n = 64"),
    M("layer_bias_dtype_wrong", lambda ed: _bias(ed, dtype=DTYPE_BY_NAME["I16"].code), "BAD_QUANT_FIELDS", ("LAY-10",), "validate", "a layer's bias I16 [64]: not a float dtype"),
    # metadata [META]
    M("metadata_checksum", lambda ed: ed.set_header(metadata_crc=1).refresh(metadata=False), "BAD_METADATA_CHECKSUM", ("META-4",), "validate", "metadata_crc wrong"),
    M("metadata_not_json", lambda ed: ed.set_bytes(ed.metadata_offset, b"[").refresh(), "BAD_METADATA", ("META-2",), "validate", "metadata starts with ["),
    M("metadata_bom", _metadata_bom, "BAD_METADATA", ("META-1",), "validate", "UTF-8 byte order mark"),
    M("metadata_bom_then_invalid_utf8", _metadata(b"\xef\xbb\xbf\xff{}"), "BAD_METADATA", ("META-1", "META-6", "RD-7"), "validate", "a byte order mark, then 0xFF: the mark is checked first, BAD_METADATA at the metadata's first byte (not at the 0xFF)"),
    M("metadata_invalid_utf8", lambda ed: ed.set_bytes(ed.metadata_offset + 2, b"\xff").refresh(), "BAD_METADATA", ("META-1",), "validate", "byte 0xFF inside the metadata's first key (found unreached by the C loader's coverage)"),
    M("metadata_duplicate_key", _metadata_duplicate_key, "BAD_METADATA", ("META-2",), "validate", "a key given twice"),
    M("metadata_duplicate_empty_key", _metadata(b'{"":1,"":2}'), "BAD_METADATA", ("META-2",), "validate", "the empty key given twice"),
    M("metadata_escaped_duplicate_key", _metadata(rb'{"a":1,"\u0061":2}'), "BAD_METADATA", ("META-2",), "validate", "keys \"a\" and \"\\u0061\": duplicates once escapes are decoded"),
    M("metadata_nan", _metadata(b'{"a":NaN}'), "BAD_METADATA", ("META-2",), "validate", "NaN: not JSON, though Python's json reads it"),
    M("metadata_trailing_comma", _metadata(b'{"a":1,}'), "BAD_METADATA", ("META-2",), "validate", "a comma before the closing brace"),
    M("metadata_number_overflow", _metadata(b'{"a":1e400}'), "BAD_METADATA", ("META-5",), "validate", "1e400: not finite as binary64"),
    M("metadata_rounds_to_infinity", _metadata(b'{"a":1.7976931348623159e308}'), "BAD_METADATA", ("META-5",), "validate", "1.7976931348623159e308, above the midpoint between the largest binary64 and 2**1024: rounded to nearest (ties to even) it is infinite"),
    M("metadata_number_too_long", _metadata(b'{"a":1' + b"0" * 100 + b"}"), "BAD_METADATA", ("META-5",), "validate", "an integer of 101 digits (over 100 bytes)"),
    M("metadata_lone_low_surrogate", _metadata(rb'{"a":"\udc00x"}'), "BAD_METADATA", ("META-5",), "validate", "the escape \\udc00, a low surrogate with no high one before it"),
    M("metadata_control_character", _metadata(b'{"a":"tab\there"}'), "BAD_METADATA", ("META-2",), "validate", "a raw tab (U+0009) inside a string"),
    M("metadata_number_exponent_too_long", _metadata(b'{"a":1' + b"0" * 94 + b"e+0001}"), "BAD_METADATA", ("META-5",), "validate", "a number of 101 bytes counting its e and exponent sign (99 without them)"),
    M("metadata_lone_surrogate", _metadata(rb'{"a":"\ud800x"}'), "BAD_METADATA", ("META-5",), "validate", "the escape \\ud800 without its low half"),
    M("metadata_deep_and_malformed", _metadata(b'{"a":' + b"[" * 70 + b"}"), "LIMIT_METADATA", ("META-6", "LIM-5"), "validate", "70 unclosed arrays: the depth is measured before the grammar"),
    # payloads [ENT-10]
    M("tensor_checksum", _flip_payload, "BAD_TENSOR_CHECKSUM", ("ENT-10", "CRC-1", "RD-6"), "verify", "one payload bit flipped"),
)  # fmt: skip

MUTATION_BY_ID = {m.id: m for m in MUTATIONS}
