"""File sets (spec 2.1, docs/spec/sets.md): the size-split writer, the set reader and every
rejection of SET-1 to SET-10.

Expected values come from the rules, not from the code under test: a set's tensors and layers
must equal the single-file conversion of the same checkpoint; the manifest's sizes and
SHA-256 are measured here with ``os.stat`` and ``hashlib``; its header checksum is the header's
bytes 124..127 read here; each damaged set is made by hand from a good one, and the error code
is the one the requirement names.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference
from reference.convert import convert_folder
from reference.convert import main as convert_main
from reference.dump import main as dump_main
from reference.examples import write_checkpoint
from reference.format.index import Index
from reference.ground.errors import FormatError
from reference.sets import setwriter as setwriter_module
from reference.sets.fileset import FileSet
from reference.sets.setmanifest import parse_manifest, plain_member_name, rank_record
from reference.sets.setwriter import parse_size, save_set
from spec.constants import MAX_METADATA_LENGTH, SET_MANIFEST

LIMIT = 300_000  # bytes: several members for the example model (3.7 MB as one file)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("src") / "ckpt")


@pytest.fixture(scope="module")
def single(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("single") / "model"
    convert_folder(source, dst, jobs=1)
    return dst


@pytest.fixture(scope="module")
def split(source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dst = tmp_path_factory.mktemp("split") / "model"
    convert_folder(source, dst, jobs=2, max_shard_size=LIMIT)
    return dst


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / SET_MANIFEST).read_text(encoding="utf-8"))


def _copy(folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(folder, out)
    return out


def _rewrite(folder: Path, change: Any) -> None:
    document = _manifest(folder)
    change(document)
    (folder / SET_MANIFEST).write_text(json.dumps(document), encoding="utf-8")


def _code(exc: pytest.ExceptionInfo[FormatError]) -> str:
    return exc.value.code


# ------------------------------------------------------------------ the split writer [SET-10]


def test_split_set_reads_as_the_single_file(single: Path, split: Path) -> None:
    """Every name, entry field, payload and layer of the set equals the single file's
    [SET-1, SET-6]; every layer, sliced for two ranks, equals the single file's slices."""
    with reference.open(single) as one, reference.open(split, validate=True) as many:
        assert isinstance(many, FileSet) and many.kind == "split" and len(many.members) > 3
        many.verify()
        assert many.names() == one.names() and len(many) == len(one)
        assert many.layers() == one.layers()
        for name in one.names():
            a, b = one.entry(name), many.entry(name)
            assert (a.dtype, a.shape, a.layout, a.bits, a.group_size, a.k, a.n, a.data_crc) == (
                b.dtype, b.shape, b.layout, b.bits, b.group_size, b.k, b.n, b.data_crc)  # fmt: skip
            assert one.tensor(name).tobytes() == many.tensor(name).tobytes()
        for prefix in one.layers():
            assert np.array_equal(one.dequantize(prefix), many.dequantize(prefix))
            for parallel in ("column", "row"):
                for rank in (0, 1):
                    x = one.linear(prefix, tp_rank=rank, tp_size=2, parallel=parallel)
                    y = many.linear(prefix, tp_rank=rank, tp_size=2, parallel=parallel)
                    for part in ("qweight", "scales", "qzeros"):
                        assert getattr(x, part).tobytes() == getattr(y, part).tobytes()
        assert many.metadata == one.metadata  # every member has the same [SET-10]


def test_members_stay_under_the_limit_unless_one_step_alone_exceeds_it(split: Path) -> None:
    """[SET-10]: a member over the limit holds one layer (its parts) or one tensor."""
    with reference.open(split) as s:
        over = 0
        for member in s.members:
            size = member.path.stat().st_size
            if size <= LIMIT:
                continue
            over += 1
            steps = {_step_of(n) for n in member.names()}
            assert len(steps) == 1, (member.path.name, size, steps)
        assert over < len(s.members)


