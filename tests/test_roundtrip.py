"""Writer -> reader round trips, placement rules, determinism, atomicity and writer states."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from samples import SAMPLE_METADATA, sample_tensors, write

import reference
from reference.dump import main as dump_main
from reference.write.writer import PARTIAL_SUFFIX
from spec.constants import ALIGNMENT, SLAB_OFFSET

DTYPES = [np.bool_, np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64,
          np.int64, np.float16, np.float32, np.float64]  # fmt: skip

names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40
).filter(lambda s: len(s.encode()) <= 1024)
arrays = st.sampled_from(DTYPES).flatmap(
    lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6))
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(tensors=st.dictionaries(names, arrays, max_size=12))
def test_round_trip_any_dtype_shape_and_name(tmp_path_factory, tensors):
    path = tmp_path_factory.mktemp("rt") / "x.awq2"
    reference.save(path, tensors, {"n": len(tensors)})
    with reference.open(path, validate=True) as reader:
        reader.verify()
        assert sorted(reader.names()) == sorted(tensors)
        assert reader.metadata == {"n": len(tensors)}
        for name, array in tensors.items():
            got = reader.tensor(name)
            assert got.dtype == array.dtype and got.shape == array.shape
            assert got.tobytes() == np.ascontiguousarray(array).tobytes()  # NaNs compare by bits


def test_large_tensor_and_non_contiguous_and_big_endian_input(tmp_path):
    big = np.arange(5 * 1024 * 1024, dtype=np.float32).reshape(1024, 5120)
    strided = np.arange(100, dtype=np.int16).reshape(10, 10)[:, ::3]
    be = np.arange(6, dtype=">i4").reshape(2, 3)
    path = write(tmp_path / "big.awq2", {"big": big, "strided": strided, "be": be}, None)
    with reference.open(path, validate=True) as reader:
        np.testing.assert_array_equal(reader.tensor("big"), big)
        np.testing.assert_array_equal(reader.tensor("strided"), strided)
        np.testing.assert_array_equal(reader.tensor("be"), be)
        assert reader.tensor("be").dtype == np.dtype("<i4")


def test_bf16_is_stored_as_raw_bits_with_its_dtype(tmp_path):
    """DT-1: bits written with dtype="BF16" come back as bfloat16 values, bits underneath."""
    bits = np.array([0x3F80, 0x4000, 0xC040], dtype=np.uint16)  # 1.0, 2.0, -3.0
    with reference.Writer(tmp_path / "bf.awq2") as w:
        w.add("b", bits, dtype="BF16")
    with reference.open(tmp_path / "bf.awq2", validate=True) as reader:
        assert reader.entry("b").dtype == "BF16"
        assert reader.tensor("b").dtype.name == "bfloat16"
        np.testing.assert_array_equal(reader.tensor("b").astype(np.float32), [1.0, 2.0, -3.0])
        np.testing.assert_array_equal(reader.tensor("b").view(np.uint16), bits)


def test_placement_alignment_and_zero_gaps(sample_file):
    """SLAB-1..5, PAD-1, PAD-2; and dump --json reports exactly that."""
    data = sample_file.read_bytes()
    with reference.open(sample_file, validate=True) as reader:
        infos = reader.entries()
        index_offset = reader.header["index_offset"]
    placed = [t for t in infos if t.length]
    assert min(t.offset for t in placed) == SLAB_OFFSET == 0x10000
    assert all(t.offset % ALIGNMENT == 0 for t in infos)
    covered = np.zeros(index_offset, dtype=bool)
    covered[:128] = True
    for t in placed:
        covered[t.offset : t.offset + t.length] = True
    gaps = np.frombuffer(data, np.uint8, index_offset)[~covered]
    assert not gaps.any()
    assert index_offset % ALIGNMENT == 0


def test_dump_json_reports_the_layout(sample_file, capsys):
    assert dump_main([str(sample_file), "--json", "--verify"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["slab_offset"] == 0x10000 and doc["alignment"] == 65536
    assert doc["format_version"] == "2.0"
    assert doc["file_size"] == os.path.getsize(sample_file)
    assert doc["tensor_count"] == len(sample_tensors()) == len(doc["tensors"])
    assert doc["metadata"] == SAMPLE_METADATA
    offsets = [t["offset"] for t in doc["tensors"]]
    assert min(o for o, t in zip(offsets, doc["tensors"]) if t["length"]) == 0x10000
    assert all(o % 65536 == 0 for o in offsets)
    for t in doc["tensors"]:
        assert set(t) >= {"name", "dtype", "shape", "layout", "offset", "length"}


def test_dump_text_tensor_and_hexdump(sample_file, capsys):
    assert dump_main([str(sample_file), "--tensor", "model.norm.weight", "--hexdump"]) == 0
    out = capsys.readouterr().out
    # a one-line header, the tensor, the hex dumps: no report of the whole file (issue 39)
    assert out.startswith("AWQ-v2 file ") and "\n  tensors " not in out
    assert "mean 1" in out and "|.AWQ" in out
    assert dump_main([str(sample_file), "--tensor", "nope"]) == 2
    assert dump_main([str(sample_file.parent / "missing.awq2")]) == 3


def test_dump_escapes_control_characters_in_names(tmp_path, capsys):
    path = write(tmp_path / "esc.awq2", {"evil\x1b[2J\u202ename": np.zeros(1)}, None)
    assert dump_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out
    assert "evil\\x1b[2J\\u202ename" in out


def test_writer_is_deterministic(tmp_path):
    """WR-1: same tensors, same order, same metadata -> same bytes."""
    a = write(tmp_path / "a.awq2").read_bytes()
    b = write(tmp_path / "b.awq2").read_bytes()
    assert a == b
    reordered = dict(reversed(list(sample_tensors().items())))
    c = write(tmp_path / "c.awq2", reordered).read_bytes()
    assert c != a  # slab order follows the caller's order [SLAB-6]


def test_failed_write_leaves_no_destination_and_no_temporary(tmp_path):
    """WR-2: an exception inside the block aborts; nothing appears at the destination."""
    dest = tmp_path / "never.awq2"
    with pytest.raises(RuntimeError):
        with reference.Writer(dest) as w:
            w.add("a", np.zeros(100))
            raise RuntimeError("boom")
    assert not dest.exists()
    assert not list(tmp_path.glob(f"*{PARTIAL_SUFFIX}"))


def test_existing_destination_is_replaced_only_on_success(tmp_path):
    dest = write(tmp_path / "keep.awq2")
    before = dest.read_bytes()
    with pytest.raises(ValueError):
        with reference.Writer(dest) as w:
            w.add("a", np.zeros(3))
            w.add("a", np.zeros(3))  # duplicate name [NAME-3]
    assert dest.read_bytes() == before


def test_writer_refuses_out_of_order_calls(tmp_path):
    w = reference.Writer(tmp_path / "s.awq2")
    w.add("a", np.zeros(1))
    w.close()
    with pytest.raises(reference.WriterStateError):
        w.add("b", np.zeros(1))
    with pytest.raises(reference.WriterStateError):
        w.close()
    with pytest.raises(reference.WriterStateError):
        w.abort()
    w2 = reference.Writer(tmp_path / "t.awq2")
    w2.abort()
    with pytest.raises(reference.WriterStateError):
        w2.add("a", np.zeros(1))
    assert not (tmp_path / "t.awq2").exists()


def test_set_metadata_before_close_is_what_is_written(tmp_path):
    """Metadata set after the payloads gives the bytes of a writer that had it from the start
    (it is written in the index, at close [IDX-2]); metadata ``__init__`` would refuse is
    refused the same way; after close or abort the call is out of order."""
    late = {"provenance": {"sha256": "ab" * 32}}
    with reference.Writer(tmp_path / "late.awq2", metadata={"provenance": "pending"}) as w:
        w.add("a", np.arange(6, dtype=np.int32))
        with pytest.raises(ValueError, match="META-5"):
            w.set_metadata({"name": "\ud800"})  # an unpaired surrogate, as in __init__
        w.set_metadata(late)
    with reference.Writer(tmp_path / "early.awq2", metadata=late) as w:
        w.add("a", np.arange(6, dtype=np.int32))
    assert (tmp_path / "late.awq2").read_bytes() == (tmp_path / "early.awq2").read_bytes()
    with reference.open(tmp_path / "late.awq2", validate=True) as r:
        assert r.metadata == late
    with pytest.raises(reference.WriterStateError):
        w.set_metadata(late)
    aborted = reference.Writer(tmp_path / "aborted.awq2")
    aborted.abort()
    with pytest.raises(reference.WriterStateError):
        aborted.set_metadata(late)


@pytest.mark.parametrize(
    ("name", "array", "message"),
    [
        ("", np.zeros(1), "NAME-1"),
        ("x" * 1025, np.zeros(1), "LIM-3"),
        ("\ud800", np.zeros(1), "surrogates"),
        ("deep", np.zeros((1,) * 9), "LIMIT_DIMS"),
    ],
)
def test_writer_rejects_what_a_reader_would_reject(tmp_path, name, array, message):
    with reference.Writer(tmp_path / "r.awq2") as w:
        with pytest.raises((ValueError, UnicodeEncodeError)) as info:
            w.add(name, array)
        assert message in str(info.value)


def test_writer_add_bytes_streams_and_checks_length(tmp_path):
    with reference.Writer(tmp_path / "c.awq2") as w:
        w.add_bytes("x", "U8", (3, 4), [b"abcd", b"efgh", b"ijkl"])
        with pytest.raises(ValueError, match="needs 12"):
            w.add_bytes("short", "U8", (3, 4), [b"abc"])
        with pytest.raises(ValueError, match="more than"):
            w.add_bytes("long", "U8", (1,), [b"ab"])
        w.add("after", np.arange(3, dtype=np.uint8))
    with reference.open(tmp_path / "c.awq2", validate=True) as reader:
        assert reader.tensor("x").tobytes() == b"abcdefghijkl"
        assert sorted(reader.names()) == ["after", "x"]
        reader.verify()


def test_metadata_limits_and_strictness_at_write(tmp_path):
    deep: object = 1
    for _ in range(65):
        deep = [deep]
    with pytest.raises(ValueError, match="LIM-5"):
        reference.Writer(tmp_path / "m.awq2", metadata={"d": deep})
    with pytest.raises(ValueError):
        reference.Writer(tmp_path / "m.awq2", metadata={"nan": float("nan")})
    assert not list(Path(tmp_path).iterdir())


def test_tensor_views_are_read_only_and_zero_copy(sample_file):
    with reference.open(sample_file) as reader:
        view = reader.tensor("model.layers.0.mlp.big")
        assert not view.flags.writeable
        assert not view.flags.owndata
    assert view.sum() is not None  # the view keeps the mapping alive after close


def test_missing_name_is_a_key_error(sample_file):
    with reference.open(sample_file) as reader:
        with pytest.raises(KeyError):
            reader.tensor("absent")
        assert "absent" not in reader and "scalar" in reader


def test_dump_explains_a_safetensors_file_and_hints_at_conversion(tmp_path, capsys):
    """reference.open reads a plain safetensors file as a checkpoint of dense tensors [V1-1];
    dump explains it as such, not as a broken AWQ-v2 file, and does not suggest converting
    what holds no quantised layer."""
    from safetensors.numpy import save_file

    path = tmp_path / "model.safetensors"
    save_file({"w": np.zeros(3, np.float16)}, str(path))
    assert dump_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "not AWQ-v2" in out and "BAD_MAGIC" not in out
    # convert would refuse it (NOT_QUANTISED, CONV-4): dump does not suggest it
    assert "awq2-convert" not in out and "nothing to convert: no quantised layer" in out


def test_tensors_and_read_into_give_the_stored_payloads(sample_file):
    tensors = sample_tensors()
    with reference.open(sample_file) as reader:
        pairs = list(reader.tensors())
        assert [info.name for info, _ in pairs] == reader.names()
        buf = np.empty(sum(info.length for info, _ in pairs) + 1, np.uint8)
        pos = 0
        for info, view in pairs:
            got = reader.read_into(info, buf[pos : pos + info.length])
            np.testing.assert_array_equal(got, tensors[info.name])
            np.testing.assert_array_equal(view, tensors[info.name])
            assert got.shape == info.shape
            pos += info.length
        again = reader.read_into("model.norm.weight", np.empty(1000, np.uint8))
        np.testing.assert_array_equal(again, tensors["model.norm.weight"])
        with pytest.raises(ValueError):
            reader.read_into("model.norm.weight", np.empty(4, np.uint8))


@pytest.mark.parametrize("copy", [False, True])
def test_read_many_into_gives_every_payload_in_the_order_asked(sample_file, copy, monkeypatch):
    """Coalesced reads (runs of adjacent payloads, padding into scratch) land each payload
    in its own buffer; runs are cut by the byte and buffer caps (set tiny here)."""
    import reference.format.reader as reader_module

    monkeypatch.setattr(reader_module, "_RUN_BYTES", 1)
    monkeypatch.setattr(reader_module, "_IOV_MAX", 5)
    tensors = sample_tensors()
    with reference.open(sample_file, copy=copy) as reader:
        names = reader.names()[::-1]  # not slab order
        bufs = [np.full(reader.entry(n).length + 3, 0xAA, np.uint8) for n in names]
        got = reader.read_many_into(zip(names, bufs))
        for name, array, buf in zip(names, got, bufs):
            np.testing.assert_array_equal(array, tensors[name])
            assert array.dtype == tensors[name].dtype and array.shape == tensors[name].shape
            assert buf[-3:].tolist() == [0xAA] * 3  # nothing past the payload
        with pytest.raises(ValueError):
            reader.read_many_into([("model.norm.weight", np.empty(4, np.uint8))])


def test_read_many_into_across_short_reads(sample_file, monkeypatch):
    """preadv may return fewer bytes than asked: the reader carries on where it stopped."""
    import reference.format.reader as reader_module

    monkeypatch.setattr(reader_module, "resident", lambda address, length: False)  # reads
    real = os.preadv

    def short(fd, buffers, offset):
        first = memoryview(buffers[0])
        return real(fd, [first[: max(1, len(first) // 3)]], offset)

    monkeypatch.setattr(os, "preadv", short)
    with reference.open(sample_file) as reader:
        infos = reader.entries()
        got = reader.read_many_into((i, np.empty(i.length, np.uint8)) for i in infos)
        for info, array in zip(infos, got):
            np.testing.assert_array_equal(array, reader.tensor(info.name))


@pytest.mark.parametrize("in_memory", [True, False])
def test_read_many_into_copies_from_the_map_only_what_is_in_memory(
    sample_file, in_memory, monkeypatch
):
    """A run whose pages are all in the page cache is copied out of the map (no read); any
    other is read with preadv.  Either way each payload equals the stored one."""
    import reference.format.reader as reader_module

    asked: list[int] = []
    reads: list[int] = []
    real = os.preadv

    def residency(address, length):
        asked.append(length)
        return in_memory

    def counting(fd, buffers, offset):
        reads.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(reader_module, "resident", residency)
    monkeypatch.setattr(os, "preadv", counting)
    tensors = sample_tensors()
    with reference.open(sample_file) as reader:
        infos = reader.entries()
        got = reader.read_many_into((i, np.empty(i.length, np.uint8)) for i in infos)
        for info, array in zip(infos, got):
            np.testing.assert_array_equal(array, tensors[info.name])
    assert asked  # the choice was made
    assert bool(reads) is not in_memory


@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_read_many_into_copies_on_threads_in_pieces(sample_file, threads, monkeypatch):
    """The copy out of the map is cut into pieces (tiny here, so that payloads span several
    and threads outnumber some runs' pieces) spread over threads: every payload still equals
    the stored one, and nothing is written past it."""
    import reference.format.reader as reader_module
    import reference.ground.parallel as parallel

    monkeypatch.setattr(reader_module, "resident", lambda address, length: True)
    monkeypatch.setattr(parallel, "PIECE", 100)
    monkeypatch.setattr(parallel, "_SMALL", 40)  # both copy methods are used
    used: set[str] = set()
    real_copy = parallel._copy

    def noting(source, pieces):
        used.add(threading.current_thread().name)
        return real_copy(source, pieces)

    monkeypatch.setattr(parallel, "_copy", noting)
    tensors = sample_tensors()
    with reference.open(sample_file) as reader:
        infos = reader.entries()
        bufs = [np.full(i.length + 5, 0xAA, np.uint8) for i in infos]
        got = reader.read_many_into(zip(infos, bufs), threads=threads)
        for info, array, buf in zip(infos, got, bufs):
            np.testing.assert_array_equal(array, tensors[info.name])
            assert buf[-5:].tolist() == [0xAA] * 5
    assert (len(used) == 1) is (threads == 1)  # the caller's thread, or it and the pool's


def test_read_many_into_copies_every_run_in_one_pass_with_even_shares(sample_file, monkeypatch):
    """Runs cut short (one payload each) are still copied in one pass: each thread is handed
    one share, once per call, and the shares differ by at most one piece; the zeros between
    payloads are not copied."""
    import reference.format.reader as reader_module
    import reference.ground.parallel as parallel

    monkeypatch.setattr(reader_module, "resident", lambda address, length: True)
    monkeypatch.setattr(reader_module, "_RUN_BYTES", 1)  # every payload its own run
    monkeypatch.setattr(parallel, "PIECE", 64)
    shares: list[int] = []
    real_copy = parallel._copy

    def noting(source, pieces):
        shares.append(sum(len(target) for target, _ in pieces))
        return real_copy(source, pieces)

    monkeypatch.setattr(parallel, "_copy", noting)
    tensors = sample_tensors()
    with reference.open(sample_file) as reader:
        infos = [i for i in reader.entries() if i.length]
        assert len(infos) > 2
        got = reader.read_many_into([(i, np.empty(i.length, np.uint8)) for i in infos], threads=2)
        for info, array in zip(infos, got):
            np.testing.assert_array_equal(array, tensors[info.name])
    assert len(shares) == 2  # one share per thread, not one per run
    assert sum(shares) == sum(i.length for i in infos)  # payloads only, no padding
    assert abs(shares[0] - shares[1]) <= 64


def test_resident_tells_pages_in_memory():
    """mincore through ctypes, on anonymous memory (deterministic: a page is resident once
    written, not before): every page of the range must be, a range that starts or ends
    inside a page counts that page."""
    import mmap

    from reference.ground.residency import PAGE, resident

    with mmap.mmap(-1, 4 * PAGE) as m:
        address = np.frombuffer(m, np.uint8).ctypes.data
        assert not resident(address, PAGE)
        m[PAGE + 7] = 1  # page 1 now resident
        assert resident(address + PAGE, PAGE)
        assert resident(address + PAGE + 100, 50)
        assert not resident(address + PAGE, PAGE + 1)  # reaches into page 2
        assert not resident(address + PAGE - 1, 2)  # starts in page 0
        assert not resident(address + PAGE, 0)


def test_read_into_reports_a_file_truncated_after_open(sample_file):
    with reference.open(sample_file) as reader:
        info = reader.entry("model.layers.0.mlp.big")
        os.truncate(sample_file, info.offset + 10)
        with pytest.raises(reference.TruncatedError):
            reader.read_into(info, np.empty(info.length, np.uint8))


def test_read_many_into_reports_a_file_truncated_after_open(sample_file):
    with reference.open(sample_file) as reader:
        infos = reader.entries()
        last = max((i for i in infos if i.length > 10), key=lambda i: i.offset)
        os.truncate(sample_file, last.offset + 10)
        with pytest.raises(reference.TruncatedError):
            reader.read_many_into((i, np.empty(i.length, np.uint8)) for i in infos)


def test_published_file_has_the_mode_open_would_give_it(tmp_path):
    """The temporary file is created 0600; the published one follows the umask like any
    file the user creates (0644 under umask 022), not owner-only."""
    old = os.umask(0o027)
    try:
        path = reference.save(tmp_path / "m.awq2", {"x": np.arange(3)})
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
