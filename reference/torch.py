"""PyTorch interface: :func:`save`, :func:`load`, :func:`save_file`, :func:`load_file`,
:func:`save_model` and :func:`load_model` with the meaning of ``safetensors.torch``'s, and
:func:`load_linear` for vLLM's Marlin kernels.

Needs the optional extra ``torch`` (``pip install "awq-v2[torch]"``); nothing else in
``reference`` imports this module.

What "the same meaning" is, checked in safetensors 0.8.0's own ``safetensors/torch.py``:

* ``load_file(filename, device="cpu")`` returns ``dict[str, torch.Tensor]``, every tensor of
  the file, on ``device`` (a ``str``, an ``int`` or a ``torch.device``); a missing file raises
  ``FileNotFoundError``.  Its keyword-only ``backend``, ``"mmap"`` by default or ``"pread"``,
  has the same meaning here: on the CPU, ``"mmap"`` tensors are views of one private
  (copy-on-write) map of the file, read when touched (safetensors' Rust binding makes them
  with ``torch.UntypedStorage.from_file(..., shared=False)``), and ``"pread"`` reads every
  byte up front (:meth:`~reference.format.reader.Reader.read_many_into`).  Before returning
  anything it checks its header, no more (``Metadata::validate`` in
  ``safetensors/src/tensor.rs``): every tensor's offsets follow on from the one before, no
  gap and no overlap, and its byte length is its element count times its dtype's size.
  Here the default checks the same of the index (:func:`load_file`).
* ``save_file(tensors, filename, metadata=None)``: ``tensors`` must be a ``dict`` of dense
  (``torch.strided``) tensors; a tensor that is not contiguous is refused, and so are
  tensors whose bytes overlap (safetensors' ``_find_shared_tensors`` and
  ``_filter_shared_not_shared``: tensors of one storage that do not overlap are fine); a
  tensor on another device is moved to the CPU first (``_to_ndarray``); ``metadata`` is
  ``dict[str, str]`` (its Rust binding raises ``TypeError`` for anything else).  Here the
  refusals are :class:`TorchSaveError` (a :class:`reference.FormatError`, so a
  ``ValueError``; the metadata one also a ``TypeError``) with a stable ``code``, the tensor's
  name and what was expected.  Overlapping tensors and tensors on PyTorch's ``meta`` device
  (no data) are :class:`TorchRefusedError`, also a ``RuntimeError``, as safetensors raises for
  both (``torch.py:_evaluate_tensors_for_save``, with its hint to use ``save_model``; a
  ``meta`` tensor fails inside torch, ``NotImplementedError``, a ``RuntimeError``: "Cannot
  copy out of meta tensor").  ``metadata`` here is what :func:`reference.save` takes, a JSON
  object [META-1]: a ``dict[str, str]`` as safetensors takes it, and nested objects, lists,
  numbers, booleans and null too (:func:`~reference.format.metadata.encode_metadata` checks
  both); ``None`` stores none (``safe_open(...).metadata()`` is ``None``, as there).
  Tensors are stored in safetensors' order whatever the dict's
  (:func:`reference.numpy.safetensors_order`), so the same tensors give the same bytes.

* ``save(tensors, metadata=None) -> bytes`` and ``load(data) -> dict`` are ``save_file``
  and ``load_file`` through bytes (``torch.py:save`` and ``torch.py:load``): the same checks,
  and ``load`` returns CPU tensors of their own.  ``load_file`` here also takes a model
  folder and a file set, as :func:`reference.numpy.load_file` does (a rank set with
  ``rank=``; without it ``TP_RANK_REQUIRED`` [SET-13]).
* ``save_model`` / ``load_model`` handle tensors that share memory as ``torch.py:
  _remove_duplicate_names`` and ``_find_shared_tensors`` do (:func:`duplicate_names`,
  :func:`shared_groups`): one name of each shared group is saved, the others recorded in
  the metadata as ``{dropped: kept}``, and loading fills the model's aliases from it;
  ``tests/test_torch.py`` runs the cases of safetensors' ``tests/test_pt_model.py`` through
  both libraries.

The file's bytes are little-endian and torch tensors hold native-order bytes: this module
assumes a little-endian host (``safetensors.torch`` byteswaps on a big-endian one; this
module does not).

Reads go straight into the destination storage [DT-1: the stored bits, never converted]:
on the CPU with ``backend="pread"`` each tensor is ``torch.empty(shape, dtype)`` and the
reader's bulk read fills a NumPy view of its bytes, with no copy beyond the read.  For a
CUDA device the reads land in pinned host tensors, staged in batches of at most 256 MiB,
each copied with one ``.to(device, non_blocking=True)``; the stream is synchronised before
returning.  The CUDA path is not run by this project's tests (no GPU); a CPU test runs the
same staging code with pinning off.

:func:`load_linear` returns what vLLM's Marlin kernel takes, in the dtypes its code uses
(``vllm/model_executor/layers/quantization/kernels/mixed_precision/marlin.py`` and
``utils/marlin_utils.py``; ``csrc/quantization/gptq_marlin/gptq_marlin.cu``): ``qweight``
``int32`` (Marlin-packed words), ``scales`` ``float16`` or ``bfloat16`` (the kernel's
activation type, which its launcher asserts is half or nv_bfloat16), ``qzeros`` ``int32``
(``marlin_zero_points`` packs them with ``pack_cols`` to int32), and ``g_idx`` / ``perm``
empty ``int32`` tensors (AWQ has no activation order: vLLM's ``marlin_make_empty_g_idx``
is ``torch.empty(0, dtype=torch.int)``).  F32 scales [LAY-6] come back as ``float32``,
unconverted: Marlin takes none, the caller decides.  The bias is plain, as stored
[LAY-10] (vLLM's ``marlin_permute_bias`` runs at its own load time).
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray

from reference.format.layers import PARTS
from reference.format.metadata import encode_metadata
from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.ground.errors import FormatError, RefusedError
from reference.numpy import BACKENDS, read_all, safetensors_order, views_of
from reference.quant.dtypes import raw_bits
from reference.sources.legacy import Checkpoint
from reference.write.writer import Writer, dtype_name_of

#: Registry dtype -> torch dtype [ENT-4]; every registry dtype has one.
TORCH_DTYPES: dict[str, torch.dtype] = {
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
_DTYPE_OF_TORCH = {torch_dtype: name for name, torch_dtype in TORCH_DTYPES.items()}

#: The most bytes of pinned host memory one staging batch holds (a CUDA destination).
_STAGE_BYTES = 256 << 20


class TorchSaveError(FormatError):
    """A tensor or metadata that :func:`save_file` refuses: a stable ``code`` (this module's,
    not the file format's registry), the tensor's ``name`` (None for the whole call), what was
    ``expected`` and what was ``found``.  A :class:`reference.FormatError`, the class that
    stands for safetensors' ``SafetensorError`` here, and so a ``ValueError``."""

    def __init__(self, code: str, name: str | None, expected: Any, found: Any) -> None:
        self.name = name
        what = repr(name) if name is not None else "the tensors"
        super().__init__(code, what, expected=expected, found=found)


class TorchRefusedError(TorchSaveError, RefusedError):
    """Tensors that share memory, or one on the ``meta`` device: also a ``RuntimeError``, as
    safetensors raises for them (:class:`reference.ground.errors.RefusedError`)."""


class TorchMetadataError(TorchSaveError, TypeError):
    """Metadata that :func:`reference.save` refuses too: not a JSON object, or one a reader
    would reject [META-5, LIM-5] (a ``TypeError``, as safetensors raises for bad metadata)."""


# ------------------------------------------------------------------------------------- loading


def load_file(
    filename: str | os.PathLike[str],
    device: Any = "cpu",
    *,
    rank: int | None = None,
    backend: Literal["mmap", "pread"] = "mmap",
    validate: bool = False,
) -> dict[str, torch.Tensor]:
    """Every tensor of an AWQ-v2 file, model folder or split set (of a rank set, rank
    ``rank``'s shards: without it, ``TP_RANK_REQUIRED`` [SET-13]), on ``device``, like
    ``safetensors.torch.load_file``.

    Checked first, as safetensors checks its header (:func:`reference.numpy.read_all`): the
    opening checks [RD-1], every entry (bounds, checksum, name, dtype, shape and length,
    layout, place in the slab) [ENT-*, NAME-1, NAME-2, LAY-1..6, SLAB-2, SLAB-3], that no two
    payloads overlap and each starts at the next 64 KiB boundary [SLAB-4, SLAB-5] and that no
    name comes twice [NAME-3; in a set, SET-6]: every tensor is there, under its own name,
    made of bytes of its own.  ``validate=True`` runs full validation instead [RD-2; a
    set's, SET-8]: also the index checksum and hash table, layers, padding and metadata,
    none of which a returned tensor is read from (``docs/reference/torch.md``; it reads the
    file's padding, 1.6% of the 1B benchmark's bytes).  Payload checksums are checked by
    neither: ``Reader.verify``.

    ``backend`` has safetensors' meaning, on the CPU: ``"mmap"`` (the default) returns
    tensors in one private, copy-on-write map of each file (read when first touched; writing
    to a tensor changes only the process's copy; a file truncated while mapped faults on
    touch, SIGBUS, as with safetensors); ``"pread"`` reads every byte now, into fresh
    tensors, with the reader's bulk read.  For another device both read into pinned host
    memory and copy it over."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'mmap' or 'pread', not {backend!r}")
    if backend == "mmap" and torch.device(device).type == "cpu":
        return read_all(filename, _mapped, rank=rank, validate=validate)

    def read(reader: Reader, infos: list[TensorInfo]) -> list[torch.Tensor]:
        return read_entries(reader, infos, device)

    return read_all(filename, read, rank=rank, validate=validate)


def load(data: bytes) -> dict[str, torch.Tensor]:
    """Every tensor of the AWQ-v2 file whose bytes are ``data``, like
    ``safetensors.torch.load``: CPU tensors of their own (writable, sharing no memory with
    ``data``), after the checks :func:`load_file` runs
    (:func:`reference.numpy.views_of`)."""
    return {info.name: from_array(view) for info, view in views_of(data)}


def _mapped(reader: Reader, infos: list[TensorInfo]) -> list[torch.Tensor]:
    """Each tensor a view of one private map of the reader's own file (``ACCESS_COPY``:
    ``MAP_PRIVATE``, writable); payloads are 64 KiB-aligned [SLAB-2], so every view is
    aligned for its type."""
    private = mmap.mmap(reader.fileno(), 0, access=mmap.ACCESS_COPY)
    storage = torch.frombuffer(private, dtype=torch.uint8).untyped_storage()  # holds the map
    out = []
    for info in infos:
        dtype = TORCH_DTYPES[info.dtype]
        tensor = torch.empty(0 if info.length else info.shape, dtype=dtype)
        if info.length:  # the offset is a multiple of 64 KiB: whole elements of any dtype
            tensor.set_(storage, info.offset // dtype.itemsize, info.shape)
        out.append(tensor)
    return out


def read_entries(
    reader: Reader, infos: list[TensorInfo], device: Any = "cpu"
) -> list[torch.Tensor]:
    """The tensors of ``infos`` on ``device``, read by the reader's bulk read into their
    storage (CPU) or into pinned staging tensors (CUDA)."""
    target = torch.device(device)
    if target.type == "cpu":
        return _read_host(reader, infos, pin=False)
    return _read_staged(reader, infos, target, pin=target.type == "cuda")


def _read_host(reader: Reader, infos: list[TensorInfo], *, pin: bool) -> list[torch.Tensor]:
    """One ``read_many_into`` into fresh host tensors: each read lands in its tensor's bytes."""
    tensors = [torch.empty(info.shape, dtype=TORCH_DTYPES[info.dtype], pin_memory=pin)
               for info in infos]  # fmt: skip
    reader.read_many_into(zip(infos, (bytes_of(t) for t in tensors), strict=True))
    return tensors