def test_members_are_filled_in_order(split: Path) -> None:
    """[SET-10]: the next member starts only when the open one could not take the next step
    (a whole layer): the member's length plus that step's 64 KiB payload slots, plus 4 KiB
    for the entries, names and dims it adds to the index, is over the limit."""
    with reference.open(split) as s:
        sizes = [m.path.stat().st_size for m in s.members]
        nexts = [m.entries() for m in s.members[1:]]
    for size, entries in zip(sizes, nexts):
        step = _step_of(entries[0].name)
        slots = sum(-(-e.length // 65536) * 65536 for e in entries if _step_of(e.name) == step)
        assert size + slots + 4096 > LIMIT, (size, step, slots)


def _step_of(name: str) -> str:
    base, _, last = name.rpartition(".")
    return base if last in ("qweight", "scales", "qzeros", "bias") else name


def test_manifest_describes_each_member(split: Path) -> None:
    """[SET-2]: sizes, header checksums and SHA-256 measured here, names as listed."""
    document = _manifest(split)
    assert document["awq2_set"] == 1 and document["kind"] == "split" and "tp_size" not in document
    listed = [f["name"] for f in document["files"]]
    assert listed == sorted(p.name for p in split.glob("*.awq2"))
    count = len(listed)
    assert listed == [f"model-{i:05d}-of-{count:05d}.awq2" for i in range(1, count + 1)]
    for f in document["files"]:
        data = (split / f["name"]).read_bytes()
        assert f["size"] == len(data)
        assert f["sha256"] == hashlib.sha256(data).hexdigest()
        assert f["header_crc"] == f"{struct.unpack_from('<I', data, 124)[0]:08x}"


def test_set_folder_is_servable_like_a_single_file_folder(single: Path, split: Path) -> None:
    """[CONV-1]: the same config.json and copies; the weights are the set instead of
    model.awq2."""
    assert not (split / "model.awq2").exists()
    others = {p.name for p in single.iterdir()} - {"model.awq2"}
    assert others <= {p.name for p in split.iterdir()}
    for name in others:
        assert (single / name).read_bytes() == (split / name).read_bytes()


def test_split_bytes_do_not_depend_on_jobs(source: Path, split: Path, tmp_path: Path) -> None:
    """[CONV-3, WR-1] for sets: one thread gives the same members and manifest as two."""
    dst = tmp_path / "jobs1"
    convert_folder(source, dst, jobs=1, max_shard_size=LIMIT)
    for p in sorted(split.iterdir()):
        assert (dst / p.name).read_bytes() == p.read_bytes(), p.name


def test_one_member_is_written_as_model_awq2(source: Path, single: Path, tmp_path: Path) -> None:
    dst = tmp_path / "big"
    convert_folder(source, dst, jobs=1, max_shard_size=10**12)
    assert not (dst / SET_MANIFEST).exists()
    assert (dst / "model.awq2").read_bytes() == (single / "model.awq2").read_bytes()


def test_writer_size_with_is_the_size_after_close(tmp_path: Path) -> None:
    """What the split decision relies on: the projected length is exact [SET-10]."""
    rng = np.random.default_rng(7)
    w = reference.Writer(tmp_path / "x.awq2", metadata={"a": "b" * 100})
    for i in range(40):
        shape = tuple(int(d) for d in rng.integers(0, 300, size=int(rng.integers(0, 4))))
        array = np.zeros(shape, np.float16)
        name = f"t.{i}." + "n" * int(rng.integers(1, 60))
        projected = w.size_with([(name, array.nbytes, array.ndim)])
        w.add(name, array)
        assert w.size_with() == projected
    assert w.close().stat().st_size == projected


def test_failed_set_conversion_leaves_nothing(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[SET-9]: a failure after some members were closed (here: hashing them) publishes no
    folder, and no partial is left beside it."""

    def fail(path: Path) -> Any:
        raise OSError(28, "No space left on device (simulated)")

    monkeypatch.setattr(setwriter_module, "_describe", fail)
    dst = tmp_path / "out"
    status = convert_main([str(source), f"{dst}/", "--max-shard-size", "300KB", "--quiet"])
    assert status == 3
    assert list(tmp_path.iterdir()) == []


def test_save_set_publishes_a_folder(tmp_path: Path) -> None:
    tensors = {f"w{i}": np.full((100, 1000), i, np.float16) for i in range(5)}
    members = save_set(tmp_path / "s", tensors, max_size=700_000)
    # 200,000-byte payloads in 256 KiB slots after the 64 KiB header: two fit, three do not
    counts = []
    for member in members:
        with reference.open(member) as f:
            counts.append(len(f))
    assert counts == [2, 2, 1]
    with reference.open(tmp_path / "s", validate=True) as s:
        assert s.names() == list(tensors)
        for name, array in tensors.items():
            assert np.array_equal(s.tensor(name), array)


# ------------------------------------------------------------------ sizes on the command line


@pytest.mark.parametrize(
    ("text", "size"),
    [("5GB", 5 * 10**9), ("500MB", 500 * 10**6), ("1.5GB", 1_500_000_000), ("2GiB", 2 << 30),
     ("64kib", 65536), ("1048576", 1048576), (" 3 TB ", 3 * 10**12), ("7B", 7)],
)  # fmt: skip
def test_parse_size_reads_the_usual_suffixes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "5XB", "GB", "-1GB", "0", "0.1B", "1e9", "5 G B"])
def test_parse_size_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_cli_refuses_a_bad_size_or_a_file_destination(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        convert_main([str(source), f"{tmp_path}/o/", "--max-shard-size", "5XB"])
    assert exc.value.code == 2 and "not a size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        convert_main([str(source), str(tmp_path / "o.awq2"), "--max-shard-size", "5GB"])
    assert exc.value.code == 2 and "folder" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_cli_summary_lists_the_members(
    source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert convert_main([str(source), f"{tmp_path}/o/", "--max-shard-size", "300KB",
                         "--json"]) == 0  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    names = sorted(p.name for p in (tmp_path / "o").glob("*.awq2"))
    assert [m["name"] for m in summary["members"]] == names
    assert summary["destination"] == str(tmp_path / "o" / SET_MANIFEST)


# ------------------------------------------------------------------ opening: cost [SET-5, SET-6]


def test_opening_and_lookups_never_list_the_entries(
    split: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[SET-5, SET-6]: opening a set and finding a tensor use each member's header, trailer
    and hash index only; listing every entry (what a name -> file map would need) fails here."""

    def listing(self: Any) -> Any:
        raise AssertionError("a set lookup listed every entry")

    with reference.open(split) as s:
        names = s.names()
        layers = s.layers()
    monkeypatch.setattr(Index, "infos", listing)
    monkeypatch.setattr(reference.Reader, "entries", listing)
    monkeypatch.setattr(reference.Reader, "names", listing)
    with reference.open(split) as s:
        for name in (names[0], names[len(names) // 2], names[-1]):
            assert s.entry(name).name == name and s.tensor(name).size >= 0
            assert name in s
        assert "no.such.tensor" not in s
        s.linear(layers[-1])


def test_open_accepts_the_manifest_path_and_ignores_unknown_members(
    split: Path, tmp_path: Path
) -> None:
    """[SET-2]: members of the manifest and of file objects that a reader does not know."""
    folder = _copy(split, tmp_path)

    def add(document: dict[str, Any]) -> None:
        document["comment"] = {"written by": "a later tool"}
        document["files"][0]["mirror"] = "https://example.invalid/"

    _rewrite(folder, add)
    with reference.open(folder / SET_MANIFEST, validate=True) as s:
        assert isinstance(s, FileSet) and len(s) > 0


# ------------------------------------------------------------------ rejections


def _expect(folder: Path, code: str, *, at: str = "open") -> FormatError:
    """Open (``at="open"``), validate or verify the set in ``folder``: ``code`` at exactly
    that step, the steps before it passing."""
    if at == "open":
        with pytest.raises(FormatError) as exc:
            FileSet(folder)
        assert exc.value.code == code, str(exc.value)
        return exc.value
    with FileSet(folder) as s:
        if at == "verify":
            s.validate()
        with pytest.raises(FormatError) as exc:
            s.verify() if at == "verify" else s.validate()
    assert exc.value.code == code, str(exc.value)
    return exc.value


MANIFEST_DAMAGE = {
    "not_json": (lambda f: f.write_bytes(b"{'awq2_set': 1}"), "SET_BAD_MANIFEST"),
    "duplicate_key": (
        lambda f: f.write_bytes(
            f.read_bytes().replace(b'"kind": "split"', b'"kind": "split", "kind": "split"')
        ),
        "SET_BAD_MANIFEST",
    ),
    "bom": (lambda f: f.write_bytes(b"\xef\xbb\xbf" + f.read_bytes()), "SET_BAD_MANIFEST"),
    "array": (lambda f: f.write_bytes(b"[]"), "SET_BAD_MANIFEST"),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_DAMAGE))
def test_manifest_that_is_not_strict_json_is_refused(
    split: Path, tmp_path: Path, case: str
) -> None:
    """[SET-2]: the metadata's rules (META-1, META-2, META-5, META-6)."""
    folder = _copy(split, tmp_path)
    damage, code = MANIFEST_DAMAGE[case]
    damage(folder / SET_MANIFEST)
    _expect(folder, code)


FIELD_DAMAGE: dict[str, tuple[Any, str]] = {
    "version_2": (lambda d: d.update(awq2_set=2), "SET_UNSUPPORTED"),
    "version_string": (lambda d: d.update(awq2_set="1"), "SET_UNSUPPORTED"),
    "version_missing": (lambda d: d.pop("awq2_set"), "SET_UNSUPPORTED"),
    "kind_unknown": (lambda d: d.update(kind="mirror"), "SET_UNSUPPORTED"),
    # SET-3 comes before the rest of the schema: a broken files array is not reached
    "kind_unknown_files_broken": (lambda d: d.update(kind="x", files=3), "SET_UNSUPPORTED"),
    "files_empty": (lambda d: d.update(files=[]), "SET_BAD_MANIFEST"),
    "files_object": (lambda d: d.update(files={}), "SET_BAD_MANIFEST"),
    "file_not_object": (lambda d: d["files"].__setitem__(0, "a.awq2"), "SET_BAD_MANIFEST"),
    "size_negative": (lambda d: d["files"][0].update(size=-1), "SET_BAD_MANIFEST"),
    "size_float": (lambda d: d["files"][0].update(size=1.0), "SET_BAD_MANIFEST"),
    "size_bool": (lambda d: d["files"][0].update(size=True), "SET_BAD_MANIFEST"),
    "crc_upper": (lambda d: d["files"][0].update(header_crc="ABCDEF01"), "SET_BAD_MANIFEST"),
    "crc_int": (lambda d: d["files"][0].update(header_crc=12345), "SET_BAD_MANIFEST"),
    "sha_short": (lambda d: d["files"][0].update(sha256="ab" * 31), "SET_BAD_MANIFEST"),
    "name_parent": (lambda d: d["files"][0].update(name="../model.awq2"), "SET_BAD_MANIFEST"),
    "name_sub": (lambda d: d["files"][0].update(name="sub/model.awq2"), "SET_BAD_MANIFEST"),
    "name_backslash": (lambda d: d["files"][0].update(name="a\\b.awq2"), "SET_BAD_MANIFEST"),
    "name_hidden": (lambda d: d["files"][0].update(name=".m.awq2"), "SET_BAD_MANIFEST"),
    "name_suffix": (lambda d: d["files"][0].update(name="model.bin"), "SET_BAD_MANIFEST"),
    "name_twice": (lambda d: d["files"].append(dict(d["files"][0])), "SET_BAD_MANIFEST"),
    "rank_set_without_tp_size": (lambda d: d.update(kind="rank"), "SET_BAD_MANIFEST"),
    "rank_out_of_range": (
        lambda d: (
            d.update(kind="rank", tp_size=1),
            [f.update(rank=0) for f in d["files"]],
            d["files"][-1].update(rank=1),
        ),
        "SET_BAD_MANIFEST",
    ),
}


@pytest.mark.parametrize("case", sorted(FIELD_DAMAGE))
def test_manifest_schema_is_enforced(split: Path, tmp_path: Path, case: str) -> None:
    """[SET-2, SET-3, SET-4]"""
    folder = _copy(split, tmp_path)
    change, code = FIELD_DAMAGE[case]
    _rewrite(folder, change)
    _expect(folder, code)


def test_plain_member_names() -> None:
    """[SET-4], the rule itself."""
    assert plain_member_name("model-00001-of-00002.awq2")
    for bad in ("", ".awq2", "a.awq2/", "../a.awq2", "a\0.awq2", ".a.awq2", "a.AWQ2", "a\\b.awq2"):
        assert not plain_member_name(bad), bad


def test_member_missing_or_not_a_file(split: Path, tmp_path: Path) -> None:
    """[SET-5]"""
    folder = _copy(split, tmp_path)
    second = _manifest(folder)["files"][1]["name"]
    (folder / second).unlink()
    err = _expect(folder, "SET_MISSING_FILE")
    assert err.path == str(folder / second)
    (folder / second).mkdir()
    _expect(folder, "SET_MISSING_FILE")


def test_member_of_another_length_or_another_conversion(split: Path, tmp_path: Path) -> None:
    """[SET-5]: the length, then the header checksum, against the manifest."""
    folder = _copy(split, tmp_path)
    files = _manifest(folder)["files"]
    _rewrite(folder, lambda d: d["files"][2].update(size=d["files"][2]["size"] + 1))
    _expect(folder, "SET_FILE_MISMATCH")
    shutil.copy(split / SET_MANIFEST, folder / SET_MANIFEST)
    # a member of the same length from elsewhere: another member of equal size
    same = [(a["name"], b["name"]) for a in files for b in files
            if a["name"] < b["name"] and a["size"] == b["size"]]  # fmt: skip
    assert same, "the example model has members of equal length"
    a, b = same[0]
    shutil.copy(split / b, folder / a)
    err = _expect(folder, "SET_FILE_MISMATCH")
    assert err.offset == 124 and a in err.message


def test_damaged_member_gives_its_own_code_and_names_the_file(split: Path, tmp_path: Path) -> None:
    """[SET-5, SET-8]: RD-1 on open, RD-2 on validation, ENT-10 on verify, each naming the
    member."""
    folder = _copy(split, tmp_path)
    name = _manifest(folder)["files"][1]["name"]
    data = bytearray((folder / name).read_bytes())
    data[8] ^= 1  # version: the header checksum no longer matches [HDR-4]
    (folder / name).write_bytes(bytes(data))
    err = _expect(folder, "UNSUPPORTED_VERSION")
    assert err.path == str(folder / name) and name in str(err)

    folder = _copy(split, tmp_path / "b")
    data = bytearray((folder / name).read_bytes())
    data[0x10000 + 5] ^= 0xFF  # a payload byte: open and validation pass, verify fails
    (folder / name).write_bytes(bytes(data))
    err = _expect(folder, "BAD_TENSOR_CHECKSUM", at="verify")
    assert err.path == str(folder / name) and name in str(err)


def test_extra_awq2_file_in_the_folder(split: Path, tmp_path: Path) -> None:
    """[SET-8]: found by full validation, not by opening."""
    folder = _copy(split, tmp_path)
    shutil.copy(folder / _manifest(folder)["files"][0]["name"], folder / "model.awq2")
    err = _expect(folder, "SET_EXTRA_FILE", at="validate")
    assert "model.awq2" in err.message
    # and reference.open(folder) still opens the set, not the stray file
    with reference.open(folder) as s:
        assert isinstance(s, FileSet)


def _two_member_set(tmp_path: Path, first: dict[str, Any], second: dict[str, Any],
                    **manifest: Any) -> Path:  # fmt: skip
    """A set made by hand: two files written by reference.save, a manifest measured here."""
    folder = tmp_path / "hand"
    folder.mkdir(parents=True)
    files = []
    ranks = manifest.get("ranks", (0, 1))
    for i, tensors in enumerate((first, second)):
        path = folder / f"m{i}.awq2"
        own = None  # a rank set's member records its rank [SET-15]
        if manifest.get("kind") == "rank":
            own = rank_record(ranks[i], manifest["tp_size"])
        reference.save(path, tensors, metadata=own)
        data = path.read_bytes()
        files.append({"name": path.name, "size": len(data),
                      "header_crc": f"{struct.unpack_from('<I', data, 124)[0]:08x}",
                      "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    document = {"awq2_set": 1, "kind": "split", "files": files, **manifest}
    if document["kind"] == "rank":
        for rank, f in zip(manifest.pop("ranks", (0, 1)), files):
            f["rank"] = rank
        document.pop("ranks", None)
    (folder / SET_MANIFEST).write_text(json.dumps(document), encoding="utf-8")
    return folder


def test_duplicate_name_across_members(tmp_path: Path) -> None:
    """[SET-6]: two members of a split set holding one name."""
    w = np.ones((2, 3), np.float16)
    folder = _two_member_set(tmp_path, {"a": w, "dup": w}, {"b": w, "dup": w})
    with FileSet(folder) as s:
        assert s.tensor("dup").shape == (2, 3)  # the first member answers
    _expect(folder, "SET_DUPLICATE_NAME", at="validate")


def test_wrong_sha256_is_found_by_verify(split: Path, tmp_path: Path) -> None:
    """[SET-8]: the length and header checksum agree, so opening and validation pass."""
    folder = _copy(split, tmp_path)
    _rewrite(folder, lambda d: d["files"][-1].update(sha256="0" * 64))
    err = _expect(folder, "SET_BAD_SHA256", at="verify")
    assert err.expected == hashlib.sha256(
        (folder / _manifest(folder)["files"][-1]["name"]).read_bytes()).hexdigest()  # fmt: skip


# ------------------------------------------------------------------ rank sets [SET-5, SET-7]


def _rank_set(tmp_path: Path, shapes: tuple[tuple[int, ...], tuple[int, ...]],
              names: tuple[str, str] = ("w", "w"), ranks: tuple[int, int] = (0, 1),
              tp_size: int = 2) -> Path:  # fmt: skip
    first = {names[0]: np.zeros(shapes[0], np.float16), "norm": np.ones(4, np.float16)}
    second = {names[1]: np.ones(shapes[1], np.float16), "norm": np.ones(4, np.float16)}
    return _two_member_set(tmp_path, first, second, kind="rank", tp_size=tp_size, ranks=ranks)


def test_rank_set_routes_each_rank_to_its_files(tmp_path: Path) -> None:
    folder = _rank_set(tmp_path, ((4, 8), (4, 8)))
    with reference.open(folder, validate=True) as s:
        assert isinstance(s, FileSet) and s.kind == "rank" and s.tp_size == 2
        assert s.tensor("w", rank=0).tolist() == np.zeros((4, 8)).tolist()
        assert s.tensor("w", rank=1).tolist() == np.ones((4, 8)).tolist()
        assert s.names(rank=1) == s.names(rank=0)


def test_rank_missing(tmp_path: Path) -> None:
    """[SET-5]: tp_size 2 and both files on rank 0 (and names unique there)."""
    folder = _rank_set(tmp_path, ((4, 8), (4, 8)), names=("w", "v"), ranks=(0, 0))
    err = _expect(folder, "SET_RANK_MISSING")
    assert "rank 1" in err.message


def test_ranks_with_different_names_or_fields(tmp_path: Path) -> None:
    """[SET-7]: a name only one rank holds; a shape that differs between ranks (files cut for
    different TP degrees)."""
    _expect(_rank_set(tmp_path / "a", ((4, 8), (4, 8)), names=("w", "v")), "SET_RANK_MISMATCH",
            at="validate")  # fmt: skip
    err = _expect(_rank_set(tmp_path / "b", ((4, 8), (2, 8))), "SET_RANK_MISMATCH",
                  at="validate")  # fmt: skip
    assert "(4, 8)" in str(err.expected) and "(2, 8)" in str(err.found)


def test_rank_set_linear_reads_the_rank_file(single: Path, tmp_path: Path) -> None:
    """[SET-7] routing only: rank files made here from the single file's own column shards
    (what the rank-set converter will write); ``linear(prefix, tp_rank=r)`` must come from
    rank r's file, with the set's tp_size."""
    with reference.open(single) as one:
        prefix = one.layers()[0]
        files = []
        for rank in (0, 1):
            layer = one.linear(prefix, tp_rank=rank, tp_size=2, parallel="column")
            tensors = {}
            for part in ("qweight", "scales", "qzeros"):
                info = one.entry(f"{prefix}.{part}")
                tensors[f"{prefix}.{part}"] = (getattr(layer, part), info)
            files.append((layer, tensors))
    folder = tmp_path / "ranks"
    folder.mkdir()
    described = []
    for rank, (layer, tensors) in enumerate(files):
        path = folder / f"rank{rank}.awq2"
        with reference.Writer(path, metadata=rank_record(rank, 2)) as w:  # [SET-15]
            for name, (array, info) in tensors.items():
                w.add(name, np.ascontiguousarray(array), layout=info.layout, bits=info.bits,
                      group_size=info.group_size, k=layer.k, n=layer.n)  # fmt: skip
        data = path.read_bytes()
        described.append({"name": path.name, "size": len(data), "rank": rank,
                          "header_crc": f"{struct.unpack_from('<I', data, 124)[0]:08x}",
                          "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    manifest = {"awq2_set": 1, "kind": "rank", "tp_size": 2, "files": described}
    (folder / SET_MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with reference.open(folder, validate=True) as s:
        s.verify()
        for rank, (layer, _) in enumerate(files):
            got = s.linear(prefix, tp_rank=rank)
            assert (got.tp_rank, got.tp_size, got.k, got.n) == (rank, 2, layer.k, layer.n)
            for part in ("qweight", "scales", "qzeros"):
                assert getattr(got, part).tobytes() == getattr(layer, part).tobytes()
        with pytest.raises(ValueError):
            s.linear(prefix, tp_rank=0, tp_size=4)


def test_parse_manifest_reports_where(tmp_path: Path) -> None:
    """[SET-2]: a JSON error keeps the metadata parser's message, under SET_BAD_MANIFEST."""
    with pytest.raises(FormatError) as exc:
        parse_manifest(b'{"awq2_set": 1, "kind": "split", "files": [}')
    assert exc.value.code == "SET_BAD_MANIFEST" and "not strict JSON" in exc.value.message


def test_read_many_into_across_members(split: Path, single: Path) -> None:
    """Positioned reads into caller buffers, tensors of several members in one call, results
    in the order asked."""
    with reference.open(split) as s, reference.open(single) as one:
        names = s.names()[::-1]
        outs = [bytearray(s.entry(n).length) for n in names]
        arrays = s.read_many_into(zip(names, outs))
        for name, array in zip(names, arrays):
            assert array.tobytes() == one.tensor(name).tobytes()


# ------------------------------------------------------------------ dump explains a set


def test_dump_explains_a_set_member_by_member(
    split: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert dump_main([str(split)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"AWQ-v2 file set {split / SET_MANIFEST}")
    for f in _manifest(split)["files"]:
        assert f"{f['name']}  {f['size']:,} bytes" in text
        assert f"header_crc {f['header_crc']}" in text
    with reference.open(split) as s:
        for name in s.names():
            assert name in text


def test_dump_json_of_a_set(split: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dump_main([str(split / SET_MANIFEST), "--json", "--verify"]) == 0
    doc = json.loads(capsys.readouterr().out)
    manifest = _manifest(split)
    assert doc["kind"] == "split" and doc["verified"] is True
    assert [(f["name"], f["size"], f["sha256"]) for f in doc["files"]] == [
        (f["name"], f["size"], f["sha256"]) for f in manifest["files"]
    ]
    assert doc["total_size"] == sum(f["size"] for f in manifest["files"])
    with reference.open(split) as s:
        holder = {n: m.path.name for m in s.members for n in m.names()}
    assert [(t["name"], t["file"]) for t in doc["tensors"]] == list(holder.items())


def test_dump_of_an_invalid_set_names_the_code_and_the_file(
    split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _copy(split, tmp_path)
    _rewrite(folder, lambda d: d["files"][-1].update(sha256="0" * 64))
    assert dump_main([str(folder)]) == 0  # sha256 is a verification check [SET-8]
    capsys.readouterr()
    assert dump_main([str(folder), "--verify"]) == 1
    text = capsys.readouterr().out
    member = _manifest(folder)["files"][-1]["name"]
    assert "SET_BAD_SHA256" in text and f"file     {folder / member}" in text
    assert dump_main([str(folder), "--verify", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["code"] == "SET_BAD_SHA256" and doc["error"]["file"] == str(folder / member)


def test_dump_of_a_model_folder_explains_its_model_awq2(
    single: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert dump_main([str(single), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == str(single / "model.awq2")


def test_a_huge_tp_size_is_a_missing_rank_at_once(tmp_path):
    """SET-5: a rank set's tp_size far above its file count (2**64) gives SET_RANK_MISSING
    without counting to it (it hung the reader before)."""
    from tools.vectors.sets import dumps, manifest_doc, tiny_ranks

    members = tiny_ranks()
    for m in members:
        (tmp_path / m.name).write_bytes(m.data)
    doc = manifest_doc(members, 2) | {"tp_size": 2**64}
    (tmp_path / "model.awq2.set.json").write_bytes(dumps(doc))
    with pytest.raises(reference.FormatError) as info:
        reference.open(tmp_path)
    assert info.value.code == "SET_RANK_MISSING" and "rank 2 of" in info.value.message


def test_a_manifest_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    """A manifest longer than max_metadata_length bytes: SET_BAD_MANIFEST, from its size
    alone [SET-2, LIM-5]."""
    folder = tmp_path / "set"
    folder.mkdir()
    with (folder / SET_MANIFEST).open("wb") as f:
        f.write(b'{"awq2_set": 1, "kind": "split", "files": []}')
        f.truncate(MAX_METADATA_LENGTH + 1)
    with pytest.raises(FormatError) as caught:
        reference.open(folder)
    assert _code(caught) == "SET_BAD_MANIFEST"
    assert "longer than the limit" in caught.value.message


# ------------------------------------------------------------------ members that change or lead nowhere

_TRUNCATE_AFTER_OPEN = """
import os, sys
import reference
folder, member, step = sys.argv[1], sys.argv[2], sys.argv[3]
s = reference.open(folder, validate=step == "verify")
os.truncate(os.path.join(folder, member), os.path.getsize(os.path.join(folder, member)) // 2)
try:
    s.verify() if step == "verify" else s.validate()
except reference.FormatError as exc:
    print(exc.code, exc.path)
"""


@pytest.mark.parametrize("step", ["validate", "verify"])
def test_member_truncated_after_open_is_refused_not_a_crash(
    split: Path, tmp_path: Path, step: str
) -> None:
    """A member truncated after the set was opened (another process, a sync client): full
    validation or verification refuses it with the single-file reader's TRUNCATED, naming
    the member, where touching its map killed the process with SIGBUS.  In a child process,
    so that a crash fails this test and not the run."""
    folder = _copy(split, tmp_path)
    member = _manifest(folder)["files"][1]["name"]
    proc = subprocess.run([sys.executable, "-c", _TRUNCATE_AFTER_OPEN, str(folder), member, step],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-1000:]}"
    assert proc.stdout.split() == ["TRUNCATED", str(folder / member)]


def test_a_lone_file_truncated_after_open_is_refused(tmp_path: Path) -> None:
    """The same for one file: verify() reads payloads by positioned reads, never through the
    map, and checks the length first (TRUNCATED)."""
    path = tmp_path / "one.awq2"
    reference.save(path, {"w": np.ones((64, 64), np.float16)})
    script = _TRUNCATE_AFTER_OPEN.replace("os.path.join(folder, member)", "folder")
    proc = subprocess.run([sys.executable, "-c", script, str(path), "-", "verify"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-1000:]}"
    assert proc.stdout.split()[0] == "TRUNCATED"


@pytest.mark.parametrize("name", [SET_MANIFEST, "model.awq2"])
def test_a_dangling_link_is_an_unreadable_input_naming_its_target(
    split: Path, single: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """A half-downloaded Hub cache: the manifest or ``model.awq2`` is a link to a blob that is
    not there.  The folder is still a set (a model folder), never an AWQ v1 checkpoint: the
    input cannot be read, FileNotFoundError naming the link and its target (exit 3, the
    tools' status for an unreadable input)."""
    folder = _copy(split if name == SET_MANIFEST else single, tmp_path)
    (folder / name).unlink()
    (folder / name).symlink_to("../blobs/0123abcd")
    with pytest.raises(FileNotFoundError) as caught:
        reference.open(folder)
    assert caught.value.filename == str(folder / name)
    assert name in str(caught.value) and "../blobs/0123abcd" in str(caught.value)
    assert dump_main([str(folder)]) == 3  # awq2-dump says the same, for both names
    err = capsys.readouterr().err
    assert name in err and "../blobs/0123abcd" in err and "V1" not in err


@pytest.mark.parametrize("case", ["loop", "long_name"])
def test_a_member_that_cannot_be_opened_is_missing(
    split: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    """[SET-5]: a listed member that is a loop of links (ELOOP), or whose legal name is too
    long for the file system (ENAMETOOLONG), is absent: SET_MISSING_FILE naming it, as the C
    loader says, never "cannot read" the folder."""
    folder = _copy(split, tmp_path)
    old = _manifest(folder)["files"][1]["name"]
    if case == "loop":
        new = old
        (folder / new).unlink()
        (folder / new).symlink_to(new)
    else:
        new = "m" * 300 + ".awq2"  # a plain name [SET-4]; NAME_MAX is 255 bytes
        (folder / old).unlink()
        _rewrite(folder, lambda d: d["files"][1].update(name=new))
    err = _expect(folder, "SET_MISSING_FILE")
    assert err.path == str(folder / new) and new in err.message
    assert dump_main([str(folder)]) == 1
    assert "SET_MISSING_FILE" in capsys.readouterr().out
    if shutil.which("cc") is not None:
        from conformance import run

        binary = run.build_c_loader(tmp_path / "awq2c")
        proc = subprocess.run([str(binary), str(folder)], capture_output=True, text=True)
        assert proc.returncode == 1 and proc.stdout.startswith(f"SET_MISSING_FILE in {new}")


def test_member_paths_are_named_without_opening_and_after_close(split: Path) -> None:
    """An engine's load report lists the files a set consists of after the set is closed (the
    vLLM plugin's report did, and broke when members became leased): the paths come from the
    manifest, and a closed set still names them while refusing to read."""
    manifest = json.loads((split / SET_MANIFEST).read_text())
    expected = [split / m["name"] for m in manifest["files"]]
    fileset = FileSet(split)
    fileset.close()
    assert fileset.member_paths == expected
    with pytest.raises(ValueError, match="closed"):
        fileset.members[0]
