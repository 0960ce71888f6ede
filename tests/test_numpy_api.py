"""``reference.numpy`` beside ``safetensors.numpy``: the same four functions, case by case.

Each case of safetensors' own tests (``bindings/python/tests/test_simple.py``: empty and
0-d arrays, ``bool``, big-endian arrays, metadata) and each dtype both formats know goes
through ``save``/``load`` and ``save_file``/``load_file`` of both libraries; the round-tripped
arrays are compared byte for byte, with their dtype and shape.  Where the two differ on
purpose (``docs/reference/numpy.md``, "Differences from safetensors"), the test says what
each does.  safetensors is a dependency of the package, so this module always runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as st

import reference
import reference.numpy as rn
from reference.format.layers import StoredTensor
from reference.sets.setwriter import RankSetWriter, save_set
from spec.registry import DTYPE_BY_NAME

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "conformance" / "vectors"

#: The NumPy type of each registry dtype (written here from the spec's table, not read from
#: the module under test): BF16 and FP8 from ml_dtypes.
NUMPY_OF = {
    "BOOL": np.dtype(bool),
    "U8": np.dtype(np.uint8),
    "I8": np.dtype(np.int8),
    "U16": np.dtype(np.uint16),
    "I16": np.dtype(np.int16),
    "U32": np.dtype(np.uint32),
    "I32": np.dtype(np.int32),
    "U64": np.dtype(np.uint64),
    "I64": np.dtype(np.int64),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F32": np.dtype(np.float32),
    "F64": np.dtype(np.float64),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
}

#: The dtypes both libraries save *and* load as NumPy arrays: the registry's that
#: safetensors' ``numpy.py:_TYPES`` lists (it saves BF16 and FP8 but cannot load them).
BOTH = sorted(set(DTYPE_BY_NAME) & set(st._TYPES))


def sample(dtype: np.dtype, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Deterministic values of ``dtype`` (random bits for the floating types)."""
    rng = np.random.default_rng(seed)
    if dtype == np.dtype(bool):
        return rng.integers(0, 2, shape).astype(bool)
    bits = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8)
    return np.ascontiguousarray(bits).view(dtype).reshape(shape)


def as_bytes(a: np.ndarray) -> bytes:
    """The array's values, row-major, little-endian."""
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes()


def assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    assert list(got) == list(want) or set(got) == set(want), (what, list(got), list(want))
    for name, a in want.items():
        b = got[name]
        assert (b.dtype.newbyteorder("="), b.shape) == (a.dtype.newbyteorder("="), a.shape), (
            what,
            name,
        )
        assert as_bytes(b) == as_bytes(a), f"{what}: {name!r} differs"


def both_ways(tmp_path: Path, tensors: dict[str, np.ndarray], metadata=None) -> dict[str, Any]:
    """Each library's save/load and save_file/load_file of ``tensors``."""
    out: dict[str, Any] = {}
    out["ours"] = rn.load(rn.save(tensors, metadata))
    out["theirs"] = st.load(st.save(tensors, metadata))
    rn.save_file(tensors, tmp_path / "t.awq2", metadata)
    st.save_file(tensors, tmp_path / "t.safetensors", metadata)
    out["ours_file"] = rn.load_file(tmp_path / "t.awq2")
    out["ours_pread"] = rn.load_file(tmp_path / "t.awq2", backend="pread")
    out["theirs_file"] = st.load_file(tmp_path / "t.safetensors")
    return out


# --------------------------------------------------------------------- the cases, side by side

x = np.arange(12, dtype=np.int32).reshape(3, 4)

