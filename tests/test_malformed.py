"""Malformed inputs: each one is rejected with its stable error code, never a crash.

Every case edits one thing in a valid file (``conformance.surgery.FileEditor``)
and, unless the case is about a checksum, recomputes the checksums, so that the
rule under test is the one that fires.  Case ids cite the requirement.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import write

import reference
from conformance.surgery import FileEditor
from reference.dump import main as dump_main
from spec.algorithms import bucket_of, fnv1a_64
from spec.constants import MAX_METADATA_LENGTH, MAX_TENSORS, SLAB_OFFSET
from spec.schema import ENTRY_SIZE, HEADER_SIZE

Edit = Callable[[FileEditor], object]


def _biggest(ed: FileEditor) -> int:
    """Position of the entry with the longest payload."""
    return int(np.argmax(ed.entries()["data_length"]))


def _nonempty(ed: FileEditor) -> list[int]:
    order = np.argsort(ed.entries()["data_offset"], kind="stable")
    return [int(i) for i in order if ed.entries()[i]["data_length"]]


def _dims_at(ed: FileEditor, i: int) -> int:
    return ed.dims_offset + 8 * int(ed.entries()[i]["dims_index"])


def _last_entry(ed: FileEditor) -> int:
    return int(ed.h("tensor_count")) - 1


def _overlap(ed: FileEditor) -> None:
    a, b = _nonempty(ed)[:2]
    ed.set_entry(b, data_offset=int(ed.entries()[a]["data_offset"])).refresh()


def _gap_before_index(ed: FileEditor) -> None:
    """Insert 64 KiB of zeros before the index, moving it one boundary later."""
    at = ed.index_offset
    ed.data[at:at] = bytes(65536)
    ed.set_header(index_offset=at + 65536, file_size=len(ed.data)).refresh()


def _unicode_garbage_name(ed: FileEditor) -> None:
    start, end = ed.name_range(_last_entry(ed))
    ed.set_bytes(start, b"\xff" * (end - start)).refresh()


def _empty_name(ed: FileEditor) -> None:
    i = _last_entry(ed)  # last in index order: nothing after it depends on its name_offset
    ed.set_entry(i, name_length=0).refresh()


def _bucket_table_decreasing(ed: FileEditor) -> None:
    table = np.frombuffer(ed.data, "<u4", (1 << ed.h("bucket_bits")) + 1, ed.buckets_offset)
    i = int(np.flatnonzero(np.diff(table.astype(np.int64)) > 0)[0])  # a non-empty bucket
    table[i + 1] = 0 if i == 0 else table[i] - 1 if table[i] else 0
    if table[i + 1] >= table[i]:
        table[i] += 1
    ed.refresh()


def _shape_overflow(ed: FileEditor) -> None:
    i = _biggest(ed)
    ed.set_bytes(_dims_at(ed, i), (1 << 63).to_bytes(8, "little")).refresh()


def _hidden_payload_in_slab_gap(ed: FileEditor) -> None:
    i = _nonempty(ed)[0]
    end = int(ed.entries()[i]["data_offset"] + ed.entries()[i]["data_length"])
    ed.set_bytes(end + 5, b"PK\x03\x04")  # not covered by any checksum: only padding rules catch it


# (case id, edit, expected code, level): level "open" fails on a plain open (RD-1),
# "validate" only under full validation (RD-2).
CASES: list[tuple[str, Edit, str, str]] = [
    ("HDR-1 bad magic", lambda ed: ed.set_bytes(0, b"\x89AWQ\n\n\x1a\n"), "BAD_MAGIC", "open"),
    ("HDR-1 text-mode CRLF damage", lambda ed: ed.set_bytes(4, b"\n\x1a\n\x02"), "BAD_MAGIC",
     "open"),
    ("VER-2 major 3", lambda ed: ed.set_header(version_major=3).refresh(), "UNSUPPORTED_VERSION",
     "open"),
    ("VER-2 major 1 unrefreshed", lambda ed: ed.set_header(version_major=1), "UNSUPPORTED_VERSION",
     "open"),
    ("HDR-4 header checksum", lambda ed: ed.flip_bit(0x48, 0), "BAD_HEADER_CHECKSUM", "open"),
    ("VER-3 unknown required flag", lambda ed: ed.set_header(required_flags=1 << 17).refresh(),
     "UNKNOWN_REQUIRED_FLAG", "open"),
    ("HDR-5 reserved byte set", lambda ed: ed.set_header(reserved1=b"\x00\x01\x00").refresh(),
     "BAD_HEADER_FIELD", "open"),
    ("HDR-2 alignment", lambda ed: ed.set_header(alignment=4096).refresh(), "BAD_HEADER_FIELD",
     "open"),
    ("HDR-2 slab offset", lambda ed: ed.set_header(slab_offset=0x20000).refresh(),
     "BAD_HEADER_FIELD", "open"),
    ("LIM-2 tensor count", lambda ed: ed.set_header(tensor_count=MAX_TENSORS + 1).refresh(
        entries=False, metadata=False), "LIMIT_TENSORS", "open"),
    ("LIM-2 2**40 tensors", lambda ed: ed.set_header(tensor_count=1 << 40).refresh(
        entries=False, metadata=False), "LIMIT_TENSORS", "open"),
    ("IDX-5 bucket bits", lambda ed: ed.set_header(bucket_bits=20).refresh(entries=False,
     metadata=False), "BAD_INDEX_LAYOUT", "open"),
    ("LIM-5 metadata length", lambda ed: ed.set_header(
        metadata_length=MAX_METADATA_LENGTH + 1).refresh(entries=False, metadata=False),
     "LIMIT_METADATA", "open"),
    ("IDX-3 names length", lambda ed: ed.set_header(names_length=1 << 60).refresh(
        entries=False, metadata=False), "BAD_INDEX_LAYOUT", "open"),
    ("FILE-2 longer than header says", lambda ed: ed.data.extend(bytes(16)), "FILE_SIZE_MISMATCH",
     "open"),
    ("HDR-3 index offset misaligned", lambda ed: ed.set_header(index_offset=ed.index_offset + 8)
     .refresh(entries=False, metadata=False, trailer=False), "BAD_HEADER_FIELD", "open"),
    ("IDX-3 index length", lambda ed: ed.set_header(index_length=ed.h("index_length") - 8)
     .refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT", "open"),
    ("TRL-1 trailer magic", lambda ed: ed.set_bytes(len(ed.data) - 1, b"\r"), "BAD_TRAILER_MAGIC",
     "open"),
    ("TRL-2 trailer checksum", lambda ed: ed.flip_bit(len(ed.data) - 20, 3),
     "BAD_TRAILER_CHECKSUM", "open"),
    ("TRL-3 trailer disagrees", lambda ed: ed.set_trailer(
        index_offset=ed.index_offset + 65536).refresh_trailer_crc(), "TRAILER_MISMATCH", "open"),
    ("IDX-4 index checksum", lambda ed: ed.flip_bit(ed.names_offset, 0), "BAD_INDEX_CHECKSUM",
     "validate"),
    ("IDX-5 bucket table decreasing", _bucket_table_decreasing, "BAD_BUCKET_TABLE", "validate"),
    ("ENT-9 entry checksum", lambda ed: ed.flip_bit(ed.entry_offset(0) + 8, 1).refresh(
        entries=False), "BAD_ENTRY_CHECKSUM", "validate"),
    ("ENT-1 entry flags", lambda ed: ed.set_entry(0, flags=1).refresh(), "BAD_ENTRY_FIELD",
     "validate"),
    ("ENT-2 name offset not canonical", lambda ed: ed.set_entry(0, name_offset=1).refresh(),
     "BAD_ENTRY_FIELD", "validate"),
    ("ENT-4 unknown dtype", lambda ed: ed.set_entry(0, dtype=99).refresh(), "BAD_DTYPE",
     "validate"),
    ("LAY-1 reserved layout", lambda ed: ed.set_entry(0, layout=7).refresh(), "BAD_LAYOUT",
     "validate"),
    ("LAY-2 dense with bits", lambda ed: ed.set_entry(0, bits=4).refresh(), "BAD_QUANT_FIELDS",
     "validate"),
    ("IDX-7 name hash", lambda ed: ed.set_entry(0, name_hash=int(ed.entries()[0]["name_hash"]) ^ 1)
     .refresh(), "BAD_NAME_HASH", "validate"),
    ("NAME-1 empty name", _empty_name, "EMPTY_NAME", "validate"),
    ("NAME-2 invalid UTF-8", _unicode_garbage_name, "BAD_NAME_UTF8", "validate"),
    ("LIM-3 name length", lambda ed: ed.set_entry(0, name_length=1025).refresh(entries=False),
     "LIMIT_NAME_LENGTH", "validate"),
    ("LIM-4 too many dims", lambda ed: ed.set_entry(0, ndim=9).refresh(entries=False),
     "LIMIT_DIMS", "validate"),
    ("ENT-5 shape overflow", _shape_overflow, "BAD_SHAPE", "validate"),
    ("ENT-6 length not shape", lambda ed: ed.set_entry(_biggest(ed), data_length=int(
        ed.entries()[_biggest(ed)]["data_length"]) - 4).refresh(), "BAD_LENGTH", "validate"),
    ("SLAB-2 misaligned offset", lambda ed: ed.set_entry(_biggest(ed), data_offset=int(
        ed.entries()[_biggest(ed)]["data_offset"]) + 8).refresh(), "MISALIGNED_OFFSET", "validate"),
    ("SLAB-3 payload past the slab", lambda ed: ed.set_entry(_biggest(ed), data_offset=int(
        ed.index_offset)).refresh(), "OUT_OF_BOUNDS", "validate"),
    ("SLAB-3 payload before the slab", lambda ed: ed.set_entry(_biggest(ed), data_offset=0)
     .refresh(), "OUT_OF_BOUNDS", "validate"),
    ("SLAB-4 overlapping payloads", _overlap, "OVERLAP", "validate"),
    ("SLAB-5 gap before the index", _gap_before_index, "SLAB_GAP", "validate"),
    ("PAD-1 hidden bytes in header padding", lambda ed: ed.set_bytes(0x8000, b"\x01"),
     "NONZERO_PADDING", "validate"),
    ("PAD-2 hidden payload in a slab gap", _hidden_payload_in_slab_gap, "NONZERO_PADDING",
     "validate"),
    ("META-4 metadata checksum", lambda ed: ed.set_header(metadata_crc=1).refresh(
        metadata=False), "BAD_METADATA_CHECKSUM", "validate"),
    ("META-2 metadata not JSON", lambda ed: ed.set_bytes(ed.metadata_offset, b"[").refresh(),
     "BAD_METADATA", "validate"),
]  # fmt: skip


def _make(sample_bytes: bytes, tmp_path: Path, edit: Edit) -> Path:
    ed = FileEditor(sample_bytes)
    edit(ed)
    path = tmp_path / "bad.awq2"
    path.write_bytes(ed.bytes())
    return path


@pytest.mark.parametrize(("case", "edit", "code", "level"), CASES, ids=[c[0] for c in CASES])
def test_malformed_input_is_rejected_with_its_code(sample_bytes, tmp_path, case, edit, code, level):
    path = _make(sample_bytes, tmp_path, edit)
    if level == "validate":
        with reference.open(path) as reader:  # RD-1 alone accepts it: the check is in RD-2
            with pytest.raises(reference.FormatError) as info:
                reader.validate()
    else:
        with pytest.raises(reference.FormatError) as info:
            reference.open(path)
    assert info.value.code == code, str(info.value)
    assert info.value.offset is not None
    assert set(info.value.requirements), "every code cites its requirements"


def test_every_structural_boundary_truncation_is_truncated(sample_bytes, tmp_path):
    """FILE-1: cut at each boundary between structures, and one byte either side."""
    ed = FileEditor(sample_bytes)
    boundaries = {0, 1, 8, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 32, SLAB_OFFSET,
                  ed.index_offset, ed.entries_offset, ed.entries_offset + ENTRY_SIZE,
                  ed.dims_offset, ed.names_offset, ed.metadata_offset, ed.trailer_offset,
                  len(sample_bytes) - 8}  # fmt: skip
    for i in _nonempty(ed):
        start = int(ed.entries()[i]["data_offset"])
        boundaries |= {start, start + int(ed.entries()[i]["data_length"])}
    cuts = sorted({c + d for c in boundaries for d in (-1, 0, 1)} - {len(sample_bytes)})
    path = tmp_path / "cut.awq2"
    for cut in cuts:
        if cut < 0:
            continue
        path.write_bytes(sample_bytes[:cut])
        with pytest.raises(reference.TruncatedError) as info:
            reference.open(path)
        assert info.value.code == "TRUNCATED", (cut, str(info.value))


def test_unknown_optional_flags_and_minor_version_are_accepted(sample_bytes, tmp_path):
    """VER-1, VER-4, HDR-5: a later minor may use reserved bytes and optional flags."""
    path = _make(
        sample_bytes,
        tmp_path,
        lambda ed: ed.set_header(
            optional_flags=0xFFFF_0000_0000_0001, version_minor=7, reserved2=b"later!!!"
        ).refresh(),
    )
    with reference.open(path, validate=True) as reader:
        assert reader.version == (2, 7)
        reader.verify()


def test_tensor_checksum_is_caught_by_verify_only(sample_bytes, tmp_path):
    """ENT-10: payload damage is found on request."""
    ed = FileEditor(sample_bytes)
    i = _biggest(ed)
    path = _make(
        sample_bytes, tmp_path, lambda e: e.flip_bit(int(e.entries()[i]["data_offset"]), 0)
    )
    with reference.open(path, validate=True) as reader:
        with pytest.raises(reference.ChecksumError) as info:
            reader.verify()
    assert info.value.code == "BAD_TENSOR_CHECKSUM"


def test_duplicate_names_are_rejected(tmp_path):
    """NAME-3: two entries with one name (built in one bucket so the order check sees them)."""
    names = [f"t{i}" for i in range(64)]
    first = names[0]
    twin = next(
        n
        for n in names[1:]
        if bucket_of(fnv1a_64(n.encode()), 1) == bucket_of(fnv1a_64(first.encode()), 1)
        and len(n) == len(first)
    )
    path = write(tmp_path / "dup.awq2", {first: np.zeros(2, np.int8), twin: np.ones(2, np.int8)})
    ed = FileEditor(path.read_bytes())
    j = ed.entry_of(twin)
    start, _ = ed.name_range(j)
    ed.set_bytes(start, first.encode()).set_entry(j, name_hash=fnv1a_64(first.encode())).refresh()
    # both names are in one bucket and "t0" sorts first, so the index order stays valid
    path.write_bytes(ed.bytes())
    with reference.open(path) as reader:
        with pytest.raises(reference.FormatError) as info:
            reader.validate()
    assert info.value.code == "DUPLICATE_NAME", str(info.value)


def test_lookup_checks_its_bucket_without_reading_other_entries(sample_bytes, tmp_path):
    """IDX-9 and the O(1) open: damage to one entry does not stop lookups of others,
    but a bucket table that hides an entry is caught by the lookup itself."""
    ed = FileEditor(sample_bytes)
    victim = 0
    bits = ed.h("bucket_bits")
    table = np.frombuffer(ed.data, "<u4", (1 << bits) + 1, ed.buckets_offset).astype(int)
    ed.flip_bit(ed.entry_offset(victim) + 8, 0).refresh(entries=False)
    path = tmp_path / "one_bad_entry.awq2"
    path.write_bytes(ed.bytes())

    def reads(name: str) -> range:  # entry positions a lookup of `name` reads [IDX-9]
        b = bucket_of(fnv1a_64(name.encode()), bits)
        return range(table[b] - 1, table[b + 1] + 1)

    with reference.open(path) as reader:
        far = [n for n in reader_names(sample_bytes, tmp_path) if victim not in reads(n)]
        assert far, "the sample needs a name whose lookup does not touch entry 0"
        for name in far:
            reader.tensor(name)  # only its own bucket and neighbours are read
        with pytest.raises(reference.FormatError):
            reader.validate()

    ed = FileEditor(sample_bytes)
    table = np.frombuffer(ed.data, "<u4", (1 << ed.h("bucket_bits")) + 1, ed.buckets_offset)
    b = int(np.flatnonzero(np.diff(table.astype(np.int64)) > 0)[0])
    table[b] += 1  # bucket b now skips its first entry
    ed.refresh()
    path.write_bytes(ed.bytes())
    hidden = next(
        i
        for i in range(len(ed.entries()))
        if bucket_of(int(ed.entries()[i]["name_hash"]), ed.h("bucket_bits")) == b
    )
    start, end = ed.name_range(hidden)
    name = bytes(ed.data[start:end]).decode()
    with reference.open(path) as reader:
        with pytest.raises(reference.FormatError) as info:
            reader.entry(name)
        assert info.value.code == "BAD_BUCKET_TABLE"


def reader_names(data: bytes, tmp_path: Path) -> list[str]:
    path = tmp_path / "names.awq2"
    path.write_bytes(data)
    with reference.open(path) as reader:
        return reader.names()


def test_flipping_any_header_or_index_byte_makes_dump_fail_cleanly(sample_bytes, tmp_path, capsys):
    """Every byte of the header, the index and the trailer is covered by a check (issue 2)."""
    ed = FileEditor(sample_bytes)
    covered = [*range(0, HEADER_SIZE), *range(ed.index_offset, len(sample_bytes))]
    path = tmp_path / "flip.awq2"
    for offset in covered:
        data = bytearray(sample_bytes)
        data[offset] ^= 0xFF
        path.write_bytes(data)
        status = dump_main([str(path), "--json"])
        out = capsys.readouterr().out
        assert status == 1, f"byte 0x{offset:x} flipped, dump exited {status}"
        assert '"code"' in out
