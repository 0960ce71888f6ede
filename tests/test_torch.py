"""``reference.torch``: PyTorch's ``load_file`` / ``save_file`` / ``load_linear``.

Every tensor is compared bit for bit with the NumPy reader (``Reader.tensor``,
``Reader.linear``); ``load_file`` is compared with ``safetensors.torch.load_file`` of the same
tensors saved by each library.  The CUDA path (pinned staging) cannot run here: its staging
code runs on the CPU with pinning off, and nothing here claims to check a GPU.

torch is an optional extra, absent from the README's test environment: there this module is
skipped; CI runs it with the heavy virtual environment and ``AWQ2_REQUIRE_TORCH=1``, which
turns a missing torch into a failure instead of a skip (``.ci/run``, "real quantisers").
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

try:
    import torch
except ImportError:
    if os.environ.get("AWQ2_REQUIRE_TORCH") == "1":
        pytest.fail("AWQ2_REQUIRE_TORCH=1 and torch does not import", pytrace=False)
    pytest.skip("torch is not installed (the optional extra 'torch')", allow_module_level=True)

import safetensors.torch

import reference
import reference.torch as rt
from reference.convert import convert
from reference.examples import LlamaShape, write_checkpoint
from reference.format.reader import Reader
from reference.quant.dtypes import raw_bits

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "conformance" / "vectors"

#: The torch type each registry dtype should come back as, from the spec's data-type table
#: and PyTorch's names (written here, not read from the module under test).
EXPECTED_TORCH = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "U16": torch.uint16,
    "I16": torch.int16,
    "U32": torch.uint32,
    "I32": torch.int32,
    "U64": torch.uint64,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}

#: must-accept vectors between them holding every dtype, BF16 / F32 scales, a bias, empty
#: and 0-d tensors, unicode names and an empty file.
ACCEPT = [
    "y_all_dtypes",
    "y_marlin_4bit_bf16_scales",
    "y_marlin_4bit_f32_scales",
    "y_marlin_4bit_bias",
    "y_marlin_4bit_g128",
    "y_awq_layout_n_not_64",
    "y_empty_and_0d",
    "y_empty_file",
    "y_sample",
    "y_unicode_names",
]


def tensor_bytes(t: torch.Tensor) -> np.ndarray:
    """The stored bytes of a CPU tensor, row-major."""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy()


def array_bytes(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw_bits(np.asarray(a))).reshape(-1).view(np.uint8)


def assert_same(t: torch.Tensor, a: np.ndarray, dtype: str, what: str) -> None:
    assert t.dtype == EXPECTED_TORCH[dtype], (what, t.dtype, dtype)
    assert tuple(t.shape) == tuple(a.shape), (what, tuple(t.shape), a.shape)
    got, want = tensor_bytes(t), array_bytes(a)
    diff = np.flatnonzero(got != want)
    assert not diff.size, (
        f"{what}: first differing byte {diff[0]}: {got[diff[0]]} != {want[diff[0]]}"
    )


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example Llama checkpoint (with q/k/v biases) converted to AWQ-v2: F16 tensors,
    I32 words, Marlin layers with biases."""
    src = write_checkpoint(tmp_path_factory.mktemp("v1"), LlamaShape(attention_bias=True))
    dst = tmp_path_factory.mktemp("v2") / "tiny.awq2"
    convert(src, dst, verify=True)
    return dst


def files(converted: Path) -> list[Path]:
    return [VECTORS / f"{name}.awq2" for name in ACCEPT] + [converted]


# ------------------------------------------------------------------------------ load_file


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_load_file_equals_the_numpy_reader_bit_for_bit(converted: Path, backend: str) -> None:
    """Every dtype of the registry, the stored bits unchanged in the torch type [DT-1]."""
    seen = set()
    for path in files(converted):
        loaded = rt.load_file(path, backend=backend)
        with reference.open(path) as f:
            assert list(loaded) == f.names(), path.name
            for info in f.entries():
                assert_same(loaded[info.name], f.tensor(info.name), info.dtype, info.name)
                seen.add(info.dtype)
    assert seen == set(EXPECTED_TORCH), set(EXPECTED_TORCH) - seen


def test_cpu_reads_land_in_the_tensors_storage(converted: Path, monkeypatch) -> None:
    """One bulk read (``read_many_into``) whose buffers are the returned tensors' bytes."""
    calls = []
    real = Reader.read_many_into

    def spy(self, items):
        items = list(items)
        calls.append([out for _, out in items])
        return real(self, items)

    monkeypatch.setattr(Reader, "read_many_into", spy)
    loaded = rt.load_file(converted, backend="pread")
    assert len(calls) == 1
    assert len(calls[0]) == len(loaded)
    for buffer, tensor in zip(calls[0], loaded.values()):
        assert buffer.__array_interface__["data"][0] == tensor.data_ptr()
        assert buffer.nbytes == tensor.numel() * tensor.element_size()


def test_the_mmap_backend_maps_once_reads_nothing_and_writes_privately(converted, tmp_path):
    """backend="mmap" (safetensors' default): every tensor a view of one private map, no
    bulk read; a write to a tensor changes neither the file nor a second load."""
    copy = tmp_path / "copy.awq2"
    copy.write_bytes(converted.read_bytes())
    before = copy.read_bytes()
    loaded = rt.load_file(copy)
    storages = {t.untyped_storage().data_ptr() for t in loaded.values() if t.numel()}
    assert len(storages) == 1
    name = next(n for n, t in loaded.items() if t.numel() and t.dtype == torch.float16)
    loaded[name].fill_(1.0)
    assert copy.read_bytes() == before
    again = rt.load_file(copy)
    with reference.open(copy) as f:
        assert_same(again[name], f.tensor(name), "F16", name)