#: Cases both libraries store and give back unchanged (safetensors' test_simple.py cases and
#: the shapes it has no test for).
SAME = {
    "example": {"a": np.zeros((2, 2)), "b": np.zeros((2, 3), dtype=np.uint8)},
    "empty": {"e": np.zeros((0,), np.float32)},
    "zero-size-dims": {"e": np.zeros((2, 0, 3), np.float16), "f": np.ones((0, 0), np.int64)},
    "0-d": {"s": np.asarray(2.5, np.float64)},
    "bool": {"b": np.array([[True, False], [False, True]])},
    "bool-0-d": {"a": np.asarray(False)},  # test_simple.py:test_numpy_bool
    "big-endian": {"t": x.astype(">i4"), "f": np.arange(3, dtype=">f8")},
    "shared": {"a": x, "b": x},  # one array under two names: stored twice by both
    "overlapping": {"a": x, "b": x[1:]},  # a contiguous view inside another: stored twice
    "nothing": {},
    "every-dtype-both-know": {
        name: sample(NUMPY_OF[name], (3, 5), i) for i, name in enumerate(BOTH)
    },
}


@pytest.mark.parametrize("case", SAME, ids=list(SAME))
def test_both_libraries_round_trip_the_same_arrays(tmp_path: Path, case: str) -> None:
    tensors = SAME[case]
    got = both_ways(tmp_path, tensors)
    for way, arrays in got.items():
        assert_same(arrays, tensors, f"{case}: {way}")
        for name, array in arrays.items():  # writable arrays of their own, in both
            assert array.flags.writeable, (case, way, name)
            assert array.dtype.byteorder in "=|<", (case, way, name)


def test_the_dtypes_both_know_are_every_registry_dtype_but_bf16_and_fp8() -> None:
    """safetensors.numpy loads 12 of the registry's 15 dtypes; of its own, C64 is not in the
    registry [ENT-4]."""
    assert set(DTYPE_BY_NAME) - set(BOTH) == {"BF16", "F8_E4M3", "F8_E5M2"}
    assert set(st._TYPES) - set(BOTH) == {"C64"}
    assert set(NUMPY_OF) == set(DTYPE_BY_NAME)


def test_bf16_and_fp8_load_here_and_not_in_safetensors_numpy(tmp_path: Path) -> None:
    """safetensors saves them (the same bytes as ours) but ``numpy.py:_getdtype`` has no
    NumPy type for them: ``KeyError`` on load."""
    for name in ("BF16", "F8_E4M3", "F8_E5M2"):
        tensors = {"w": sample(NUMPY_OF[name], (4, 3), 9)}
        assert_same(rn.load(rn.save(tensors)), tensors, name)
        rn.save_file(tensors, tmp_path / "w.awq2")
        assert_same(rn.load_file(tmp_path / "w.awq2"), tensors, name)
        data = st.save(tensors)
        with pytest.raises(KeyError):
            st.load(data)
        assert rn.save(tensors).count(as_bytes(tensors["w"])) == 1
        assert data.endswith(as_bytes(tensors["w"]))  # the same bytes, stored by both


def test_non_contiguous_arrays_are_stored_by_value_here(tmp_path: Path) -> None:
    """A transpose, a strided slice and a Fortran-order array: stored here by their values;
    safetensors (``numpy.py:_flatten``: the data pointer and ``nbytes``) stores the memory
    under the array instead, other values, without an error."""
    tensors = {"t": x.T, "col": x[:, 1], "f": np.asfortranarray(x)}
    got = both_ways(tmp_path, tensors)
    for way in ("ours", "ours_file", "ours_pread"):
        assert_same(got[way], tensors, way)
    for way in ("theirs", "theirs_file"):
        assert got[way]["col"].tolist() == [1, 2, 3] != x[:, 1].tolist()  # x's first bytes
        assert got[way]["t"].tobytes() == x.tobytes() != x.T.tobytes()


def test_save_bytes_are_the_file_save_file_writes(tmp_path: Path) -> None:
    """save() is save_file() through a temporary file: the same bytes, and reference.save's;
    like safetensors' save / save_file (test_simple.py:test_serialization)."""
    tensors = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float16)}
    meta = {"format": "np"}
    rn.save_file(tensors, tmp_path / "a.awq2", meta)
    reference.save(tmp_path / "b.awq2", tensors, meta)
    data = rn.save(tensors, meta)
    assert data == (tmp_path / "a.awq2").read_bytes() == (tmp_path / "b.awq2").read_bytes()
    st.save_file(tensors, tmp_path / "a.safetensors", meta)
    assert st.save(tensors, meta) == (tmp_path / "a.safetensors").read_bytes()