def _read_staged(
    reader: Reader, infos: list[TensorInfo], device: torch.device, *, pin: bool
) -> list[torch.Tensor]:
    """Host batches of at most ``_STAGE_BYTES`` (pinned when ``pin``), each copied to
    ``device`` without blocking; one synchronisation at the end.  Not run on a GPU here."""
    out: list[torch.Tensor] = []
    for batch in _batches(infos, _STAGE_BYTES):
        out += [t.to(device, non_blocking=pin) for t in _read_host(reader, batch, pin=pin)]
    if pin:
        torch.cuda.current_stream(device).synchronize()
    return out


def _batches(infos: list[TensorInfo], limit: int) -> Iterable[list[TensorInfo]]:
    """``infos`` in order, cut into runs of at most ``limit`` bytes (a larger one alone)."""
    batch: list[TensorInfo] = []
    size = 0
    for info in infos:
        if batch and size + info.length > limit:
            yield batch
            batch, size = [], 0
        batch.append(info)
        size += info.length
    if batch:
        yield batch


def bytes_of(tensor: torch.Tensor) -> NDArray[np.uint8]:
    """A writable NumPy ``uint8`` view of a contiguous CPU tensor's bytes (zero-copy;
    ``torch.from_numpy`` and ``.numpy()`` do not know ``ml_dtypes``, bytes do)."""
    return tensor.reshape(-1).view(torch.uint8).numpy()