def test_load_file_refuses_an_unknown_backend(converted: Path) -> None:
    with pytest.raises(ValueError, match="backend"):
        rt.load_file(converted, backend="direct")


def test_the_staging_path_with_pinning_off_gives_the_same_tensors(converted, monkeypatch):
    """The CUDA path's code (batches, ``.to(device)``) on the CPU, pinning off; batches of
    at most 100 000 bytes so that the model takes several."""
    monkeypatch.setattr(rt, "_STAGE_BYTES", 100_000)
    calls = []
    real = Reader.read_many_into
    monkeypatch.setattr(
        Reader, "read_many_into", lambda self, items: calls.append(1) or real(self, items)
    )
    with Reader(converted) as f:
        infos = f.entries()
        staged = rt._read_staged(f, infos, torch.device("cpu"), pin=False)
        assert len(calls) > 3
        for info, t in zip(infos, staged):
            assert_same(t, f.tensor(info.name), info.dtype, info.name)


def test_load_file_equals_safetensors_load_file_saved_both_ways(tmp_path: Path) -> None:
    """The issue's done-when line: the same tensors saved by each library, loaded by each."""
    gen = torch.Generator().manual_seed(7)
    tensors = {
        "bf16": torch.randn(33, 65, generator=gen).to(torch.bfloat16),
        "f16": torch.randn(128, 7, generator=gen).to(torch.float16),
        "f32": torch.randn(5, 3, 2, generator=gen),
        "f64": torch.randn(4, generator=gen, dtype=torch.float64),
        "i32": torch.randint(-(2**31), 2**31 - 1, (70, 70), generator=gen, dtype=torch.int32),
        "i64": torch.randint(-(2**40), 2**40, (9,), generator=gen, dtype=torch.int64),
        "u8": torch.randint(0, 256, (300,), generator=gen, dtype=torch.uint8),
        "i8": torch.randint(-128, 128, (3, 3), generator=gen, dtype=torch.int8),
        "bool": torch.tensor([True, False, True]),
        "e4m3": torch.randn(16, 16, generator=gen).to(torch.float8_e4m3fn),
        "e5m2": torch.randn(16, 16, generator=gen).to(torch.float8_e5m2),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 4, dtype=torch.float16),
    }
    ours, theirs = tmp_path / "t.awq2", tmp_path / "t.safetensors"
    rt.save_file(tensors, ours, metadata={"format": "pt"})
    safetensors.torch.save_file(tensors, theirs, metadata={"format": "pt"})
    a, b = rt.load_file(ours), safetensors.torch.load_file(theirs)
    ap, bp = (
        rt.load_file(ours, backend="pread"),
        safetensors.torch.load_file(theirs, backend="pread"),
    )
    assert a.keys() == b.keys() == ap.keys() == bp.keys() == tensors.keys()
    for name in tensors:
        assert np.array_equal(tensor_bytes(ap[name]), tensor_bytes(bp[name])), name
        assert np.array_equal(tensor_bytes(ap[name]), tensor_bytes(a[name])), name
        assert a[name].dtype == b[name].dtype == tensors[name].dtype, name
        assert a[name].shape == b[name].shape == tensors[name].shape, name
        assert np.array_equal(tensor_bytes(a[name]), tensor_bytes(b[name])), name
        assert np.array_equal(tensor_bytes(a[name]), tensor_bytes(tensors[name])), name


def test_a_missing_file_raises_file_not_found_like_safetensors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        safetensors.torch.load_file(tmp_path / "absent.safetensors")
    with pytest.raises(FileNotFoundError):
        rt.load_file(tmp_path / "absent.awq2")


@pytest.mark.parametrize(
    ("vector", "code"),
    [
        ("n_bad_magic", "BAD_MAGIC"),  # the opening checks [RD-1]
        ("n_entry_checksum", "BAD_ENTRY_CHECKSUM"),  # an entry [ENT-9]
        ("n_overlapping_payloads", "OVERLAP"),  # two tensors on the same bytes [SLAB-4]
        ("n_gap_before_payload", "SLAB_GAP"),  # [SLAB-5]
        ("n_duplicate_name", "DUPLICATE_NAME"),  # one name, two tensors [NAME-3]
    ],
)
def test_a_bad_file_raises_its_error_code(vector: str, code: str) -> None:
    """What load_file checks by default, as safetensors checks its header: every tensor is
    there, under its own name, made of bytes of its own."""
    path = VECTORS / f"{vector}.awq2"
    assert path.exists(), path
    for backend in ("mmap", "pread"):
        with pytest.raises(reference.FormatError) as caught:
            rt.load_file(path, backend=backend)
        assert caught.value.code == code, backend


def test_validate_true_runs_full_validation() -> None:
    """Non-zero padding is nothing a tensor is read from: the default returns the tensors,
    ``validate=True`` refuses the file [RD-2, PAD-2]."""
    path = VECTORS / "n_hidden_payload_in_slab_gap.awq2"
    with reference.open(path) as f:
        want = {info.name: np.asarray(f.tensor(info.name)) for info in f.entries()}
    got = rt.load_file(path)
    assert set(got) == set(want)
    for name, tensor in got.items():
        assert rt.bytes_of(tensor).tobytes() == want[name].tobytes(), name
    with pytest.raises(reference.FormatError) as caught:
        rt.load_file(path, validate=True)
    assert caught.value.code == "NONZERO_PADDING"