def test_load_copies_out_of_data_in_both(tmp_path: Path) -> None:
    tensors = {"w": np.arange(6, dtype=np.int16)}
    for data, loaded in ((d := rn.save(tensors), rn.load(d)), (e := st.save(tensors), st.load(e))):
        raw = np.frombuffer(data, np.uint8)
        assert not np.shares_memory(loaded["w"], raw)
        loaded["w"][0] = 99
        assert loaded["w"][0] == 99


def test_load_takes_any_bytes_like_safetensors_bytes_only() -> None:
    data = rn.save({"w": np.arange(3, dtype=np.uint8)})
    for buffer in (bytearray(data), memoryview(data)):
        assert rn.load(buffer)["w"].tolist() == [0, 1, 2]
    with pytest.raises(TypeError):
        st.load(bytearray(st.save({"w": np.arange(3, dtype=np.uint8)})))
    for wrong in ("text", 5):
        with pytest.raises(TypeError):
            rn.load(wrong)
        with pytest.raises(TypeError):
            st.load(wrong)


# ------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("tensors", "theirs"),
    [
        ([("a", x)], AttributeError),  # not a dict
        ({"a": [1, 2, 3]}, AttributeError),  # not an ndarray
        ({"a": np.float32(1.0)}, AttributeError),  # a NumPy scalar, not an array
        ({1: x}, TypeError),  # a name that is not a str
        ({"a": np.zeros(2, np.complex128)}, safetensors.SafetensorError),  # no such dtype
        ({"a": np.zeros(2, object)}, safetensors.SafetensorError),
    ],
    ids=["list", "list-value", "numpy-scalar", "int-name", "complex128", "object"],
)
def test_both_refuse_and_write_nothing(tmp_path: Path, tensors, theirs) -> None:
    with pytest.raises(theirs):
        st.save_file(tensors, tmp_path / "x.safetensors")
    with pytest.raises(TypeError) as caught:
        rn.save_file(tensors, tmp_path / "x.awq2")
    with pytest.raises(TypeError):
        rn.save(tensors)
    assert not (tmp_path / "x.awq2").exists()
    if isinstance(tensors, dict) and tensors and isinstance(next(iter(tensors)), str):
        assert repr(next(iter(tensors))) in str(caught.value) or "dtype" in str(caught.value)


def test_complex64_is_stored_by_safetensors_and_refused_here(tmp_path: Path) -> None:
    tensors = {"c": np.arange(3, dtype=np.complex64)}
    assert_same(st.load(st.save(tensors)), tensors, "safetensors")
    with pytest.raises(TypeError, match="complex64"):
        rn.save_file(tensors, tmp_path / "c.awq2")
    assert not (tmp_path / "c.awq2").exists()


# ------------------------------------------------------------------------------- metadata


def metadata_of(tmp_path: Path, metadata) -> tuple[Any, Any]:
    """What each library reads back of ``metadata`` (ours: ``reference.open(...).metadata``;
    safetensors: ``safe_open(...).metadata()``)."""
    tensors = {"w": np.zeros(2, np.float32)}
    rn.save_file(tensors, tmp_path / "m.awq2", metadata)
    with reference.open(tmp_path / "m.awq2") as f:
        ours = f.metadata
    st.save_file(tensors, tmp_path / "m.safetensors", metadata)
    with safetensors.safe_open(tmp_path / "m.safetensors", "np") as f:
        theirs = f.metadata()
    return ours, theirs


def test_str_to_str_metadata_reads_back_the_same(tmp_path: Path) -> None:
    meta = {"format": "np", "note": "ünïcode", "": "empty key"}
    assert metadata_of(tmp_path, meta) == (meta, meta)
    assert rn.load(rn.save({"w": np.zeros(1)}, meta)).keys() == {"w"}  # tensors only, as there


def test_no_metadata_reads_as_an_empty_object_here_and_none_there(tmp_path: Path) -> None:
    assert metadata_of(tmp_path, None) == ({}, None)


