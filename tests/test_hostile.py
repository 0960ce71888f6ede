"""Hostile inputs: bit-flip sweeps, every limit at its edges, huge declared sizes, processes
killed while writing, and a file truncated under a memory map.

The bit-flip sweeps flip, one at a time, every bit of the header, of the trailer and of the
whole index region of the conformance ``sample`` base (``open(validate=True)`` must reject
each), and every bit of every payload of ``y_all_dtypes`` (``verify()`` must catch each).  A
``verify()`` costs about half a millisecond (it validates first), so for the ``sample``
base, whose payloads hold about a million bits, only a representative subset of payload bits
is swept: every bit of the first, a middle and the last 64 bytes of each payload (all of a
shorter one).  CRC-32C detects every burst of up to 32 flipped bits, so the subset stands
for the rest; the sweeps check that every payload is covered by a checksum that is checked.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import reference
from reference.examples import write_checkpoint
from reference.write.writer import PARTIAL_SUFFIX, stale_partials
from spec.algorithms import bucket_bits_for, bucket_of, fnv1a_64
from spec.constants import (
    MAX_BUCKET_BITS,
    MAX_BUCKET_LENGTH,
    MAX_DIMS,
    MAX_METADATA_DEPTH,
    MAX_METADATA_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TENSORS,
)
from spec.schema import HEADER_FIELD_OFFSET, HEADER_SIZE, TRAILER_SIZE
from tools.vectors.fuzz_findings import FUZZ_FINDINGS, V1_FINDINGS
from tools.vectors.generate import base_bytes
from tools.vectors.surgery import FileEditor

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "conformance" / "vectors"
SAMPLE = base_bytes("sample")


def _flip_sweep(path: Path, data: bytes, offsets: range, check: Callable[[], None]) -> int:
    """Flip each bit of ``data[offsets]`` in the file at ``path``, in place, call ``check``
    (which must raise FormatError, returned to the caller's assertions), and restore."""
    fd = os.open(path, os.O_RDWR)
    flips = 0
    try:
        for offset in offsets:
            for bit in range(8):
                os.pwrite(fd, bytes([data[offset] ^ (1 << bit)]), offset)
                check_flip(check, offset, bit)
                flips += 1
            os.pwrite(fd, data[offset : offset + 1], offset)
    finally:
        os.close(fd)
    return flips


def check_flip(check: Callable[[], None], offset: int, bit: int) -> None:
    try:
        check()
    except reference.FormatError:
        return
    pytest.fail(f"bit {bit} of byte 0x{offset:x} flipped and the file was accepted")


# ------------------------------------------------------------------------------ bit flips


def test_every_header_and_trailer_bit_flip_is_rejected(tmp_path):
    """HDR-4, TRL-1..3: each of the 1024 header bits and 256 trailer bits is covered."""
    path = tmp_path / "flip.awq2"
    path.write_bytes(SAMPLE)

    def check() -> None:
        reference.open(path, validate=True).close()

    n = _flip_sweep(path, SAMPLE, range(HEADER_SIZE), check)
    n += _flip_sweep(path, SAMPLE, range(len(SAMPLE) - TRAILER_SIZE, len(SAMPLE)), check)
    assert n == 8 * (HEADER_SIZE + TRAILER_SIZE)
    with reference.open(path, validate=True) as reader:  # restored
        reader.verify()


@pytest.mark.slow
def test_every_index_bit_flip_is_rejected_by_validation(tmp_path):
    """IDX-4: every bit of the index region (bucket table, entries, dims, names, metadata)
    is under the index checksum, the first thing validation checks."""
    path = tmp_path / "flip.awq2"
    path.write_bytes(SAMPLE)
    ed = FileEditor(SAMPLE)
    index = range(ed.index_offset, ed.index_offset + ed.h("index_length"))
    assert index.stop == len(SAMPLE) - TRAILER_SIZE
    codes = set()

    def check() -> None:
        try:
            reference.open(path, validate=True).close()
        except reference.FormatError as exc:
            codes.add(exc.code)
            raise

    assert _flip_sweep(path, SAMPLE, index, check) == 8 * len(index)
    assert codes == {"BAD_INDEX_CHECKSUM"}


def _payload_bits(data: bytes, window: int | None) -> list[range]:
    """Byte ranges of every payload: all of it, or its first, middle and last ``window``."""
    ed = FileEditor(data)
    out = []
    for e in ed.entries():
        start, length = int(e["data_offset"]), int(e["data_length"])
        if not length:
            continue
        if window is None or length <= 3 * window:
            out.append(range(start, start + length))
        else:
            middle = start + (length - window) // 2
            out += [range(start, start + window), range(middle, middle + window),
                    range(start + length - window, start + length)]  # fmt: skip
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("base", "window"),
    [("sample", 64), ("y_all_dtypes", None)],
    ids=["sample-first-middle-last-64-bytes", "y_all_dtypes-every-payload-bit"],
)
def test_payload_bit_flips_are_caught_by_verify(tmp_path, base, window):
    """ENT-10: a flipped payload bit passes validation (payloads are not read) and is
    caught by verify() with BAD_TENSOR_CHECKSUM; the reader is opened once and sees each
    flip through its memory map."""
    data = SAMPLE if base == "sample" else (VECTORS / f"{base}.awq2").read_bytes()
    path = tmp_path / "flip.awq2"
    path.write_bytes(data)
    codes = set()
    with reference.open(path, validate=True) as reader:

        def check() -> None:
            try:
                reader.verify()
            except reference.FormatError as exc:
                codes.add(exc.code)
                raise

        flips = sum(_flip_sweep(path, data, r, check) for r in _payload_bits(data, window))
        reader.verify()  # every byte restored
    assert codes == {"BAD_TENSOR_CHECKSUM"}
    assert flips >= (3000 if base == "sample" else 1000)