def test_the_default_refuses_every_vector_full_validation_refuses_at_an_entry() -> None:
    """Every must-reject vector whose first failure is an entry's, the placement of the
    payloads or a repeated name is refused by the default too, with the same code; any the
    default accepts fails only checks no returned tensor depends on."""
    unchecked = {"BAD_INDEX_CHECKSUM", "BAD_BUCKET_TABLE", "LIMIT_BUCKET", "BAD_ENTRY_ORDER",
                 "BAD_QUANT_FIELDS", "NONZERO_PADDING", "BAD_ENTRY_FIELD", "LIMIT_METADATA",
                 "BAD_METADATA", "BAD_METADATA_CHECKSUM", "BAD_TENSOR_CHECKSUM"}  # fmt: skip
    refused = 0
    for path in sorted(VECTORS.glob("n_*.awq2")):
        full = None
        try:
            with reference.open(path, validate=True) as f:
                f.verify()  # payload checksums: checked by neither [ENT-10]
        except reference.FormatError as exc:
            full = exc.code
        try:
            rt.load_file(path)
        except reference.FormatError as exc:
            refused += 1
            if full not in unchecked:
                assert exc.code == full, path.name
        else:
            assert full in unchecked, (path.name, full)
    assert refused >= 80, refused  # 87 of the suite 2.0.0 files


# ------------------------------------------------------------------------------ load_linear


def layer_cases(converted: Path) -> list[tuple[Path, str]]:
    out = []
    for path in [VECTORS / f"{name}.awq2" for name in ACCEPT] + [converted]:
        with reference.open(path) as f:
            out += [(path, prefix) for prefix in f.layers()]
    return out


def assert_layer(got: rt.TorchLinear, want, what: str) -> None:
    assert (got.layout, got.k, got.n, got.bits, got.group_size, got.scale_dtype) == (
        want.layout, want.k, want.n, want.bits, want.group_size, want.scale_dtype
    ), what  # fmt: skip
    assert (got.tp_rank, got.tp_size) == (want.tp_rank, want.tp_size), what
    assert_same(got.qweight, want.qweight, "I32", f"{what}.qweight")
    assert_same(got.qzeros, want.qzeros, "I32", f"{what}.qzeros")
    assert_same(got.scales, want.scales, want.scale_dtype, f"{what}.scales")
    if want.bias is None:
        assert got.bias is None, what
    else:
        bias_dtype = {"float16": "F16", "float32": "F32", "bfloat16": "BF16"}[want.bias.dtype.name]
        assert_same(got.bias, want.bias, bias_dtype, f"{what}.bias")
    for empty in (got.g_idx, got.perm):  # AWQ has no act order: vLLM passes empty int32 ones
        assert empty.dtype == torch.int32 and empty.numel() == 0, what


def test_load_linear_equals_reader_linear_whole_and_sharded(converted: Path) -> None:
    cases = layer_cases(converted)
    assert len({path for path, _ in cases}) >= 6, cases
    compared = 0
    for path, prefix in cases:
        with Reader(path) as f:
            assert_layer(rt.load_linear(f, prefix), f.linear(prefix), prefix)
            for parallel in ("column", "row"):
                for rank in range(2):
                    kw = dict(tp_rank=rank, tp_size=2, parallel=parallel)
                    try:
                        want = f.linear(prefix, **kw)
                    except Exception as exc:  # a shape that cannot be cut in two
                        with pytest.raises(type(exc)):
                            rt.load_linear(f, prefix, **kw)
                        continue
                    assert_layer(rt.load_linear(f, prefix, **kw), want, f"{prefix} {kw}")
                    compared += 1
    assert compared >= 40, compared


def test_load_linear_dtypes_are_what_vllm_marlin_takes(converted: Path) -> None:
    layer = rt.load_linear(converted, "model.layers.0.self_attn.q_proj")
    assert layer.layout == "MARLIN"
    assert layer.qweight.dtype == layer.qzeros.dtype == torch.int32
    assert layer.scales.dtype == torch.float16
    bf16 = rt.load_linear(VECTORS / "y_marlin_4bit_bf16_scales.awq2", "layer.b4.g64")
    assert bf16.scales.dtype == torch.bfloat16


def test_load_linear_of_a_whole_layer_reads_into_its_tensors(converted, monkeypatch) -> None:
    calls = []
    real = Reader.read_many_into

    def spy(self, items):
        items = list(items)
        calls.append([out for _, out in items])
        return real(self, items)

    monkeypatch.setattr(Reader, "read_many_into", spy)
    layer = rt.load_linear(converted, "model.layers.1.self_attn.k_proj")
    assert len(calls) == 1
    tensors = [layer.qweight, layer.scales, layer.qzeros, layer.bias]
    assert [b.__array_interface__["data"][0] for b in calls[0]] == [
        t.data_ptr() for t in tensors if t is not None
    ]


def test_load_linear_takes_a_v1_checkpoint_too(tmp_path: Path) -> None:
    folder = write_checkpoint(tmp_path / "v1", LlamaShape(attention_bias=True))
    with reference.open(folder) as f:
        for prefix in f.layers()[:3]:
            assert_layer(rt.load_linear(f, prefix), f.linear(prefix), prefix)


# ------------------------------------------------------------------------------ save_file


def every_dtype() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    out = {}
    for name, dtype in EXPECTED_TORCH.items():
        if dtype.is_floating_point:
            out[name] = torch.randn(3, 5, generator=gen).to(dtype)
        elif dtype == torch.bool:
            out[name] = torch.tensor([[True, False], [False, True]])
        else:
            out[name] = torch.randint(0, 100, (2, 3), generator=gen).to(dtype)
    return out