# ------------------------------------------------------------------------------- linear layers


@dataclass(frozen=True)
class TorchLinear:
    """One quantised layer (or tensor-parallel shard) as torch tensors on one device.

    ``layout`` ``"MARLIN"``: ``qweight``, ``scales``, ``qzeros``, ``g_idx`` and ``perm`` are
    what vLLM's ``gptq_marlin_gemm`` takes, no repack.  ``"AWQ"``: AutoAWQ v1 packing, for
    layers outside Marlin's shape rules [LAY-8].  ``k`` and ``n`` are the shard's.
    """

    prefix: str
    layout: str
    qweight: torch.Tensor
    scales: torch.Tensor
    qzeros: torch.Tensor
    g_idx: torch.Tensor
    perm: torch.Tensor
    bias: torch.Tensor | None
    k: int
    n: int
    bits: int
    group_size: int
    scale_dtype: str
    tp_rank: int = 0
    tp_size: int = 1


def load_linear(
    path_or_reader: str | os.PathLike[str] | Reader | Checkpoint,
    prefix: str,
    *,
    device: Any = "cpu",
    tp_rank: int = 0,
    tp_size: int = 1,
    parallel: Literal["column", "row"] | None = None,
) -> TorchLinear:
    """The layer ``prefix`` as torch tensors on ``device``; with ``tp_size > 1``, the shard
    of rank ``tp_rank`` (``parallel`` = ``"column"`` or ``"row"``), as ``Reader.linear``
    cuts it.  A whole layer of an AWQ-v2 file is read straight into its tensors; a shard is
    cut from the map and copied once into its tensors."""
    if isinstance(path_or_reader, (str, os.PathLike)):
        with Reader(path_or_reader) as reader:
            return load_linear(reader, prefix, device=device, tp_rank=tp_rank,
                               tp_size=tp_size, parallel=parallel)  # fmt: skip
    source = path_or_reader
    layer = source.linear(prefix, tp_rank=tp_rank, tp_size=tp_size, parallel=parallel)
    names = [f"{prefix}.{part}" for part in PARTS]
    if layer.bias is not None:
        names.append(f"{prefix}.bias")
    if isinstance(source, Reader) and tp_size == 1 and parallel is None:  # the stored layer
        tensors = read_entries(source, [source.entry(name) for name in names], device)
    else:
        arrays = [layer.qweight, layer.scales, layer.qzeros, layer.bias][: len(names)]
        tensors = [from_array(array, device) for array in arrays if array is not None]
    g_idx, perm = (torch.empty(0, dtype=torch.int32, device=device) for _ in range(2))
    bias = tensors[3] if layer.bias is not None else None
    return TorchLinear(layer.prefix, layer.layout, tensors[0], tensors[1], tensors[2], g_idx,
                       perm, bias, layer.k, layer.n, layer.bits, layer.group_size,
                       layer.scale_dtype, layer.tp_rank, layer.tp_size)  # fmt: skip