# ------------------------------------------------------------------------------ surgery helpers


def _splice(ed: FileEditor, start: int, end: int, new: bytes) -> int:
    """Replace ``data[start:end]`` inside the index by ``new``; fix the index length and the
    file size (the caller fixes counts and offsets, then refreshes).  Returns the growth."""
    ed.data[start:end] = new
    grow = len(new) - (end - start)
    ed.set_header(index_length=ed.h("index_length") + grow, file_size=len(ed.data))
    return grow


def _replace_name(ed: FileEditor, i: int, new: bytes) -> None:
    """Give entry i a name of any length (hash, pool, following offsets and sizes fixed)."""
    start, end = ed.name_range(i)
    own = int(ed.entries()[i]["name_offset"])
    grow = _splice(ed, start, end, new)
    for e in ed.entries():
        if int(e["name_offset"]) > own:
            e["name_offset"] = int(e["name_offset"]) + grow
    ed.set_entry(i, name_length=len(new), name_hash=fnv1a_64(new))
    ed.set_header(names_length=ed.h("names_length") + grow).refresh()


def _replace_dims(ed: FileEditor, i: int, dims: tuple[int, ...]) -> None:
    """Give entry i another shape (any ndim); data_length is left as it is."""
    own, ndim = int(ed.entries()[i]["dims_index"]), int(ed.entries()[i]["ndim"])
    start = ed.dims_offset + 8 * own  # (no NumPy view may be held while the bytes move)
    grow = _splice(ed, start, start + 8 * ndim, np.array(dims, "<u8").tobytes()) // 8
    for other in ed.entries():
        if int(other["dims_index"]) > own:
            other["dims_index"] = int(other["dims_index"]) + grow
    ed.set_entry(i, ndim=len(dims))
    ed.set_header(dims_count=ed.h("dims_count") + grow).refresh()


def _replace_metadata(ed: FileEditor, raw: bytes) -> None:
    ed.replace_metadata(raw).refresh()


def _code(path: Path, *, lookups: bool = True) -> str | None:
    """The first error code of open + validate (+ every lookup), or None when accepted."""
    try:
        with reference.open(path, validate=True) as reader:
            if lookups:
                for name in reader.names():
                    reader.tensor(name)
            reader.verify()
    except reference.FormatError as exc:
        return exc.code
    return None


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------ limits


@pytest.mark.parametrize("count", [MAX_TENSORS - 1, MAX_TENSORS, MAX_TENSORS + 1])
def test_max_tensors_at_its_edges(tmp_path, count):
    """LIM-2: tensor_count over max_tensors is LIMIT_TENSORS at open; at or below it the
    limit passes and the next check (the index length) is what refuses this edited file."""
    ed = FileEditor(SAMPLE).set_header(tensor_count=count, bucket_bits=bucket_bits_for(count))
    ed.refresh(entries=False, metadata=False)
    path = _write(tmp_path, "count.awq2", ed.bytes())
    with pytest.raises(reference.FormatError) as info:
        reference.open(path)
    if count > MAX_TENSORS:
        assert info.value.code == "LIMIT_TENSORS"
    else:
        assert info.value.code == "BAD_INDEX_LAYOUT"
        assert info.value.offset == HEADER_FIELD_OFFSET["index_length"]