@pytest.mark.parametrize(
    "metadata",
    [
        {"config": {"hidden_size": 256, "rope": {"theta": 1e4}}},
        {"n": 1, "flag": True, "nothing": None, "list": [1, "two", 3.5]},
        {"layers": [[0, 1], {"a": []}]},
    ],
    ids=["nested", "scalars", "lists"],
)
def test_json_metadata_only_awq2_takes(tmp_path: Path, metadata) -> None:
    """Any JSON object [META-1]; safetensors' Rust binding takes str -> str only."""
    tensors = {"w": np.zeros(2, np.float32)}
    with pytest.raises(TypeError):
        st.save(tensors, metadata)
    rn.save_file(tensors, tmp_path / "m.awq2", metadata)
    with reference.open(tmp_path / "m.awq2") as f:
        assert f.metadata == metadata


@pytest.mark.parametrize(
    ("metadata", "ours"),
    [
        ([("format", "np")], TypeError),
        ("format=np", TypeError),
        ({"k": float("nan")}, ValueError),  # a number no JSON holds [META-5]
        ({"k": {1, 2}}, TypeError),  # no JSON value
        ({("a", "b"): "v"}, TypeError),  # a key JSON cannot hold
    ],
    ids=["list", "str", "nan", "set", "tuple-key"],
)
def test_metadata_both_refuse(tmp_path: Path, metadata, ours) -> None:
    tensors = {"w": np.zeros(2, np.float32)}
    with pytest.raises(TypeError):
        st.save(tensors, metadata)
    with pytest.raises(ours):
        rn.save_file(tensors, tmp_path / "m.awq2", metadata)
    assert not (tmp_path / "m.awq2").exists()


# ------------------------------------------------------------------ load_file: what it opens