def as_tensor(array: NDArray[Any]) -> torch.Tensor:
    """A NumPy array (``ml_dtypes`` ones too) as a CPU tensor of the registry's torch dtype
    over the same memory, no copy (its bytes viewed, as :func:`bytes_of` views a tensor's):
    the tensor keeps the array, and the map under it, alive; a write into a writable array's
    tensor is a write into the array.  A non-contiguous array is copied once first."""
    dtype = TORCH_DTYPES[dtype_name_of(array)]
    flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return torch.from_numpy(flat).view(dtype).reshape(array.shape)


def from_array(array: NDArray[Any], device: Any = "cpu") -> torch.Tensor:
    """A NumPy array (``ml_dtypes`` ones too) as a new tensor of the registry's torch dtype,
    its bits copied once into the tensor's storage (pinned first for a CUDA device)."""
    target = torch.device(device)
    dtype = TORCH_DTYPES[dtype_name_of(array)]
    host = torch.empty(array.shape, dtype=dtype, pin_memory=target.type == "cuda")
    bits = raw_bits(array)
    np.copyto(bytes_of(host).view(bits.dtype).reshape(array.shape), bits)
    return host if target.type == "cpu" else host.to(target)


# -------------------------------------------------------------------------------------- saving


def save_file(
    tensors: Mapping[str, torch.Tensor],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write ``tensors`` (a dict of dense, contiguous, non-overlapping tensors that hold
    data: none on the ``meta`` device) to an AWQ-v2 file, in safetensors' order
    (:func:`reference.numpy.safetensors_order`), like ``safetensors.torch.save_file``;
    ``metadata`` is what :func:`reference.save` takes, a JSON object (safetensors'
    ``dict[str, str]`` is one), stored as the file's metadata object [META-1], or ``None``
    for none."""
    _check_metadata(metadata)
    if not isinstance(tensors, dict):
        raise TorchSaveError("TORCH_NOT_A_DICT", None, "dict[str, torch.Tensor]", type(tensors))
    for name, tensor in tensors.items():
        _check_tensor(name, tensor)
    _check_no_overlap(tensors)
    with Writer(filename, metadata=metadata) as writer:
        for name, tensor in safetensors_order(tensors.items(), _dtype_name):
            writer.add(name, raw_array(tensor), dtype=_DTYPE_OF_TORCH[tensor.dtype])


def _dtype_name(tensor: torch.Tensor) -> str:
    """The registry dtype of a checked tensor."""
    return _DTYPE_OF_TORCH[tensor.dtype]


def save(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of the AWQ-v2 file :func:`save_file` writes for ``tensors`` and
    ``metadata``, with its checks (``safetensors.torch.save``): written into a temporary
    folder, read back and removed."""
    with tempfile.TemporaryDirectory(prefix="awq2-save-") as folder:
        path = Path(folder) / "tensors.awq2"
        save_file(tensors, path, metadata)
        return path.read_bytes()


def raw_array(tensor: torch.Tensor) -> NDArray[Any]:
    """A checked tensor's stored bits as a NumPy unsigned-integer array of its shape:
    zero-copy for a CPU tensor, one copy to the CPU otherwise."""
    host = tensor.detach().to("cpu")
    return bytes_of(host).view(f"<u{host.element_size()}").reshape(tuple(host.shape))


def _check_metadata(metadata: Any) -> None:
    """Refuse what :func:`reference.save` refuses, by the same function, before a file is
    opened."""
    try:
        encode_metadata(metadata)
    except (TypeError, ValueError) as exc:
        expected = "a JSON object, as reference.save takes it"
        raise TorchMetadataError("TORCH_BAD_METADATA", None, expected, str(exc)) from exc


def _check_tensor(name: str, tensor: Any) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TorchSaveError("TORCH_NOT_A_TENSOR", name, "torch.Tensor", type(tensor))
    if tensor.device.type == "meta":
        found = ("a tensor on the meta device: it has no data to save (torch: Cannot copy out "
                 "of meta tensor; no data!)")  # fmt: skip
        raise TorchRefusedError("TORCH_META_DEVICE", name, "a tensor with data", found)
    if tensor.layout != torch.strided:
        raise TorchSaveError("TORCH_SPARSE", name, "a dense (strided) tensor", tensor.layout)
    if tensor.dtype not in _DTYPE_OF_TORCH:
        expected = "one of " + ", ".join(str(d) for d in TORCH_DTYPES.values())
        raise TorchSaveError("TORCH_UNSUPPORTED_DTYPE", name, expected, tensor.dtype)
    if not tensor.is_contiguous():
        found = f"strides {tensor.stride()} for shape {tuple(tensor.shape)}"
        raise TorchSaveError("TORCH_NOT_CONTIGUOUS", name, "a contiguous tensor", found)


def _check_no_overlap(tensors: Mapping[str, torch.Tensor]) -> None:
    """No two tensors share bytes (safetensors refuses them: the file would hold them twice)."""
    spans = sorted(
        (str(t.device), t.data_ptr(), t.data_ptr() + t.numel() * t.element_size(), name)
        for name, t in tensors.items()
        if t.numel() and t.data_ptr()
    )
    device, reach, owner = "", 0, ""
    for dev, start, end, name in spans:
        if dev == device and start < reach:
            found = (f"{owner!r} and {name!r} overlap; to save a model whose tensors share "
                     "memory, use save_model (it saves each shared group once)")  # fmt: skip
            expected = "tensors that share no bytes"
            raise TorchRefusedError("TORCH_SHARED_MEMORY", name, expected, found)
        if dev != device or end > reach:
            device, reach, owner = dev, end, name


# -------------------------------------------------------------------------------- whole models


def save_model(
    model: torch.nn.Module,
    filename: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None = None,
    force_contiguous: bool = True,
) -> None:
    """``model.state_dict()`` saved with :func:`save_file`, tensors that share memory saved
    once, as ``safetensors.torch.save_model`` does: of each group of tensors that share
    bytes (:func:`shared_groups`), one name is kept (:func:`duplicate_names`), and each
    dropped name is recorded in the metadata as ``{dropped: kept}`` unless the caller's
    metadata has that key already.  The caller's ``metadata`` is not changed (safetensors
    adds the keys to the caller's dict).  ``force_contiguous`` (default True, as in
    safetensors 0.8) saves ``.contiguous()`` copies; without it a non-contiguous tensor is
    refused (``TORCH_NOT_CONTIGUOUS``) with the hint safetensors gives."""
    state = model.state_dict()
    dropped = duplicate_names(state)
    if dropped:
        metadata = dict(metadata or {})
        for kept, names in dropped.items():
            for name in names:
                metadata.setdefault(name, kept)
                del state[name]
    if force_contiguous:
        state = {name: tensor.contiguous() for name, tensor in state.items()}
    try:
        save_file(state, filename, metadata)
    except TorchSaveError as exc:
        if exc.code != "TORCH_NOT_CONTIGUOUS":
            raise
        found = f"{exc.found}; or use save_model(..., force_contiguous=True)"
        raise TorchSaveError(exc.code, exc.name, exc.expected, found) from exc


def load_model(
    model: torch.nn.Module,
    filename: str | os.PathLike[str],
    strict: bool = True,
    device: Any = "cpu",
    *,
    rank: int | None = None,
    backend: Literal["mmap", "pread"] = "mmap",
) -> tuple[list[str], list[str]]:
    """Load what :func:`load_file` gives into ``model``, as ``safetensors.torch.load_model``
    does: a name the model shares with a tensor the file holds (:func:`duplicate_names`,
    preferring the file's names) is neither missing nor loaded twice; a file that holds both
    names of a shared pair has the second unexpected.  Returns ``(missing, unexpected)``
    (lists; safetensors' ``missing`` is a set); ``strict`` raises ``RuntimeError`` listing
    both, in the words of ``torch.nn.Module.load_state_dict``."""
    state = load_file(filename, device, rank=rank, backend=backend)
    dropped = duplicate_names(model.state_dict(), preferred_names=state.keys())
    missing_keys, unexpected_keys = model.load_state_dict(state, strict=False)
    aliases = {name for names in dropped.values() for name in names}
    missing = [name for name in missing_keys if name not in aliases]
    unexpected = list(unexpected_keys) + sorted(aliases - set(missing_keys))
    if strict and (missing or unexpected):
        message = f"Error(s) in loading state_dict for {type(model).__name__}:"
        if missing:
            message += "\n    Missing key(s) in state_dict: " + _quoted(missing)
        if unexpected:
            message += "\n    Unexpected key(s) in state_dict: " + _quoted(unexpected)
        raise RuntimeError(message)
    return missing, unexpected


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f'"{name}"' for name in sorted(names))