def test_tensors_are_stored_in_safetensors_order_whatever_the_dicts(tmp_path: Path) -> None:
    """safetensors sorts by dtype (widest first), then by name: its file's offset order and
    this one's agree, and the bytes do not depend on the dict's order (issue 39)."""
    tensors = every_dtype()
    tensors |= {f"{name}.b": t.clone() for name, t in tensors.items()}  # two of each dtype
    names = list(tensors)
    outputs = set()
    for seed in range(3):
        order = [
            names[i]
            for i in torch.randperm(len(names), generator=torch.Generator().manual_seed(seed))
        ]
        shuffled = {name: tensors[name] for name in order}
        outputs.add(rt.save(shuffled))
        rt.save_file(shuffled, tmp_path / "x.awq2")
        safetensors.torch.save_file(shuffled, tmp_path / "x.safetensors")
        with (
            reference.safe_open(tmp_path / "x.awq2", "pt") as ours,
            safetensors.safe_open(tmp_path / "x.safetensors", "pt") as theirs,
        ):
            assert ours.offset_keys() == theirs.offset_keys()
            assert ours.keys() == theirs.keys() == sorted(names)
    assert len(outputs) == 1


def test_save_file_round_trips_through_reference_open(tmp_path: Path) -> None:
    tensors = every_dtype()
    path = tmp_path / "all.awq2"
    rt.save_file(tensors, path, metadata={"format": "pt", "note": "ünïcode"})
    with reference.open(path, validate=True) as f:
        f.verify()
        assert f.metadata == {"format": "pt", "note": "ünïcode"}
        assert sorted(f.names()) == sorted(tensors)  # in safetensors' order: the test below
        for name, t in tensors.items():
            assert f.entry(name).dtype == name
            assert_same(t, f.tensor(name), name, name)


def test_save_file_takes_the_bits_without_a_copy() -> None:
    t = torch.randn(4, 8).to(torch.bfloat16)
    raw = rt.raw_array(t)
    assert raw.dtype == np.uint16 and raw.shape == (4, 8)
    assert raw.__array_interface__["data"][0] == t.data_ptr()


def test_save_file_accepts_views_of_one_storage_that_do_not_overlap(tmp_path: Path) -> None:
    base = torch.arange(10, dtype=torch.int32)
    tensors = {"a": base[:5], "b": base[5:]}
    safetensors.torch.save_file(tensors, tmp_path / "x.safetensors")  # accepted there too
    rt.save_file(tensors, tmp_path / "x.awq2")
    assert torch.equal(rt.load_file(tmp_path / "x.awq2")["b"], base[5:])


@pytest.mark.parametrize(
    ("tensors", "metadata", "code", "name"),
    [
        ({"t": torch.zeros(3, 4).t()}, None, "TORCH_NOT_CONTIGUOUS", "t"),
        ({"s": torch.zeros(3, 3).to_sparse()}, None, "TORCH_SPARSE", "s"),
        ({"n": np.zeros(3)}, None, "TORCH_NOT_A_TENSOR", "n"),
        ([("a", torch.zeros(1))], None, "TORCH_NOT_A_DICT", None),
        ({"a": torch.zeros(1)}, {"k": {1, 2}}, "TORCH_BAD_METADATA", None),
        ({"a": torch.zeros(1)}, {"k": float("nan")}, "TORCH_BAD_METADATA", None),
        ({"a": torch.zeros(1)}, "k=v", "TORCH_BAD_METADATA", None),
    ],
    ids=["transposed", "sparse", "numpy", "list", "set-value", "nan-value", "str"],
)
def test_save_file_refuses_what_safetensors_refuses_with_a_code(
    tmp_path: Path, tensors, metadata, code: str, name: str | None
) -> None:
    path = tmp_path / "x.awq2"
    with pytest.raises(rt.TorchSaveError) as caught:
        rt.save_file(tensors, path, metadata=metadata)
    assert (caught.value.code, caught.value.name) == (code, name)
    assert code in str(caught.value) and "expected" in str(caught.value)
    if code == "TORCH_BAD_METADATA":  # safetensors raises TypeError there
        assert isinstance(caught.value, TypeError)
    assert not path.exists()
    with pytest.raises((ValueError, TypeError, RuntimeError, AttributeError)):
        safetensors.torch.save_file(tensors, tmp_path / "x.safetensors", metadata=metadata)


@pytest.mark.parametrize(
    "tensor",
    [torch.zeros(2, dtype=torch.complex64), torch.zeros(2).to(torch.float8_e4m3fnuz)],
    ids=["complex64", "float8_e4m3fnuz"],
)
def test_save_file_refuses_a_dtype_the_format_lacks(tmp_path: Path, tensor) -> None:
    """safetensors stores these two (C64, F8_E4M3FNUZ); the registry has neither [ENT-4]."""
    with pytest.raises(rt.TorchSaveError) as caught:
        rt.save_file({"w": tensor}, tmp_path / "x.awq2")
    assert (caught.value.code, caught.value.name) == ("TORCH_UNSUPPORTED_DTYPE", "w")
    assert str(tensor.dtype) in str(caught.value) and "torch.bfloat16" in str(caught.value)
    assert not (tmp_path / "x.awq2").exists()


def _nested(depth: int) -> list:
    """A list nested ``depth`` deep: past the metadata depth limit (64) [LIM-5] at 70."""
    out: list = []
    for _ in range(depth - 1):
        out = [out]
    return out