def test_a_missing_file_raises_file_not_found_in_both(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        st.load_file(tmp_path / "absent.safetensors")
    with pytest.raises(FileNotFoundError):
        rn.load_file(tmp_path / "absent.awq2")


def test_the_mmap_backend_writes_privately(tmp_path: Path) -> None:
    """``"mmap"``: views of a private map (writable; the file does not change)."""
    path = tmp_path / "w.awq2"
    rn.save_file({"w": np.arange(8, dtype=np.float32)}, path)
    before = path.read_bytes()
    loaded = rn.load_file(path)
    loaded["w"][:] = -1
    assert path.read_bytes() == before
    assert rn.load_file(path)["w"].tolist() == list(range(8))
    with pytest.raises(ValueError, match="backend"):
        rn.load_file(path, backend="direct")


def test_a_model_folder_and_a_split_set_give_every_tensor(tmp_path: Path) -> None:
    tensors = {f"t{i}": sample(NUMPY_OF["F16"], (64, 64), i) for i in range(6)}
    folder = tmp_path / "model"
    folder.mkdir()
    rn.save_file(tensors, folder / "model.awq2")
    assert_same(rn.load_file(folder), tensors, "folder")
    members = save_set(tmp_path / "split", tensors, max_size=3 * 65536 + 4096)
    assert len(members) > 1
    for backend in ("mmap", "pread"):
        assert_same(rn.load_file(tmp_path / "split", backend=backend), tensors, backend)
        assert_same(rn.load_file(tmp_path / "split", validate=True), tensors, backend)


def rank_set(tmp_path: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """A rank set of two ranks, each holding its own values under the same names."""
    per_rank = [{"w": np.full((4, 8), r, np.float16), "b": np.arange(3, dtype=np.int32) + r}
                for r in range(2)]  # fmt: skip
    out = tmp_path / "ranks"
    out.mkdir()
    writer = RankSetWriter(out, tp_size=2)
    for name in ("w", "b"):
        writer.add_ranks([[StoredTensor(name, part[name])] for part in per_rank])
    writer.close()
    return out, per_rank


def test_a_rank_set_needs_a_rank_and_gives_that_ranks_shards(tmp_path: Path) -> None:
    folder, per_rank = rank_set(tmp_path)
    with pytest.raises(reference.FormatError) as caught:
        rn.load_file(folder)
    assert caught.value.code == "TP_RANK_REQUIRED"
    for rank, want in enumerate(per_rank):
        assert_same(rn.load_file(folder, rank=rank), want, f"rank {rank}")
        with reference.open(folder, rank=rank) as f:
            assert_same(rn.load_file(folder, rank=rank, backend="pread"),
                        {name: f.tensor(name) for name in f.names()}, "open")  # fmt: skip
    with pytest.raises(ValueError):
        rn.load_file(folder, rank=2)


def test_a_single_file_has_rank_0_only(tmp_path: Path) -> None:
    rn.save_file({"w": np.zeros(2)}, tmp_path / "w.awq2")
    assert rn.load_file(tmp_path / "w.awq2", rank=0).keys() == {"w"}
    with pytest.raises(ValueError, match="not a rank set"):
        rn.load_file(tmp_path / "w.awq2", rank=1)


def test_a_safetensors_checkpoint_is_refused(tmp_path: Path) -> None:
    st.save_file({"w": np.zeros(2, np.float32)}, tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="not AWQ-v2"):
        rn.load_file(tmp_path / "w.safetensors")


# ------------------------------------------------------------------ load and load_file: checks


@pytest.mark.parametrize(
    ("vector", "code"),
    [
        ("n_bad_magic", "BAD_MAGIC"),
        ("n_entry_checksum", "BAD_ENTRY_CHECKSUM"),
        ("n_overlapping_payloads", "OVERLAP"),
        ("n_gap_before_payload", "SLAB_GAP"),
        ("n_duplicate_name", "DUPLICATE_NAME"),
    ],
)
def test_a_bad_file_raises_its_error_code(vector: str, code: str) -> None:
    """What safetensors checks of its header: every tensor there, under its own name, made
    of bytes of its own."""
    path = VECTORS / f"{vector}.awq2"
    for load in (lambda: rn.load(path.read_bytes()), lambda: rn.load_file(path),
                 lambda: rn.load_file(path, backend="pread")):  # fmt: skip
        with pytest.raises(reference.FormatError) as caught:
            load()
        assert caught.value.code == code


def test_validate_true_runs_full_validation() -> None:
    path = VECTORS / "n_hidden_payload_in_slab_gap.awq2"
    assert rn.load(path.read_bytes()).keys() == rn.load_file(path).keys()
    for load in (lambda: rn.load(path.read_bytes(), validate=True),
                 lambda: rn.load_file(path, validate=True)):  # fmt: skip
        with pytest.raises(reference.FormatError) as caught:
            load()
        assert caught.value.code == "NONZERO_PADDING"


def test_every_must_accept_vector_loads_as_the_reader_reads_it() -> None:
    for path in sorted(VECTORS.glob("y_*.awq2")):
        with reference.open(path) as f:
            want = {name: np.asarray(f.tensor(name)) for name in f.names()}
        assert_same(rn.load(path.read_bytes()), want, path.name)
        assert_same(rn.load_file(path), want, path.name)


# ------------------------------------------------------------------------------ API and docs


def test_star_import_gives_the_public_api_each_documented() -> None:
    source = (ROOT / "reference" / "numpy.py").read_text(encoding="utf-8")
    defined = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    assert sorted(rn.__all__) == sorted(n for n in defined if not n.startswith("_"))
    for name in rn.__all__:
        value = getattr(rn, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), name
        else:
            assert re.search(rf"^#: .+\n{name}\b", source, re.MULTILINE), name


def test_the_docs_examples_run(tmp_path: Path, monkeypatch) -> None:
    text = (ROOT / "docs" / "reference" / "numpy.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/reference/numpy.md, python block {number}", "exec"), namespace)


def test_the_docs_name_every_function() -> None:
    text = (ROOT / "docs" / "reference" / "numpy.md").read_text(encoding="utf-8")
    for name in ("save", "load", "save_file", "load_file"):
        assert f"`{name}(" in text, name