def shared_groups(state_dict: Mapping[str, torch.Tensor]) -> list[set[str]]:
    """The names of ``state_dict`` in groups of tensors that share bytes (a tensor that
    shares none is a group of one), as ``safetensors/torch.py:_find_shared_tensors`` finds
    them: tensors of one storage (device, storage address and size; none on the ``meta``
    device and none without storage bytes, which are in no group), cut into runs whose byte
    spans overlap (``_filter_shared_not_shared``).  A run here reaches to the furthest end
    seen so far; safetensors' reaches to the last span's end, so that a short view inside a
    longer tensor can end its run early.  The groups come in safetensors' order: storage by
    storage as each first appears in ``state_dict`` (its ``sorted`` of disjoint sets keeps
    them so), by address within one."""
    storages: dict[tuple[str, int, int], list[tuple[int, int, str]]] = {}
    for name, tensor in state_dict.items():
        if tensor.device.type == "meta":
            continue
        storage = tensor.untyped_storage()
        if storage.data_ptr() and storage.nbytes():
            key = (str(tensor.device), storage.data_ptr(), storage.nbytes())
            storages.setdefault(key, []).append((*_span(tensor), name))
    groups: list[set[str]] = []
    for spans in storages.values():
        run: set[str] = set()
        reach = -1
        for start, end, name in sorted(spans):
            if start >= reach:
                run = set()
                groups.append(run)
            run.add(name)
            reach = max(reach, end)
    return groups


