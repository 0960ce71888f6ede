"""``reference.safe_open``: safetensors' ``safe_open`` over AWQ-v2 files, folders and sets.

Expected values come from elsewhere: names, tensors and metadata from ``reference.open`` of
the same path; every slice from NumPy's own indexing of the whole tensor
(``Reader.tensor(name)[key]``), and, for the index forms safetensors 0.8.0 takes, from
safetensors' ``safe_open`` over the same arrays saved by ``safetensors.numpy``; the bytes a
slice reads from the process's read counters (``/proc/self/io``: ``rchar`` counts the bytes
that read system calls returned).  The torch tests need the optional extra: skipped without
it, failed when ``AWQ2_REQUIRE_TORCH=1`` (as ``tests/test_torch.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import reference
from reference.examples import write_checkpoint
from reference.format.layers import StoredTensor
from reference.ground.errors import FormatError
from reference.quant.dtypes import raw_bits
from reference.sets.setwriter import RankSetWriter, save_set

RNG = np.random.default_rng(31)
METADATA = {"config": {"hidden_size": 4, "layers": [1, 2]}, "note": "ünïcode", "n": 3}


def _tensors() -> dict[str, np.ndarray]:
    return {
        "f16": RNG.standard_normal((37, 23)).astype(np.float16),
        "bf16": RNG.standard_normal((5, 7, 9)).astype(ml_dtypes.bfloat16),
        "i32": RNG.integers(-1000, 1000, size=100, dtype=np.int32),
        "u8": RNG.integers(0, 255, size=(3, 4, 5, 6), dtype=np.uint8),
        "flags": np.array([True, False, True]),
        "scalar": np.array(2.5, dtype=np.float64),
        "empty": np.zeros((0, 7), dtype=np.int64),
        "wide": RNG.integers(0, 1 << 30, size=(2, 70000), dtype=np.int64),
    }


#: The tensors safetensors 0.8.0's NumPy side saves too (no ml_dtypes), compared with it.
SAFETENSORS_NAMES = ("f16", "i32", "u8", "flags", "scalar", "wide")
LAYER = "model.layers.0.mlp.down_proj"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An AWQ-v2 file (with one Marlin layer) and the safetensors file of its dense tensors."""
    tmp = tmp_path_factory.mktemp("safe_open")
    tensors = _tensors()
    k, n, group = 256, 128, 128
    with reference.Writer(tmp / "model.awq2", metadata=METADATA) as w:
        for name, array in tensors.items():
            w.add(name, array)
        family = w.add_linear(LAYER, bits=4, group_size=group,
                              q=RNG.integers(0, 16, size=(k, n), dtype=np.uint8),
                              z=RNG.integers(0, 16, size=(k // group, n), dtype=np.uint8),
                              scales=np.full((k // group, n), 0.01, np.float16))  # fmt: skip
    assert family == "MARLIN"
    safetensors.numpy.save_file({n: tensors[n] for n in SAFETENSORS_NAMES}, tmp / "model.st")
    return tmp / "model.awq2", tmp / "model.st"


def _same(got: Any, want: Any) -> None:
    """Same shape, dtype and stored bits (NaN-safe)."""
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), type(got)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    assert raw_bits(got).tobytes() == raw_bits(want).tobytes()


# ------------------------------------------------------------------------- what reference.open says


def test_keys_tensors_and_metadata_are_reference_opens(model: tuple[Path, Path]) -> None:
    path, _ = model
    with reference.open(path) as f, reference.safe_open(path, "np") as s:
        assert s.keys() == sorted(f.names())  # safetensors' order (sorted)
        assert s.offset_keys() == f.names()  # the payloads' order
        assert s.metadata() == f.metadata == METADATA  # any JSON object, not str -> str
        for name in f.names():
            _same(s.get_tensor(name), f.tensor(name))
            sliced = s.get_slice(name)
            info = f.entry(name)
            assert sliced.get_shape() == list(info.shape)
            assert sliced.get_dtype() == info.dtype
            _same(sliced[...], f.tensor(name))


def test_a_quantised_layer_comes_as_stored_in_the_marlin_layout(model: tuple[Path, Path]) -> None:
    path, _ = model
    with reference.open(path) as f, reference.safe_open(path, "numpy") as s:
        layer = f.linear(LAYER)
        assert layer.layout == "MARLIN"
        for part in ("qweight", "scales", "qzeros"):
            _same(s.get_tensor(f"{LAYER}.{part}"), getattr(layer, part))
            _same(s.get_slice(f"{LAYER}.{part}")[:1], getattr(layer, part)[:1])


def test_the_folder_and_the_metadata_of_a_file_without_any(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    reference.save(folder / "model.awq2", {"w": np.arange(6, dtype=np.int16).reshape(2, 3)})
    with reference.safe_open(folder, "np") as s:
        assert s.keys() == ["w"] and s.metadata() is None  # none stored, as safetensors
        _same(s.get_slice("w")[1, ::-1], np.array([5, 4, 3], np.int16))


# ------------------------------------------------------------------------------------- slicing


def _hypothesis() -> Any:
    """hypothesis, or a skip: the torch environment of ``.ci/run`` has none, and this module's
    torch tests run there (so the property tests build their strategies when they run)."""
    return pytest.importorskip("hypothesis")


def _index(st: Any, shape: tuple[int, ...], safetensors_only: bool = False) -> Any:
    """A strategy: an index of ints and slices for the first dimensions of ``shape`` and,
    after a ``...``, perhaps for its last ones; with ``safetensors_only``, the forms
    safetensors 0.8.0 takes: slices with non-negative bounds inside the dimension and a
    positive step."""

    @st.composite
    def index(draw: Any) -> Any:
        ellipsis = draw(st.booleans())
        before = draw(st.integers(0, len(shape)))
        after = draw(st.integers(0, len(shape) - before)) if ellipsis else 0
        dims = shape[:before] + (shape[len(shape) - after :] if after else ())
        items: list[Any] = []
        for size in dims:
            if size and draw(st.booleans()):
                items.append(draw(st.integers(-size, size - 1)))
            elif safetensors_only:
                start = draw(st.none() | st.integers(0, size - 1)) if size else None
                stop = draw(st.none() | st.integers((start or 0) + 1, size)) if size else None
                items.append(slice(start, stop, draw(st.none() | st.integers(1, 4))))
            else:
                bound = st.none() | st.integers(-size - 3, size + 3)
                step = st.none() | st.integers(-4, 4).filter(bool)
                items.append(slice(draw(bound), draw(bound), draw(step)))
        if ellipsis:
            items.insert(before, Ellipsis)
        if len(items) == 1 and draw(st.booleans()):
            return items[0]
        return tuple(items)

    return index()


NAMES = list(_tensors())


def test_get_slice_is_numpys_indexing_of_the_whole_tensor(model: tuple[Path, Path]) -> None:
    hypothesis = _hypothesis()
    st = hypothesis.strategies
    path, _ = model

    @hypothesis.settings(max_examples=300, deadline=None)
    @hypothesis.given(data=st.data())
    def check(data: Any) -> None:
        name = data.draw(st.sampled_from(NAMES))
        with reference.open(path) as f, reference.safe_open(path, "np") as s:
            whole = f.tensor(name)
            key = data.draw(_index(st, whole.shape))
            _same(s.get_slice(name)[key], whole[key])

    check()


def test_get_slice_is_safetensors_get_slice(model: tuple[Path, Path]) -> None:
    hypothesis = _hypothesis()
    st = hypothesis.strategies
    path, st_path = model

    @hypothesis.settings(max_examples=150, deadline=None)
    @hypothesis.given(data=st.data())
    def check(data: Any) -> None:
        name = data.draw(st.sampled_from(SAFETENSORS_NAMES))
        with safetensors.safe_open(st_path, "np") as theirs, reference.safe_open(path, "np") as s:
            assert sorted(theirs.keys()) == sorted(set(s.keys()) & set(SAFETENSORS_NAMES))
            sliced, other = s.get_slice(name), theirs.get_slice(name)
            assert (sliced.get_shape(), sliced.get_dtype()) == (
                other.get_shape(),
                other.get_dtype(),
            )
            key = data.draw(_index(st, tuple(other.get_shape()), safetensors_only=True))
            _same(sliced[key], other[key])

    check()


@pytest.mark.parametrize(
    ("key", "error"),
    [
        ((0, 0, 0), IndexError),  # more indices than dimensions
        ((..., 0, ...), IndexError),  # two ellipses
        (37, IndexError),
        ((0, -24), IndexError),
        ([0, 1], TypeError),  # lists, arrays, booleans and None: not here
        (np.array([0, 1]), TypeError),
        (True, TypeError),
        ((None, 0), TypeError),
        (0.5, TypeError),
        (slice(None, None, 0), ValueError),  # step 0: Python's slice.indices
    ],
    ids=repr,
)
def test_get_slice_refuses_what_it_does_not_index(
    model: tuple[Path, Path], key: Any, error: type[Exception]
) -> None:
    with reference.safe_open(model[0], "np") as s, pytest.raises(error):
        s.get_slice("f16")[key]


def test_every_call_after_close_is_refused(model: tuple[Path, Path]) -> None:
    s = reference.safe_open(model[0], "np")
    sliced, view = s.get_slice("f16"), s.get_tensor("f16")
    with s:
        pass
    calls = (s.keys, s.offset_keys, s.metadata, s.get_tensors, lambda: s.get_tensor("f16"),
             lambda: sliced[0])  # fmt: skip
    for call in calls:
        with pytest.raises(reference.RefusedError, match="closed") as caught:
            call()
        # safetensors' SafetensorError is FormatError here; ValueError as before
        assert isinstance(caught.value, reference.FormatError | ValueError | RuntimeError)
        assert caught.value.code == "SAFE_OPEN_CLOSED"
    assert view.shape == (37, 23)  # what was handed out stays valid


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_backends_get_tensors_and_writable_arrays(model: tuple[Path, Path], backend: str) -> None:
    """``backend`` as safetensors takes it; ``get_tensors`` in offset order; a NumPy tensor is
    writable (``"mmap"``: a private, copy-on-write map, so the file never changes)."""
    path = model[0]
    before = path.read_bytes()
    with reference.open(path) as f, reference.safe_open(path, "np", backend=backend) as s:
        got = s.get_tensors()
        assert list(got) == s.offset_keys() == f.names()
        for name in f.names():
            _same(got[name], f.tensor(name))
            array = s.get_tensor(name)
            assert array.flags.writeable, name
            if array.size:
                raw = array.reshape(-1).view(np.uint8)  # the same bytes, for any dtype
                raw[0] ^= 0xFF
                assert raw[0] != f.tensor(name).reshape(-1).view(np.uint8)[0]
                again = s.get_tensor(name).reshape(-1).view(np.uint8)
                # "mmap": one map of the file, this process's copy; "pread": a new array
                assert bool(again[0] == raw[0]) is (backend == "mmap"), name
    assert path.read_bytes() == before
    with reference.open(path) as f, reference.safe_open(path, "np", backend=backend) as s:
        for name in f.names():
            _same(s.get_tensor(name), f.tensor(name))  # a new safe_open: the file's bytes
    with pytest.raises(ValueError, match="backend 'mmapp'"):
        reference.safe_open(path, "np", backend="mmapp")


def test_metadata_is_none_only_when_none_was_written(tmp_path: Path) -> None:
    """``metadata=None`` stores nothing (``metadata_length`` 0 [META-1]): ``None``, as
    safetensors says of a file without ``__metadata__``; ``{}`` is stored, and read, as
    ``{}``."""
    import reference.numpy as rn

    tensors = {"w": np.zeros(3, np.float32)}
    for metadata, expected in ((None, None), ({}, {}), ({"format": "pt"}, {"format": "pt"})):
        rn.save_file(tensors, tmp_path / "m.awq2", metadata)
        with reference.safe_open(tmp_path / "m.awq2", "np") as s:
            assert s.metadata() == expected and (expected is not None or s.metadata() is None)


def test_an_empty_list_selects_no_rows(model: tuple[Path, Path]) -> None:
    """``[]`` alone is no rows, as safetensors' NumPy path takes it (its only list)."""
    with reference.open(model[0]) as f, reference.safe_open(model[0], "np") as s:
        _same(s.get_slice("f16")[[]], f.tensor("f16")[[]])


def test_framework_device_and_what_it_does_not_open(
    model: tuple[Path, Path], tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="framework 'tf'"):
        reference.safe_open(model[0], "tf")
    with pytest.raises(ValueError, match="NumPy arrays live on the CPU"):
        reference.safe_open(model[0], "np", device="cuda:0")
    with pytest.raises(ValueError, match="not a rank set"):
        reference.safe_open(model[0], "np", rank=1)
    with reference.safe_open(model[0], "np") as s, pytest.raises(reference.TensorNotFoundError):
        s.get_slice("missing")
    checkpoint = write_checkpoint(tmp_path / "awq-v1")
    with pytest.raises(ValueError, match="checkpoint: safe_open reads AWQ-v2"):
        reference.safe_open(checkpoint, "np")


def test_a_slice_reads_never_through_the_map(tmp_path: Path) -> None:
    """The file is cut inside the payload after ``get_slice``: a read through the map would
    kill the process (SIGBUS); the positioned read finds the end of the file: TRUNCATED."""
    path = tmp_path / "cut.awq2"
    rows = np.arange(64 * 1024, dtype=np.int32).reshape(256, 256)
    reference.save(path, {"w": rows})
    with reference.safe_open(path, "np") as s:
        sliced = s.get_slice("w")
        os.truncate(path, sliced.info.offset + 100 * 1024)  # rows 0..99 are left
        _same(sliced[10:12, 3:5], rows[10:12, 3:5])
        with pytest.raises(FormatError) as exc:
            sliced[99:101]
    assert exc.value.code == "TRUNCATED"


# ---------------------------------------------------------------------- the bytes a slice reads

COLUMNS = 3000  # F16: a 6000-byte row, so rows start in the middle of pages


def _big_file(folder: Path, size: int) -> tuple[Path, int]:
    """A file holding one F16 tensor of about ``size`` bytes of zeros, written 1 MiB at a
    time (0.2 s for 256 MiB here); the row count."""
    rows = size // (2 * COLUMNS)
    zeros = memoryview(bytes(1 << 20))

    def chunks() -> Any:
        left = rows * COLUMNS * 2
        while left:
            yield zeros[: min(left, len(zeros))]
            left -= min(left, len(zeros))

    with reference.Writer(folder / "big.awq2") as w:
        w.add_bytes("big", "F16", (rows, COLUMNS), chunks())
    return folder / "big.awq2", rows


def _rchar(fd: int) -> tuple[int, int]:
    """The process's ``rchar`` (bytes that read system calls returned) read from ``fd``
    (``/proc/self/io``), and the bytes this read itself returned, counted after it."""
    text = os.pread(fd, 4096, 0)
    fields = dict(line.split(b": ") for line in text.splitlines())
    return int(fields[b"rchar"]), len(text)


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="Linux's /proc/self/io")
@pytest.mark.parametrize(
    "size", [256 << 20, pytest.param(1 << 30, marks=pytest.mark.slow)], ids=["256MiB", "1GiB"]
)
def test_get_slice_reads_the_covered_rows_only(tmp_path: Path, size: int) -> None:
    """Issue 31's measure: 2 rows of a large tensor read at most those rows plus a 4 KiB block
    each side; here exactly the rows the index covers (its first and last row and those
    between), whatever it selects of them."""
    path, rows = _big_file(tmp_path, size)
    row = COLUMNS * 2
    middle = rows // 2
    counters = os.open("/proc/self/io", os.O_RDONLY)
    with reference.safe_open(path, "np") as s:
        sliced = s.get_slice("big")
        sliced[0:2]  # the first call's one-time costs
        cases = [
            ((slice(middle, middle + 2),), 2 * row, (2, COLUMNS)),
            ((slice(middle, middle + 2), slice(100, 200)), 2 * row, (2, 100)),
            ((middle,), row, (COLUMNS,)),
            ((slice(middle + 8, middle - 1, -4),), 9 * row, (3, COLUMNS)),
            ((-1, slice(10, 20)), 10 * 2, (10,)),  # an int first: 10 elements of one row
            ((slice(middle, middle),), 0, (0, COLUMNS)),
        ]
        for key, covered, shape in cases:
            before, own = _rchar(counters)
            part = sliced[key]
            read = _rchar(counters)[0] - before - own
            assert part.shape == shape and not part.any()
            assert covered <= read <= covered + 8192, (key, read, covered)
            assert read == covered, (key, read, covered)  # nothing else read meanwhile
    os.close(counters)


# ------------------------------------------------------------------------------------ sets


def _rank_set(folder: Path, tp_size: int = 2) -> list[dict[str, np.ndarray]]:
    folder.mkdir()
    shards = [
        {"w": np.full((4, 6), r, np.float16) + np.arange(24, dtype=np.float16).reshape(4, 6),
         "b": np.arange(3, dtype=np.int32) * (r + 1)}
        for r in range(tp_size)
    ]  # fmt: skip
    with RankSetWriter(folder, tp_size=tp_size, metadata={"config": {"x": 1}}) as w:
        w.add_ranks([[StoredTensor(n, a) for n, a in shard.items()] for shard in shards])
    return shards


def test_a_rank_set_needs_a_rank_and_reads_that_ranks_shards(tmp_path: Path) -> None:
    shards = _rank_set(tmp_path / "ranks")
    with pytest.raises(FormatError) as exc:
        reference.safe_open(tmp_path / "ranks", "np")
    assert exc.value.code == "TP_RANK_REQUIRED" and "rank=R" in str(exc.value)
    with pytest.raises(ValueError, match="rank 2"):
        reference.safe_open(tmp_path / "ranks", "np", rank=2)
    for r, shard in enumerate(shards):
        with (
            reference.open(tmp_path / "ranks", rank=r) as f,
            reference.safe_open(tmp_path / "ranks", "np", rank=r) as s,
        ):
            assert s.offset_keys() == f.names() and s.keys() == sorted(f.names())
            assert s.metadata() == f.metadata
            for name, array in shard.items():
                _same(s.get_tensor(name), array)
                _same(s.get_slice(name)[1:, ...], array[1:, ...])
                _same(s.get_slice(name)[..., ::-2], array[..., ::-2])


def test_a_split_set_reads_each_tensor_from_its_member(tmp_path: Path) -> None:
    tensors = {f"t{i}": np.arange(i, i + 40000, dtype=np.int32).reshape(200, 200) for i in range(4)}
    members = save_set(tmp_path / "split", tensors, max_size=200_000, metadata={"a": [1]})
    assert len(members) > 1
    with (
        reference.open(tmp_path / "split") as f,
        reference.safe_open(tmp_path / "split", "np") as s,
    ):
        assert s.offset_keys() == f.names() == list(tensors) and s.metadata() == f.metadata
        for name, array in tensors.items():
            _same(s.get_slice(name)[-3:, 7], array[-3:, 7])


# ------------------------------------------------------------------------------------ torch


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        if os.environ.get("AWQ2_REQUIRE_TORCH") == "1":
            pytest.fail("AWQ2_REQUIRE_TORCH=1 and torch does not import", pytrace=False)
        pytest.skip("torch is not installed (the optional extra 'torch')")
    return torch


def _bits(tensor: Any) -> np.ndarray:
    """A CPU tensor's stored bits as NumPy unsigned integers of its item size."""
    torch = _torch()
    signed = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    bits = tensor.contiguous().view(signed[tensor.element_size()]).numpy()
    return bits.view(f"<u{tensor.element_size()}")


def test_pt_gives_torch_tensors_of_the_same_bits(model: tuple[Path, Path]) -> None:
    torch = _torch()
    import reference.torch as rt

    path, _ = model
    with reference.open(path) as f, reference.safe_open(path, "pt") as s:
        assert s.keys() == sorted(f.names()) and s.metadata() == f.metadata
        for name in f.names():
            whole = f.tensor(name)
            got = s.get_tensor(name)
            assert isinstance(got, torch.Tensor) and got.device.type == "cpu"
            assert got.dtype == rt.TORCH_DTYPES[f.entry(name).dtype]
            assert tuple(got.shape) == whole.shape
            assert np.array_equal(_bits(got), raw_bits(whole))
            key = (slice(1, None, 2),) if whole.ndim else ()
            part = s.get_slice(name)[key]
            assert isinstance(part, torch.Tensor) and part.dtype == got.dtype
            assert np.array_equal(_bits(part), raw_bits(np.array(whole[key])))


def test_pt_moves_to_the_device_and_checks_it_at_open(model: tuple[Path, Path]) -> None:
    torch = _torch()
    with reference.safe_open(model[0], "pt", device="meta") as s:  # a device that is not the CPU
        assert s.get_tensor("f16").device.type == "meta"
        assert s.get_slice("f16")[:2].device.type == "meta"
    with pytest.raises(RuntimeError):
        reference.safe_open(model[0], "pt", device="no-such-device")
    assert isinstance(torch.empty(0), torch.Tensor)


#: Index forms that safetensors' "pt" path hands to torch's own ``[]`` (lib.rs:1563-1628).
def _torch_keys() -> list[Any]:
    torch = _torch()
    return [
        [0, 2],
        [],
        np.array([3, 1]),
        torch.tensor([2, 0, 2]),
        (None, 0),
        True,
        (slice(None), [0, 5]),
        torch.arange(37) % 3 == 0,  # a boolean mask
        (..., None),
        (1, torch.tensor(4)),
    ]


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_pt_get_slice_takes_every_index_torch_takes(model: tuple[Path, Path], backend: str) -> None:
    """With ``"pt"``, what safetensors' slice takes (lists, empty lists, arrays, int and bool
    tensors, ``None``, booleans), each compared with safetensors' own answer over the same
    array and with torch's ``[]`` of the whole tensor."""
    torch = _torch()
    path, theirs_path = model
    with (
        reference.safe_open(path, "pt", backend=backend) as s,
        safetensors.safe_open(theirs_path, "pt") as theirs,
    ):
        whole = s.get_tensor("f16")
        for key in _torch_keys():
            got = s.get_slice("f16")[key]
            assert torch.equal(got, whole[key]), key
            assert torch.equal(got, theirs.get_slice("f16")[key]), key


def test_pt_get_tensor_is_writable_and_the_file_unchanged(model: tuple[Path, Path]) -> None:
    torch = _torch()
    path = model[0]
    before = path.read_bytes()
    with reference.safe_open(path, "pt") as s:
        got = s.get_tensors()
        assert list(got) == s.offset_keys()
        got["f16"] += 1  # safetensors' pt tensors are slices of one storage: the same here
        assert torch.equal(got["f16"], s.get_tensor("f16"))
    assert path.read_bytes() == before
    with reference.safe_open(path, "pt") as s:
        assert not torch.equal(got["f16"], s.get_tensor("f16"))


def _mapped_file_of(address: int) -> str | None:
    """The file mapped at ``address`` in this process (``/proc/self/maps``), or None."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= address < high:
            return fields[5].strip() if len(fields) == 6 else None
    return None


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
def test_pt_get_tensor_on_the_cpu_lies_in_a_map_of_the_file(model: tuple[Path, Path]) -> None:
    """With ``"mmap"`` a pt tensor is not copied: it lies in a (private) map of the file
    itself, as safetensors' lies in its storage of the file, not in memory of its own."""
    torch = _torch()
    path = model[0]
    with reference.safe_open(path, "pt") as s, reference.safe_open(path, "np") as n:
        got = s.get_tensor("f16")
        assert torch.equal(got, torch.from_numpy(np.array(n.get_tensor("f16"))))
    assert _mapped_file_of(got.data_ptr()) == str(path.resolve())


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs Linux's /proc")
def test_tensors_kept_from_one_file_hold_one_descriptor_not_one_each(tmp_path: Path) -> None:
    """A state dict of many tensors kept from ``"mmap"`` needs one map of the file, not a map
    (and a descriptor: Python's mmap keeps one) per tensor, which ran out of descriptors at
    ``ulimit -n`` tensors."""
    import reference.numpy as rn

    path = tmp_path / "many.awq2"
    rn.save_file({f"t{i}": np.full(4, i, np.float32) for i in range(300)}, path)

    def descriptors() -> int:
        return sum(os.path.realpath(f"/proc/self/fd/{fd}") == str(path.resolve())
                   for fd in os.listdir("/proc/self/fd"))  # fmt: skip

    with reference.safe_open(path, "np") as s:
        opened = descriptors()
        got = s.get_tensors()
        assert descriptors() <= opened + 1
    assert all(got[f"t{i}"][0] == i for i in range(300))
    assert descriptors() <= 1