#: Metadata both writers take (a JSON object [META-1]): safetensors' str -> str, nested
#: values, and what json writes as a JSON object (a tuple is an array, an int key a string).
METADATA_ACCEPTED = {
    "none": None,
    "empty": {},
    "str-str": {"format": "pt", "note": "ünïcode"},
    "nested": {
        "format": "pt",
        "config": {"hidden_size": 256, "rope": {"theta": 1e4, "scaling": None}},
        "layers": [0, 1.5, -2, True, False, "x", [], {}],
    },
    "tuple-and-int-key": {"shape": (2, 3), "ids": {7: "seven", 8: "eight"}},
}

#: Metadata both refuse: not a JSON object, or one a reader would reject [META-5, LIM-5].
METADATA_REFUSED = {
    "a-list": [("format", "pt")],
    "a-str": "format=pt",
    "a-set-value": {"k": {1, 2}},
    "an-object-value": {"k": object()},
    "nan": {"k": float("nan")},
    "infinity": {"k": {"deep": [float("inf")]}},
    "a-tuple-key": {("a", "b"): "v"},
    "too-deep": {"k": _nested(70)},
}


@pytest.mark.parametrize("metadata", METADATA_ACCEPTED.values(), ids=METADATA_ACCEPTED)
def test_save_file_takes_the_metadata_reference_save_takes(tmp_path: Path, metadata) -> None:
    """The same tensors and metadata through reference.save (NumPy) and save_file (torch):
    byte-identical files, the metadata as a reader reads it back."""
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float16)}
    by_numpy = reference.save(tmp_path / "numpy.awq2", arrays, metadata)
    by_torch = tmp_path / "torch.awq2"
    rt.save_file({k: torch.from_numpy(a) for k, a in arrays.items()}, by_torch, metadata)
    assert by_torch.read_bytes() == by_numpy.read_bytes()
    with reference.open(by_torch, validate=True) as f:  # no metadata reads as {} [META-1]
        assert f.metadata == json.loads(json.dumps(metadata or {}))


@pytest.mark.parametrize("metadata", METADATA_REFUSED.values(), ids=METADATA_REFUSED)
def test_save_file_refuses_the_metadata_reference_save_refuses(tmp_path: Path, metadata) -> None:
    arrays = {"w": np.zeros(3, np.float32)}
    with pytest.raises((TypeError, ValueError)) as by_numpy:
        reference.save(tmp_path / "numpy.awq2", arrays, metadata)
    with pytest.raises(rt.TorchMetadataError) as by_torch:
        rt.save_file({"w": torch.zeros(3)}, tmp_path / "torch.awq2", metadata)
    assert by_torch.value.code == "TORCH_BAD_METADATA" and by_torch.value.name is None
    assert str(by_numpy.value) in str(by_torch.value)  # the same check said it
    assert isinstance(by_torch.value, TypeError) and isinstance(by_torch.value, ValueError)
    assert not (tmp_path / "torch.awq2").exists()


def test_save_file_refuses_a_meta_tensor_by_name(tmp_path: Path) -> None:
    """A ``meta`` tensor has a shape and a dtype but no bytes: refused before anything is
    written, naming the tensor and the device (safetensors fails inside torch)."""
    tensors = {"ok": torch.ones(2), "w": torch.empty(4, 8, device="meta")}
    with pytest.raises(NotImplementedError):
        safetensors.torch.save_file(tensors, tmp_path / "x.safetensors")
    with pytest.raises(rt.TorchSaveError) as caught:
        rt.save_file(tensors, tmp_path / "x.awq2")
    assert isinstance(caught.value, ValueError)
    assert (caught.value.code, caught.value.name) == ("TORCH_META_DEVICE", "w")
    assert "'w'" in str(caught.value)
    assert "on the meta device: it has no data to save" in str(caught.value)
    assert not (tmp_path / "x.awq2").exists()


def test_save_file_refuses_overlapping_tensors(tmp_path: Path) -> None:
    base = torch.zeros(10)
    with pytest.raises(RuntimeError):
        safetensors.torch.save_file({"a": base, "b": base[2:6]}, tmp_path / "x.safetensors")
    with pytest.raises(rt.TorchSaveError) as caught:
        rt.save_file({"a": base, "b": base[2:6]}, tmp_path / "x.awq2")
    assert caught.value.code == "TORCH_SHARED_MEMORY" and caught.value.name == "b"


# ------------------------------------------------------------------------------ the public API


def test_star_import_gives_the_public_api_each_documented() -> None:
    """``__all__`` is every public name the module defines (nothing it imports), no more, and
    ``from reference.torch import *`` gives exactly those; each function and class has a
    docstring of its own, the constant a ``#:`` comment."""
    source = (ROOT / "reference" / "torch.py").read_text(encoding="utf-8")
    defined = set()
    for node in ast.parse(source).body:  # what the module itself defines at its top level
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
        elif isinstance(node, ast.Assign):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    public = {name for name in defined if not name.startswith("_")}
    assert sorted(rt.__all__) == sorted(public)
    namespace: dict = {}
    exec("from reference.torch import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(rt.__all__)
    for name in rt.__all__:
        value = getattr(rt, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), f"{name} has no docstring"
            assert value.__doc__ != type(value).__doc__, f"{name}: only its type's docstring"
        else:
            assert re.search(rf"^#: .+\n{name}\b", source, re.MULTILINE), f"{name} undocumented"


# ------------------------------------------------------------------------------ the docs


def test_the_docs_dtype_table_is_the_module_mapping() -> None:
    """docs/reference/torch.md lists each registry dtype with its torch dtype."""
    text = (ROOT / "docs" / "reference" / "torch.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| `torch\.(\w+)` \|", text, re.MULTILINE))
    assert rows == {k: str(v).removeprefix("torch.") for k, v in rt.TORCH_DTYPES.items()}
    assert rt.TORCH_DTYPES == EXPECTED_TORCH