@pytest.mark.parametrize(
    ("count", "bits", "field"),
    [
        (MAX_TENSORS, MAX_BUCKET_BITS, "index_length"),  # canonical, at the limit: passes
        (MAX_TENSORS, MAX_BUCKET_BITS + 1, "bucket_bits"),  # over max_bucket_bits
        (MAX_TENSORS // 2 + 1, MAX_BUCKET_BITS, "index_length"),  # smallest count for 24 bits
        (MAX_TENSORS // 2, MAX_BUCKET_BITS, "bucket_bits"),  # one bit too many
    ],
)
def test_max_bucket_bits_at_its_edges(tmp_path, count, bits, field):
    """LIM-7, IDX-5: bucket_bits is canonical for tensor_count, so it can reach 24 bits
    (max_tensors entries) and never 25; the error points at the field that fails."""
    ed = FileEditor(SAMPLE).set_header(tensor_count=count, bucket_bits=bits)
    path = _write(tmp_path, "bits.awq2", ed.refresh(entries=False, metadata=False).bytes())
    with pytest.raises(reference.FormatError) as info:
        reference.open(path)
    assert info.value.code == "BAD_INDEX_LAYOUT"
    assert info.value.offset == HEADER_FIELD_OFFSET[field]


def _same_bucket_name(length: int, bucket: int, bits: int) -> bytes:
    """A name of ``length`` bytes ("L..." then one letter) that falls in ``bucket``."""
    for c in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789":
        name = b"L" * (length - 1) + bytes([c])
        if bucket_of(fnv1a_64(name), bits) == bucket:
            return name
    raise AssertionError("no name found")


def test_max_name_length_written_by_the_writer(tmp_path):
    """LIM-3: 1023- and 1024-byte names are written and read back; 1025 is refused."""
    for length in (MAX_NAME_LENGTH - 1, MAX_NAME_LENGTH):
        name = "n" * (length - 2) + "é"  # multi-byte UTF-8 at the end: bytes are counted
        path = reference.save(tmp_path / f"{length}.awq2", {name: np.ones(2, np.int8)})
        assert _code(path) is None
        with reference.open(path) as reader:
            assert reader.entry(name).name == name
    with pytest.raises(ValueError, match="max_name_length"):
        reference.save(tmp_path / "1025.awq2", {"n" * 1023 + "é": np.ones(2, np.int8)})
    assert not list(tmp_path.glob("1025*")) and not list(tmp_path.glob(f"*{PARTIAL_SUFFIX}"))


@pytest.mark.parametrize("length", [MAX_NAME_LENGTH - 1, MAX_NAME_LENGTH, MAX_NAME_LENGTH + 1])
def test_max_name_length_by_editing(tmp_path, length):
    """LIM-3: a real name of 1023, 1024 or 1025 bytes put into a written file (pool, hash and
    offsets fixed, the name kept in its bucket): accepted, accepted, LIMIT_NAME_LENGTH."""
    long = "L" * MAX_NAME_LENGTH
    src = reference.save(tmp_path / "src.awq2", {long: np.ones(3, np.int16), "b": np.ones(1)})
    ed = FileEditor(src.read_bytes())
    i = ed.entry_of(long)
    bits = ed.h("bucket_bits")
    new = _same_bucket_name(length, bucket_of(fnv1a_64(long.encode()), bits), bits)
    _replace_name(ed, i, new)
    path = _write(tmp_path, "edited.awq2", ed.bytes())
    if length <= MAX_NAME_LENGTH:
        assert _code(path) is None
        with reference.open(path) as reader:
            assert reader.tensor(new.decode()).tolist() == [1, 1, 1]
    else:
        assert _code(path) == "LIMIT_NAME_LENGTH"
        with reference.open(path) as reader, pytest.raises(reference.LimitError):
            reader.entry(new.decode())  # the lazy lookup checks it too


@pytest.mark.parametrize("ndim", [MAX_DIMS - 1, MAX_DIMS, MAX_DIMS + 1])
def test_max_dims_at_its_edges(tmp_path, ndim):
    """LIM-4: 7 and 8 dimensions are written and read; 9 is refused by the writer, and a
    9-dimensional entry made by editing is LIMIT_DIMS."""
    shape = (2,) + (1,) * (ndim - 2) + (3,)
    array = np.arange(6, dtype=np.float32).reshape(shape) if ndim <= MAX_DIMS else None
    if array is not None:
        path = reference.save(tmp_path / "w.awq2", {"t": array, "u": np.ones(1)})
        assert _code(path) is None
        with reference.open(path) as reader:
            assert reader.tensor("t").shape == shape
    else:
        with pytest.raises(reference.LimitError), reference.Writer(tmp_path / "w.awq2") as w:
            w.add_bytes("t", "F32", shape, [bytes(24)])
        assert not list(tmp_path.glob("w.awq2*")) and not list(tmp_path.glob(f"*{PARTIAL_SUFFIX}"))
    # by editing a written 8-dimensional entry (one size-1 dimension removed or added)
    eight = np.arange(6, dtype=np.float32).reshape((2,) + (1,) * 6 + (3,))
    src = reference.save(tmp_path / "src.awq2", {"t": eight, "u": np.ones(1)})
    ed = FileEditor(src.read_bytes())
    _replace_dims(ed, ed.entry_of("t"), shape)
    path = _write(tmp_path, "edited.awq2", ed.bytes())
    assert _code(path) == (None if ndim <= MAX_DIMS else "LIMIT_DIMS")


def _metadata_of_length(length: int) -> dict[str, str]:
    doc = {"pad": ""}
    overhead = len(json.dumps(doc, separators=(",", ":")))
    return {"pad": "x" * (length - overhead)}


def test_max_metadata_length_at_its_edges(tmp_path):
    """LIM-5: metadata of 16 MiB - 1 and 16 MiB is written and read; 16 MiB + 1 is refused
    by the writer, and by the reader at open (before it reads the metadata)."""
    for length in (MAX_METADATA_LENGTH - 1, MAX_METADATA_LENGTH):
        meta = _metadata_of_length(length)
        path = reference.save(tmp_path / "m.awq2", {"x": np.ones(1)}, meta)
        with reference.open(path, validate=True) as reader:
            assert reader.header["metadata_length"] == length
            assert reader.metadata == meta
    with pytest.raises(ValueError, match="over the limit"):
        reference.save(tmp_path / "big.awq2", {"x": np.ones(1)},
                       _metadata_of_length(MAX_METADATA_LENGTH + 1))  # fmt: skip
    ed = FileEditor(path.read_bytes())
    start = ed.metadata_offset
    raw = bytes(ed.data[start : start + MAX_METADATA_LENGTH])
    _replace_metadata(ed, raw[:-1] + b" }")  # JSON whitespace: one byte over the limit
    path = _write(tmp_path, "edited.awq2", ed.bytes())
    with pytest.raises(reference.LimitError) as info:
        reference.open(path)
    assert info.value.code == "LIMIT_METADATA"


def _nested(depth: int) -> dict:
    doc: dict = {"leaf": 1}
    for _ in range(depth - 1):
        doc = {"a": doc}
    return doc


@pytest.mark.parametrize(
    "depth", [MAX_METADATA_DEPTH - 1, MAX_METADATA_DEPTH, MAX_METADATA_DEPTH + 1]
)
def test_max_metadata_depth_at_its_edges(tmp_path, depth):
    """LIM-5: a real metadata document nested 63, 64 or 65 levels: written and read,
    written and read, refused by the writer and (edited in) LIMIT_METADATA."""
    src = reference.save(tmp_path / "src.awq2", {"x": np.ones(1)}, {"a": 1})
    doc = _nested(depth)
    if depth <= MAX_METADATA_DEPTH:
        path = reference.save(tmp_path / "w.awq2", {"x": np.ones(1)}, doc)
        with reference.open(path, validate=True) as reader:
            assert reader.metadata == doc
    else:
        with pytest.raises(ValueError, match="nests deeper"):
            reference.save(tmp_path / "w.awq2", {"x": np.ones(1)}, doc)
    ed = FileEditor(src.read_bytes())
    _replace_metadata(ed, json.dumps(doc, separators=(",", ":")).encode())
    path = _write(tmp_path, "edited.awq2", ed.bytes())
    assert _code(path) == (None if depth <= MAX_METADATA_DEPTH else "LIMIT_METADATA")


def test_metadata_nested_past_the_recursion_limit_is_a_limit_error(tmp_path):
    """LIM-5: 100 000 nested arrays (200 kB) are LIMIT_METADATA, not a RecursionError."""
    ed = FileEditor(SAMPLE)
    _replace_metadata(ed, b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    path = _write(tmp_path, "deep.awq2", ed.bytes())
    assert _code(path) == "LIMIT_METADATA"


@pytest.mark.parametrize(
    "length", [MAX_BUCKET_LENGTH - 1, MAX_BUCKET_LENGTH, MAX_BUCKET_LENGTH + 1]
)
def test_max_bucket_length_by_editing_the_bucket_table(tmp_path, length):
    """LIM-6: bucket 0 of the 100-tensor base stretched to 63, 64 or 65 entries.  At or
    under the limit the table passes its length check and the entries that do not belong
    to bucket 0 are what validation reports; over it, LIMIT_BUCKET, from validation and
    from a lookup that lands in that bucket."""
    ed = FileEditor(base_bytes("many"))
    bits = ed.h("bucket_bits")
    table = np.frombuffer(ed.data, "<u4", (1 << bits) + 1, ed.buckets_offset)
    table[1:] = np.maximum(table[1:], length)
    table[1] = length
    ed.refresh()
    path = _write(tmp_path, "bucket.awq2", ed.bytes())
    code = _code(path, lookups=False)
    if length <= MAX_BUCKET_LENGTH:
        assert code == "BAD_ENTRY_ORDER"
    else:
        assert code == "LIMIT_BUCKET"
        probe = next(n for n in (f"probe{i}" for i in range(10_000))
                     if bucket_of(fnv1a_64(n.encode()), bits) == 0)  # fmt: skip
        with reference.open(path) as reader, pytest.raises(reference.LimitError):
            reader.entry(probe)  # any name that hashes to bucket 0 reads that bucket


@pytest.mark.parametrize(
    "length", [MAX_BUCKET_LENGTH - 1, MAX_BUCKET_LENGTH, MAX_BUCKET_LENGTH + 1]
)
def test_max_bucket_length_with_real_colliding_names(tmp_path, length):
    """LIM-6: 100 tensors, 63 or 64 of whose names share one bucket, are written and every
    name is found; 65 in one bucket are refused by the writer."""
    bits = bucket_bits_for(100)
    same = [n for n in (f"c{i}" for i in range(20_000))
            if bucket_of(fnv1a_64(n.encode()), bits) == 0][:length]  # fmt: skip
    others = [n for n in (f"f{i}" for i in range(1000))
              if bucket_of(fnv1a_64(n.encode()), bits) != 0][: 100 - length]  # fmt: skip
    tensors = {n: np.zeros(0, np.float16) for n in same + others}
    if length > MAX_BUCKET_LENGTH:
        with pytest.raises(ValueError, match="max_bucket_length"):
            reference.save(tmp_path / "c.awq2", tensors)
        return
    path = reference.save(tmp_path / "c.awq2", tensors)
    assert _code(path) is None
    with reference.open(path) as reader:
        assert all(n in reader for n in same) and "c-absent" not in reader


# ------------------------------------------------------------------------------ huge sizes


def _big_entry(ed: FileEditor) -> int:
    return ed.entry_of("model.layers.0.mlp.big")


HUGE: dict[str, tuple[Callable[[FileEditor], object], str]] = {
    "tensor_count_2_40": (lambda ed: ed.set_header(tensor_count=1 << 40).refresh(entries=False, metadata=False), "LIMIT_TENSORS"),
    "tensor_count_2_40_canonical_bits": (lambda ed: ed.set_header(tensor_count=1 << 40, bucket_bits=40).refresh(entries=False, metadata=False), "LIMIT_TENSORS"),
    "names_length_2_60": (lambda ed: ed.set_header(names_length=1 << 60).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT"),
    "dims_count_2_60": (lambda ed: ed.set_header(dims_count=1 << 60).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT"),
    "metadata_length_2_60": (lambda ed: ed.set_header(metadata_length=1 << 60).refresh(entries=False, metadata=False), "LIMIT_METADATA"),
    "index_length_2_62": (lambda ed: ed.set_header(index_length=1 << 62).refresh(entries=False, metadata=False), "BAD_INDEX_LAYOUT"),
    "file_size_2_62": (lambda ed: ed.set_header(file_size=1 << 62).refresh(entries=False, metadata=False), "TRUNCATED"),
    "name_length_65535": (lambda ed: ed.set_entry(0, name_length=0xFFFF).refresh(entries=False), "LIMIT_NAME_LENGTH"),
    "ndim_255": (lambda ed: ed.set_entry(0, ndim=255).refresh(entries=False), "LIMIT_DIMS"),
    "shape_2_62_elements_i32": (lambda ed: _replace_dims(ed, _big_entry(ed), (1 << 31, 1 << 31)), "BAD_SHAPE"),
    "shape_2_62_elements_u8_length_kept": (lambda ed: (ed.set_entry(_big_entry(ed), dtype=2), _replace_dims(ed, _big_entry(ed), (1 << 31, 1 << 31))), "BAD_LENGTH"),
    "shape_2_62_elements_u8_length_2_62": (lambda ed: (ed.set_entry(_big_entry(ed), dtype=2, data_length=1 << 62), _replace_dims(ed, _big_entry(ed), (1 << 31, 1 << 31))), "OUT_OF_BOUNDS"),
    "empty_shape_2_64_minus_1": (lambda ed: _replace_dims(ed, ed.entry_of("empty"), (0, (1 << 64) - 1)), "BAD_SHAPE"),
    "data_length_2_64_minus_1": (lambda ed: ed.set_entry(_big_entry(ed), data_length=(1 << 64) - 1).refresh(), "BAD_LENGTH"),
}  # fmt: skip


@pytest.mark.parametrize("case", HUGE, ids=list(HUGE))
def test_huge_declared_sizes_are_rejected_before_allocating(tmp_path, case):
    """LIM-1, ENT-5: a file declaring 2**40 tensors, a 2**62-element shape or a huge name
    length is rejected (at open, by validation, and by the lazy lookups) with its code, and
    the reader's peak memory (tracemalloc: Python and NumPy allocations) stays under 16 MiB."""
    edit, code = HUGE[case]
    ed = FileEditor(SAMPLE)
    edit(ed)
    path = _write(tmp_path, "huge.awq2", ed.bytes())
    names = ["model.layers.0.mlp.big", "empty", "scalar", "model.norm.weight"]
    seen = []
    tracemalloc.start()
    try:
        try:
            reader = reference.open(path)
        except reference.FormatError as exc:
            seen.append(exc.code)
        else:
            with reader:
                for step in (reader.validate, *(lambda n=n: reader.tensor(n) for n in names)):
                    try:
                        step()
                    except (reference.FormatError, KeyError) as exc:
                        seen.append(getattr(exc, "code", "KeyError"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert seen and seen[0] == code, seen
    assert peak < 16 << 20, f"peak {peak / 2**20:.1f} MiB"


# ------------------------------------------------------------------------------ crash safety


def _save_then_exit(dest: Path, tensors: dict[str, np.ndarray]) -> None:
    reference.save(dest, tensors)
    os._exit(0)


def _check_destination(dest: Path, candidates: list[bytes]) -> None:
    """The destination is absent, or one of the complete files it may hold, and valid."""
    if not dest.exists():
        return
    data = dest.read_bytes()
    assert data in candidates, f"{dest.name}: {len(data)} bytes, not a complete file"
    with reference.open(dest, validate=True) as reader:
        reader.verify()


def _leftovers(dest: Path) -> list[Path]:
    return sorted(dest.parent.glob(f".{dest.name}.*{PARTIAL_SUFFIX}"))


WRITER_KILLS, CONVERTER_KILLS = 40, 12  # SIGKILLs that land while the process runs


@pytest.mark.slow
def test_writer_killed_at_random_points_never_publishes_a_partial_file(tmp_path):
    """WR-2: reference.save of 4 MiB in a child process, SIGKILLed at a random moment until
    40 kills have landed before it finished (half of the rounds over an older file at the
    destination): the destination is absent, the older file or the new complete file, and
    every temporary file left behind is one stale_partials() recognises."""
    rng = np.random.default_rng(7)
    new = {f"t{i}": rng.standard_normal(1 << 17).astype(np.float32) for i in range(8)}
    ctx = multiprocessing.get_context("fork")
    dest = tmp_path / "model.awq2"
    durations = []
    for _ in range(3):
        started = time.perf_counter()
        p = ctx.Process(target=_save_then_exit, args=(dest, new))
        p.start()
        p.join()
        durations.append(time.perf_counter() - started)
    duration = sorted(durations)[1]
    complete_new = dest.read_bytes()
    complete_old = reference.save(tmp_path / "old.awq2", {"old": np.arange(9)}).read_bytes()
    pick = random.Random(11)
    kills = rounds = 0
    while kills < WRITER_KILLS and rounds < 4 * WRITER_KILLS:
        rounds += 1
        if rounds % 2:
            dest.write_bytes(complete_old)
        else:
            dest.unlink(missing_ok=True)
        p = ctx.Process(target=_save_then_exit, args=(dest, new))
        p.start()
        time.sleep(pick.uniform(0, duration))
        os.kill(p.pid, signal.SIGKILL)  # our own child, by pid
        p.join()  # reaped: its pid is no longer alive
        kills += p.exitcode == -signal.SIGKILL
        _check_destination(dest, [complete_new, complete_old])
        assert _leftovers(dest) == stale_partials(dest)
    print(f"writer: {kills} kills in {rounds} rounds, save takes {duration * 1e3:.0f} ms")
    assert kills == WRITER_KILLS, f"{kills} kills in {rounds} rounds"
    assert _leftovers(dest), "some kills should have left a temporary file"
    for leftover in stale_partials(dest):
        leftover.unlink()


@pytest.mark.slow
def test_converter_killed_at_random_points_never_publishes_and_the_next_run_cleans_up(tmp_path):
    """V1-5, WR-2: ``python -m reference.convert`` SIGKILLed at a random moment after it
    started writing, until 12 kills have landed: the destination is absent or the complete
    verified file; what a killed run leaves is exactly stale_partials(), and the next run
    removes it (before it writes its own) and publishes a verified file."""
    src = write_checkpoint(tmp_path / "ckpt")
    dest = tmp_path / "out" / "model.awq2"
    dest.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "reference.convert", str(src), str(dest), "--quiet", "--overwrite"]

    def start(previous: list[Path]) -> subprocess.Popen[bytes]:
        """Start a run and return once it has created its temporary file (or ended)."""
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        while proc.poll() is None and not set(_leftovers(dest)) - set(previous):
            time.sleep(0.001)
        if proc.poll() is None:
            assert not set(previous) & set(_leftovers(dest)), "earlier partials not removed"
        return proc

    proc = start([])
    appeared = time.perf_counter()
    assert proc.wait(60) == 0
    window = time.perf_counter() - appeared
    complete = dest.read_bytes()
    pick = random.Random(5)
    kills = rounds = 0
    previous: list[Path] = []
    left_something = False
    while kills < CONVERTER_KILLS and rounds < 4 * CONVERTER_KILLS:
        rounds += 1
        if rounds % 3 == 0:
            dest.unlink(missing_ok=True)
        proc = start(previous)
        time.sleep(pick.uniform(0, window))
        proc.kill()  # SIGKILL, our own child
        kills += proc.wait(60) == -signal.SIGKILL
        _check_destination(dest, [complete])
        previous = _leftovers(dest)
        assert stale_partials(dest) == previous
        left_something |= bool(previous)
    print(f"converter: {kills} kills in {rounds} rounds, window {window * 1e3:.0f} ms")
    assert kills == CONVERTER_KILLS, f"{kills} kills in {rounds} rounds"
    assert left_something, "some kills should have left a temporary file"
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("removing a partial file") == len(previous)
    assert _leftovers(dest) == [] and stale_partials(dest) == []
    _check_destination(dest, [complete])


# ------------------------------------------------------------------------------ a file that changes


TRUNCATE_UNDER_READER = r"""
import os, sys
import numpy as np
import reference
path, copy = sys.argv[1], sys.argv[2] == "copy"
want = np.arange(1 << 18, dtype=np.float32)  # 1 MiB: 16 pages of 64 KiB
reference.save(path, {"w": want, "small": np.arange(3, dtype=np.int8)})
reader = reference.open(path, copy=copy)
view = reader.tensor("w")
os.truncate(path, 0)  # another process truncates (or rewrites) the file meanwhile
assert float(view.astype(np.float64).sum()) == float(want.astype(np.float64).sum())
assert reader.tensor("small").tolist() == [0, 1, 2]
out = np.empty(1 << 18, np.float32)
assert np.array_equal(reader.read_into("w", out), want)
reader.verify()
print("values intact")
"""


@pytest.mark.parametrize("mode", ["mmap", "copy"])
def test_file_truncated_under_the_reader(tmp_path, mode):
    """RD-4, RD-5: a memory-mapped file truncated while open kills the process with SIGBUS
    when a view is touched (documented on Reader); ``open(copy=True)``, the snapshot mode,
    reads the file into private memory, so the same sequence returns the right values and
    verify() still passes."""
    path = tmp_path / "shared.awq2"
    done = subprocess.run(
        [sys.executable, "-c", TRUNCATE_UNDER_READER, str(path), mode],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    if mode == "mmap":
        assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr)
    else:
        assert done.returncode == 0, done.stderr
        assert "values intact" in done.stdout


def test_copy_mode_agrees_with_the_memory_map_on_every_vector(tmp_path):
    """RD-5: open(copy=True), the snapshot mode, runs the same checks: every conformance
    vector gets the same verdict (and error code), and accepted ones the same tensors and
    read-only views."""
    manifest = json.loads((ROOT / "conformance" / "manifest.json").read_text(encoding="utf-8"))
    for v in (v for v in manifest["vectors"] if "file" in v):  # sets: tests/test_fileset.py
        path = ROOT / "conformance" / v["file"]
        results = []
        for copy in (False, True):
            try:
                with reference.open(path, validate=True, copy=copy) as reader:
                    reader.verify()
                    views = {n: reader.tensor(n) for n in reader.names()}
                    assert not any(view.flags.writeable for view in views.values())
                    tensors = {n: view.tobytes() for n, view in views.items()}
                    results.append(("accepted", tensors, reader.metadata))
            except reference.FormatError as exc:
                results.append(("rejected", exc.code, exc.offset))
        assert results[0] == results[1], v["id"]


#: Same-size rewrites, each with every checksum recomputed, that a lookup must catch [IDX-9,
#: ENT-7]: a payload moved into the index, a dimension of 2**63, a wrong length, a name
#: length over the limit, nine dimensions, a bucket bound out of order.
REWRITES = ("payload_past_slab", "shape_overflow", "length_not_shape", "name_too_long",
            "too_many_dims", "bucket_table_decreasing")  # fmt: skip


@pytest.mark.parametrize("mode", ["mmap", "copy"])
@pytest.mark.parametrize("mutation", REWRITES)
def test_file_rewritten_in_place_after_validation(tmp_path, mutation, mode):
    """RD-4: a validated file rewritten in place (same size, valid checksums, one entry or
    bucket bound now hostile) under a memory-mapped reader: the lookups that read the
    changed bytes check them again and raise the mutation's FormatError, and every other
    lookup returns the old tensor or a FormatError, never another exception.  RD-5: in
    snapshot mode (copy=True) the rewrite does not reach the reader at all."""
    from tools.vectors.mutations import MUTATION_BY_ID

    m = MUTATION_BY_ID[mutation]
    ed = FileEditor(SAMPLE)
    names = [bytes(ed.data[slice(*ed.name_range(i))]).decode() for i in range(len(ed.entries()))]
    m.edit(ed)
    hostile = ed.bytes()
    assert len(hostile) == len(SAMPLE)
    path = _write(tmp_path, "shared.awq2", SAMPLE)
    with reference.open(path, validate=True, copy=mode == "copy") as reader:
        before = {name: reader.tensor(name).tobytes() for name in names}
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, hostile, 0)  # another process rewrites the file in place
        finally:
            os.close(fd)
        codes = set()
        for name in names:
            try:
                got = reader.tensor(name).tobytes()
            except reference.FormatError as exc:
                codes.add(exc.code)
                continue
            assert got == before[name], name  # the rewrite touched no payload
        if mode == "copy":
            assert codes == set()
            reader.verify()
        else:
            assert m.code in codes, codes
            with pytest.raises(reference.FormatError):
                reader.validate()


# ------------------------------------------------------------------------------ fuzz findings


@pytest.mark.parametrize("mutation", FUZZ_FINDINGS, ids=[m.id for m in FUZZ_FINDINGS])
def test_fuzz_findings_are_rejected_with_their_code(mutation):
    """Every AWQ-v2 crash the fuzzer found is the committed must-reject vector n_<id> (the
    conformance run checks its code through the adapter; test_conformance that it is what
    the generator makes).  Here, on that file: its code at its check level, and the lazy
    lookups of every name of its base raise FormatError (or find the tensor)."""
    ed = FileEditor(SAMPLE if mutation.base == "sample" else base_bytes(mutation.base))
    names = [bytes(ed.data[slice(*ed.name_range(i))]).decode() for i in range(len(ed.entries()))]
    path = VECTORS / f"n_{mutation.id}.awq2"
    manifest = json.loads((ROOT / "conformance" / "manifest.json").read_text(encoding="utf-8"))
    listed = {v["id"]: v for v in manifest["vectors"]}[f"n_{mutation.id}"]
    assert (listed["expect"], listed["error_code"]) == ("reject", mutation.code)
    if mutation.level == "open":
        with pytest.raises(reference.FormatError) as info:
            reference.open(path)
        assert info.value.code == mutation.code
        return
    with reference.open(path) as reader:
        with pytest.raises(reference.FormatError) as info:
            reader.validate() if mutation.level == "validate" else reader.verify()
        assert info.value.code == mutation.code
        for name in names:
            try:
                reader.tensor(name)
            except reference.FormatError:
                pass


@pytest.mark.parametrize("finding", V1_FINDINGS, ids=[f.id for f in V1_FINDINGS])
def test_v1_fuzz_findings(tmp_path, finding):
    """Every AWQ v1 crash the fuzzer found: refused with its code (at open, or when the
    tensor is read), or, for a valid checkpoint, read."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name, data in finding.files().items():
        (folder / name).write_bytes(data)
    if finding.expect == "accept":
        with reference.open(folder) as reader:
            assert reader.names()
            for name in reader.names():
                reader.tensor(name)
            reader.verify()
        return
    with pytest.raises(reference.FormatError) as info:
        with reference.open(folder) as reader:
            assert finding.level == "tensor", "opening should have refused it"
            for name in reader.names():
                reader.tensor(name)
    assert info.value.code == finding.code


def test_zero_element_shape_at_the_signed_64_bit_extent(tmp_path):
    """The fix for fuzz_empty_tensor_*: a zero-element shape is valid while its non-zero
    dimensions x itemsize fit in 2**63 - 1 (NumPy can describe it), BAD_SHAPE past that,
    for the writer and the reader alike."""
    edge = (1 << 60) - 1  # x 8 bytes = 2**63 - 8
    with reference.Writer(tmp_path / "edge.awq2") as w:
        w.add_bytes("e", "I64", (0, edge), [])
    with reference.open(tmp_path / "edge.awq2", validate=True) as reader:
        assert reader.tensor("e").shape == (0, edge)
    with pytest.raises(reference.FormatError) as info:
        with reference.Writer(tmp_path / "over.awq2") as w:
            w.add_bytes("e", "I64", (0, edge + 1), [])
    assert info.value.code == "BAD_SHAPE"
    ed = FileEditor((tmp_path / "edge.awq2").read_bytes())
    ed.set_bytes(ed.dims_offset + 8, (edge + 1).to_bytes(8, "little")).refresh()
    assert _code(_write(tmp_path, "edited.awq2", ed.bytes())) == "BAD_SHAPE"