def _span(tensor: torch.Tensor) -> tuple[int, int]:
    """The first byte of ``tensor`` and one past its last element's (``safetensors/torch.py:
    _end_ptr``): strided views reach further than their element count."""
    start = tensor.data_ptr()
    if not tensor.numel():
        return start, start
    reach = zip(tensor.shape, tensor.stride(), strict=True)
    last = sum((size - 1) * stride for size, stride in reach)
    return start, start + (last + 1) * tensor.element_size()


def _is_complete(tensor: torch.Tensor) -> bool:
    """``tensor`` is the whole of its storage (``safetensors/torch.py:_is_complete``)."""
    storage = tensor.untyped_storage()
    whole = tensor.numel() * tensor.element_size() == storage.nbytes()
    return tensor.data_ptr() == storage.data_ptr() and whole


def duplicate_names(
    state_dict: Mapping[str, torch.Tensor],
    *,
    preferred_names: Iterable[str] = (),
    discard_names: Iterable[str] = (),
) -> dict[str, list[str]]:
    """``{kept: [dropped, ...]}`` for each group of :func:`shared_groups` of two names or
    more, as ``safetensors/torch.py:_remove_duplicate_names`` chooses: the kept name covers
    its whole storage (``RuntimeError`` when none does: saving one of them would not save
    the others' bytes), the first in sorted order of those in ``preferred_names``, else of
    those not in ``discard_names``, else of all.  safetensors also refuses a tensor that
    shares nothing and covers part of its storage; here it is saved, its own bytes only."""
    preferred, discard = set(preferred_names), set(discard_names)
    out: dict[str, list[str]] = {}
    for group in shared_groups(state_dict):
        if len(group) < 2:
            continue
        complete = {name for name in group if _is_complete(state_dict[name])}
        if not complete:
            raise RuntimeError(f"tensors {sorted(group)} share memory and none of them covers "
                               "the whole of it: save their storage as one tensor, or "
                               ".clone() them apart")  # fmt: skip
        kept = min(complete & preferred or complete - discard or complete)
        out[kept] = sorted(group - {kept})
    return out


__all__ = [
    "TORCH_DTYPES",
    "TorchLinear",
    "TorchMetadataError",
    "TorchRefusedError",
    "TorchSaveError",
    "as_tensor",
    "bytes_of",
    "duplicate_names",
    "from_array",
    "load",
    "load_file",
    "load_linear",
    "load_model",
    "raw_array",
    "read_entries",
    "save",
    "save_file",
    "save_model",
    "shared_groups",
]