def test_the_docs_examples_run(tmp_path: Path, monkeypatch) -> None:
    text = (ROOT / "docs" / "reference" / "torch.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 2
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"docs/reference/torch.md, python block {number}", "exec"), namespace)


# ------------------------------------------------------- save / load beside safetensors.torch

#: The dtypes both formats know: every registry dtype is in safetensors.torch's _TYPES.
BOTH_KNOW = sorted(set(EXPECTED_TORCH) & set(safetensors.torch._TYPES))

_base = torch.arange(12, dtype=torch.int32).reshape(3, 4)

#: Cases both libraries store and give back unchanged (safetensors' tests: empty tensors,
#: zero-size dimensions, bool, 0-d, tensors of one storage that do not overlap).
SAME_PT = {
    "example": {"a": torch.zeros((2, 2)), "b": torch.zeros((2, 3), dtype=torch.uint8)},
    "empty": {"e": torch.zeros(0)},
    "zero-size-dims": {"e": torch.zeros(2, 0, 3, dtype=torch.float16)},
    "two-empties": {"a": torch.zeros(0), "b": torch.zeros(0)},
    "0-d": {"s": torch.tensor(1.5)},
    "bool": {"b": torch.tensor([[True, False], [False, True]])},
    "disjoint-views": {"a": _base[0], "b": _base[1]},
    "an-empty-view-inside": {"a": _base, "e": _base[1:1]},
    "nothing": {},
    "every-dtype-both-know": {name: every_dtype()[name] for name in BOTH_KNOW},
}


def assert_same_tensors(got: dict, want: dict, what: str) -> None:
    assert list(got) == list(want) or set(got) == set(want), (what, list(got), list(want))
    for name, t in want.items():
        assert (got[name].dtype, got[name].shape) == (t.dtype, t.shape), (what, name)
        assert np.array_equal(tensor_bytes(got[name]), tensor_bytes(t)), (what, name)


@pytest.mark.parametrize("case", SAME_PT, ids=list(SAME_PT))
def test_save_and_load_round_trip_what_safetensors_does(tmp_path: Path, case: str) -> None:
    tensors = SAME_PT[case]
    ours, theirs = (
        rt.load(rt.save(tensors)),
        safetensors.torch.load(safetensors.torch.save(tensors)),
    )
    rt.save_file(tensors, tmp_path / "t.awq2")
    safetensors.torch.save_file(tensors, tmp_path / "t.safetensors")
    files = (
        rt.load_file(tmp_path / "t.awq2"),
        safetensors.torch.load_file(tmp_path / "t.safetensors"),
    )
    for what, got in (("ours", ours), ("theirs", theirs), ("ours_file", files[0]),
                      ("theirs_file", files[1])):  # fmt: skip
        assert_same_tensors(got, tensors, f"{case}: {what}")
    assert rt.save(tensors) == (tmp_path / "t.awq2").read_bytes()


def test_every_registry_dtype_is_one_safetensors_torch_knows() -> None:
    assert BOTH_KNOW == sorted(EXPECTED_TORCH)
    assert torch.float8_e4m3fnuz in safetensors.torch._TYPES.values()  # refused here


def test_load_gives_tensors_of_their_own_in_both() -> None:
    """Writable CPU tensors that share no memory with ``data``, in both."""
    tensors = {"w": torch.arange(6, dtype=torch.int16)}
    for save, load in ((rt.save, rt.load), (safetensors.torch.save, safetensors.torch.load)):
        data = save(tensors)
        loaded = load(data)
        loaded["w"][0] = 99
        assert loaded["w"][0] == 99
        assert torch.equal(load(data)["w"], tensors["w"]), save.__module__


@pytest.mark.parametrize(
    ("tensors", "code", "theirs"),
    [
        ({"t": torch.zeros(3, 4).t()}, "TORCH_NOT_CONTIGUOUS", ValueError),
        ({"a": _base, "b": _base}, "TORCH_SHARED_MEMORY", RuntimeError),
        ({"a": _base, "b": _base[1:]}, "TORCH_SHARED_MEMORY", RuntimeError),
        ({"s": torch.zeros(3, 3).to_sparse()}, "TORCH_SPARSE", ValueError),
        ([("a", torch.zeros(1))], "TORCH_NOT_A_DICT", ValueError),
    ],
    ids=["non-contiguous", "shared", "overlapping", "sparse", "not-a-dict"],
)
def test_save_refuses_what_safetensors_save_refuses(tensors, code: str, theirs) -> None:
    """The same refusals from save as from save_file, of safetensors' classes: shared
    tensors a RuntimeError there and here (``TorchRefusedError``), each a TorchSaveError and
    a ``reference.FormatError``, as code written for ``SafetensorError`` catches it."""
    with pytest.raises(theirs):
        safetensors.torch.save(tensors)
    with pytest.raises(theirs) as caught:
        rt.save(tensors)
    assert isinstance(caught.value, rt.TorchSaveError)
    assert isinstance(caught.value, reference.FormatError)
    assert caught.value.code == code


