"""Malformed inputs: each one is rejected with its stable error code, never a crash.

The catalogue (``tools.vectors.mutations``, also the source of the must-reject
conformance vectors) edits one thing in a valid file and, unless the case is
about a checksum, recomputes the checksums, so the rule under test is the one
that fires.  The tests below add sweeps the catalogue cannot list one by one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import reference
from reference.dump import main as dump_main
from spec.algorithms import bucket_of, fnv1a_64
from spec.constants import SLAB_OFFSET
from spec.schema import ENTRY_SIZE, HEADER_SIZE
from tools.vectors.generate import BASES as BASES_BY_NAME
from tools.vectors.generate import base_bytes
from tools.vectors.mutations import MUTATIONS, nonempty
from tools.vectors.surgery import FileEditor

BASES = {name: base_bytes(name) for name in BASES_BY_NAME}


def _make(data: bytes, tmp_path: Path, edit) -> Path:
    ed = FileEditor(data)
    edit(ed)
    path = tmp_path / "edited.awq2"
    path.write_bytes(ed.bytes())
    return path


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.id for m in MUTATIONS])
def test_malformed_input_is_rejected_with_its_code(tmp_path, mutation):
    """Every entry of the malformed-file catalogue, at the check level it names (RD-1, RD-2)."""
    ed = FileEditor(BASES[mutation.base])
    mutation.edit(ed)
    path = tmp_path / "bad.awq2"
    path.write_bytes(ed.bytes())
    if mutation.level == "open":
        with pytest.raises(reference.FormatError) as info:
            reference.open(path)
    else:
        with reference.open(path) as reader:  # the O(1) open accepts it: the check is later
            with pytest.raises(reference.FormatError) as info:
                reader.validate() if mutation.level == "validate" else reader.verify()
            if mutation.level == "verify":
                reader.validate()  # only the payload checksum is wrong
    assert info.value.code == mutation.code, str(info.value)
    assert info.value.offset is not None
    assert set(mutation.requirements) & set(info.value.requirements) or mutation.code == "TRUNCATED"


def test_every_structural_boundary_truncation_is_truncated(sample_bytes, tmp_path):
    """FILE-1: cut at each boundary between structures, and one byte either side."""
    ed = FileEditor(sample_bytes)
    boundaries = {0, 1, 8, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 32, SLAB_OFFSET,
                  ed.index_offset, ed.entries_offset, ed.entries_offset + ENTRY_SIZE,
                  ed.dims_offset, ed.names_offset, ed.metadata_offset, ed.trailer_offset,
                  len(sample_bytes) - 8}  # fmt: skip
    for i in nonempty(ed):
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
    """VER-1, VER-4, VER-5, HDR-5: a later minor may use reserved bytes and optional flags."""
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


@pytest.mark.slow
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