def test_shared_and_meta_tensors_are_runtime_errors_with_a_hint(tmp_path: Path) -> None:
    """safetensors raises RuntimeError for both (NotImplementedError from torch for ``meta``),
    with "use save_model" for shared tensors; here a ``RefusedError``, also the project's
    ``FormatError``, with a code and the same hint."""
    base = torch.zeros(10)
    cases = (
        ({"a": base, "b": base[2:6]}, "TORCH_SHARED_MEMORY", "save_model"),
        ({"w": torch.empty(2, 3, device="meta")}, "TORCH_META_DEVICE", "Cannot copy out of meta"),
    )
    for tensors, code, hint in cases:
        with pytest.raises(RuntimeError) as theirs:
            safetensors.torch.save_file(tensors, tmp_path / "x.safetensors")
        with pytest.raises(RuntimeError) as caught:
            rt.save_file(tensors, tmp_path / "x.awq2")
        assert isinstance(caught.value, reference.RefusedError | rt.TorchRefusedError)
        assert isinstance(caught.value, reference.FormatError) and caught.value.code == code
        assert hint in str(caught.value) and hint in str(theirs.value)
        assert not (tmp_path / "x.awq2").exists()


def test_metadata_types_beside_safetensors(tmp_path: Path) -> None:
    """str -> str in both, read back alike; nested and non-str values here only (safetensors:
    TypeError); what neither takes, refused by both."""
    tensors = {"w": torch.zeros(2)}
    for meta in ({"format": "pt"}, {}):
        rt.save_file(tensors, tmp_path / "m.awq2", meta)
        safetensors.torch.save_file(tensors, tmp_path / "m.safetensors", meta)
        with (
            reference.open(tmp_path / "m.awq2") as f,
            safetensors.safe_open(tmp_path / "m.safetensors", "pt") as g,
        ):
            assert f.metadata == (g.metadata() or {}) == meta
    for meta in ({"n": 1}, {"config": {"a": [1, 2]}}, {"x": None}):
        with pytest.raises(TypeError):
            safetensors.torch.save(tensors, meta)
        (tmp_path / "b.awq2").write_bytes(rt.save(tensors, meta))
        with reference.open(tmp_path / "b.awq2") as f:
            assert f.metadata == meta
    for meta in ([("a", "b")], "a=b", {"k": float("nan")}):
        with pytest.raises(TypeError):
            safetensors.torch.save(tensors, meta)
        with pytest.raises(rt.TorchMetadataError):
            rt.save(tensors, meta)


# ------------------------------------------------------------- load_file: folders and sets


def test_load_file_takes_a_model_folder_and_sets(tmp_path: Path) -> None:
    from reference.format.layers import StoredTensor
    from reference.sets.setwriter import RankSetWriter, save_set

    tensors = {f"t{i}": torch.full((64, 64), float(i), dtype=torch.bfloat16) for i in range(5)}
    (tmp_path / "model").mkdir()
    rt.save_file(tensors, tmp_path / "model" / "model.awq2")
    assert_same_tensors(rt.load_file(tmp_path / "model"), tensors, "folder")
    bf16 = {n: rt.raw_array(t).view(ml_dtypes.bfloat16) for n, t in tensors.items()}
    members = save_set(tmp_path / "split", bf16, max_size=3 * 65536)
    assert len(members) > 1
    for backend in ("mmap", "pread"):
        assert_same_tensors(rt.load_file(tmp_path / "split", backend=backend), tensors, backend)
    (tmp_path / "ranks").mkdir()
    writer = RankSetWriter(tmp_path / "ranks", tp_size=2)
    writer.add_ranks([[StoredTensor("w", np.full((2, 4), r, np.float32))] for r in range(2)])
    writer.close()
    with pytest.raises(reference.FormatError) as caught:
        rt.load_file(tmp_path / "ranks")
    assert caught.value.code == "TP_RANK_REQUIRED"
    for rank in range(2):
        for backend in ("mmap", "pread"):
            got = rt.load_file(tmp_path / "ranks", rank=rank, backend=backend)
            assert torch.equal(got["w"], torch.full((2, 4), float(rank))), (rank, backend)


# ------------------------------------------------ save_model / load_model beside safetensors
# The models and cases of safetensors' bindings/python/tests/test_pt_model.py, run through
# both libraries.


class OnesModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.a.weight = torch.nn.Parameter(torch.ones((4, 4)))
        self.a.bias = torch.nn.Parameter(torch.ones((4,)))
        self.b = self.a


class SharedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(10, 10)
        self.b = self.a


class NonContiguousModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(10, 10)
        self.a.weight = torch.nn.Parameter(torch.zeros((10, 10)).transpose(0, 1))


class CopyModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(10, 10)
        self.b = copy.deepcopy(self.a)


class NoSharedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(10, 10)
        self.b = torch.nn.Linear(10, 10)


LIBRARIES = {
    "ours": (rt.save_model, rt.load_model, rt.save_file, ".awq2"),
    "theirs": (
        safetensors.torch.save_model,
        safetensors.torch.load_model,
        safetensors.torch.save_file,
        ".safetensors",
    ),
}


def metadata_at(path: Path) -> dict:
    if path.suffix == ".awq2":
        with reference.open(path) as f:
            return f.metadata
    with safetensors.safe_open(path, "pt") as f:
        return f.metadata() or {}


def assert_same_state(a: torch.nn.Module, b: torch.nn.Module) -> None:
    want = a.state_dict()
    for name, tensor in b.state_dict().items():
        assert torch.equal(tensor, want[name]), name


@pytest.mark.parametrize("lib", LIBRARIES)
@pytest.mark.parametrize("model_class", [OnesModel, SharedModel, CopyModel, NoSharedModel])
def test_save_model_and_load_model_as_safetensors_does(tmp_path: Path, lib: str, model_class):
    """Shared parameters saved once, the dropped name recorded as ``{dropped: kept}``;
    loading restores every name; the same metadata and tensor names in both libraries."""
    save_model, load_model, _, suffix = LIBRARIES[lib]
    model = model_class()
    user = {"user": "kept"}
    path = tmp_path / f"m{suffix}"
    save_model(model, path, metadata=dict(user))
    meta = metadata_at(path)
    shared = model_class in (OnesModel, SharedModel)
    want = {"b.bias": "a.bias", "b.weight": "a.weight"} if shared else {}
    assert meta == {**user, **want}, lib
    saved = set(rt.load_file(path) if suffix == ".awq2" else safetensors.torch.load_file(path))
    assert saved == set(model.state_dict()) - set(want), lib
    other = model_class()
    assert load_model(other, path) in ((set(), []), ([], [])), lib
    assert_same_state(model, other)


def test_save_model_leaves_the_callers_metadata_alone(tmp_path: Path) -> None:
    """safetensors adds ``{dropped: kept}`` to the caller's dict; this module does not, and
    neither overrides a key the caller set."""
    ours, theirs = {"b.weight": "mine"}, {"b.weight": "mine"}
    rt.save_model(SharedModel(), tmp_path / "m.awq2", metadata=ours)
    safetensors.torch.save_model(SharedModel(), tmp_path / "m.safetensors", metadata=theirs)
    assert ours == {"b.weight": "mine"}
    assert theirs == {"b.weight": "mine", "b.bias": "a.bias"}
    assert metadata_at(tmp_path / "m.awq2") == metadata_at(tmp_path / "m.safetensors") == theirs


@pytest.mark.parametrize("lib", LIBRARIES)
def test_a_non_contiguous_parameter_needs_force_contiguous(tmp_path: Path, lib: str) -> None:
    save_model, load_model, _, suffix = LIBRARIES[lib]
    model = NonContiguousModel()
    with pytest.raises(ValueError) as caught:
        save_model(model, tmp_path / f"c{suffix}", force_contiguous=False)
    assert "use save_model(..., force_contiguous=True)" in str(caught.value)
    save_model(model, tmp_path / f"c{suffix}")  # force_contiguous=True, the default of both
    other = NonContiguousModel()
    load_model(other, tmp_path / f"c{suffix}")
    assert_same_state(model, other)


@pytest.mark.parametrize("lib", LIBRARIES)
def test_load_model_reports_missing_and_unexpected_names_alike(tmp_path: Path, lib: str):
    """test_pt_model.py's test_difference_with_torch and test_difference_torch_odd: a file
    of a shared model lacks the dropped names an unshared model needs; a file of an unshared
    model has names the shared one holds once."""
    save_model, load_model, save_file, suffix = LIBRARIES[lib]
    save_model(SharedModel(), tmp_path / f"s{suffix}")
    with pytest.raises(
        RuntimeError, match=re.escape('Missing key(s) in state_dict: "b.bias", "b.weight"')
    ):
        load_model(NoSharedModel(), tmp_path / f"s{suffix}")
    missing, unexpected = load_model(NoSharedModel(), tmp_path / f"s{suffix}", strict=False)
    assert (sorted(missing), list(unexpected)) == (["b.bias", "b.weight"], [])
    save_model(NoSharedModel(), tmp_path / f"n{suffix}")
    with pytest.raises(
        RuntimeError, match=re.escape('Unexpected key(s) in state_dict: "b.bias", "b.weight"')
    ):
        load_model(SharedModel(), tmp_path / f"n{suffix}")
    # test_workaround_works_with_different_on_file_names: the file keeps the other name
    model = SharedModel()
    state = model.state_dict()
    state.pop("a.weight"), state.pop("a.bias")
    save_file(state, tmp_path / f"b{suffix}")
    other = SharedModel()
    load_model(other, tmp_path / f"b{suffix}")
    assert_same_state(model, other)


def test_load_model_returns_lists_where_safetensors_returns_a_set(tmp_path: Path) -> None:
    rt.save_model(SharedModel(), tmp_path / "s.awq2")
    missing, unexpected = rt.load_model(NoSharedModel(), tmp_path / "s.awq2", strict=False)
    assert missing == ["b.weight", "b.bias"] and unexpected == []


def test_shared_groups_are_safetensors_find_shared_tensors() -> None:
    """test_pt_model.py's cases for _find_shared_tensors and _remove_duplicate_names."""
    find, remove = safetensors.torch._find_shared_tensors, safetensors.torch._remove_duplicate_names
    a = torch.zeros((4,))
    m = torch.zeros((3, 3))
    cases = [
        {"A": m, "B": m[:1, :]},
        {"A": m},
        {"B": m[:1, :]},
        {"B": a[:2], "C": a[2:]},
        {"B": a[:2], "C": a[1:]},
        {"B": a[:2], "C": a[2:], "D": a[:1]},
        {"C": torch.zeros((2, 2), device="meta"), "D": torch.zeros((2, 2), device="meta")[:1]},
        SharedModel().state_dict(),
        CopyModel().state_dict(),
    ]
    for case in cases:
        assert sorted(map(sorted, rt.shared_groups(case))) == sorted(map(sorted, find(case)))
    for case in (
        {"A": m, "B": m[:1, :]},
        {"A": m, "B": m[:1, :], "C": m},
        SharedModel().state_dict(),
    ):
        assert rt.duplicate_names(case) == remove(case)
    with pytest.raises(RuntimeError):  # overlapping, and none covers the storage: both refuse
        remove({"B": a[:2], "C": a[1:]})
    with pytest.raises(RuntimeError):
        rt.duplicate_names({"B": a[:2], "C": a[1:]})
    with pytest.raises(RuntimeError):  # a lone part of a storage: refused there, kept here
        remove({"B": m[:1, :]})
    assert rt.duplicate_names({"B": m[:1, :]}) == {}
