"""PyTorch interface: :func:`load_file` and :func:`save_file` with the meaning of
``safetensors.torch``'s, and :func:`load_linear` for vLLM's Marlin kernels.

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
  refusals are :class:`TorchSaveError` (a ``ValueError``; the metadata one also a
  ``TypeError``) with a stable ``code``, the tensor's name and what was expected; safetensors
  raises a ``RuntimeError`` for overlapping tensors, this module a ``TorchSaveError``.
  ``metadata`` here is what :func:`reference.save` takes, a JSON object [META-1]: a
  ``dict[str, str]`` as safetensors takes it, and nested objects, lists, numbers, booleans
  and null too (:func:`~reference.format.metadata.encode_metadata` checks both).  A tensor on
  PyTorch's ``meta`` device has no data: it is refused by name (safetensors fails inside
  torch, ``NotImplementedError``).

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray

from reference.format.layers import PARTS
from reference.format.metadata import encode_metadata
from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.format.validate import check_slab
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


class TorchSaveError(ValueError):
    """A tensor or metadata that :func:`save_file` refuses: a stable ``code``, the tensor's
    ``name`` (None for the whole call), what was ``expected`` and what was ``found``."""

    def __init__(self, code: str, name: str | None, expected: Any, found: Any) -> None:
        self.code, self.name, self.expected, self.found = code, name, expected, found
        where = f" {name!r}" if name is not None else ""
        super().__init__(f"[{code}]{where}: expected {expected}, found {found}")


class TorchMetadataError(TorchSaveError, TypeError):
    """Metadata that :func:`reference.save` refuses too: not a JSON object, or one a reader
    would reject [META-5, LIM-5] (a ``TypeError``, as safetensors raises for bad metadata)."""


# ------------------------------------------------------------------------------------- loading


def load_file(
    filename: str | os.PathLike[str],
    device: Any = "cpu",
    *,
    backend: Literal["mmap", "pread"] = "mmap",
    validate: bool = False,
) -> dict[str, torch.Tensor]:
    """Every tensor of an AWQ-v2 file, on ``device``, like ``safetensors.torch.load_file``.

    Checked first, as safetensors checks its header: the opening checks [RD-1], every entry
    (bounds, checksum, name, dtype, shape and length, layout, place in the slab) [ENT-*,
    NAME-1, NAME-2, LAY-1..6, SLAB-2, SLAB-3], that no two payloads overlap and each starts
    at the next 64 KiB boundary [SLAB-4, SLAB-5] and that no name comes twice [NAME-3]:
    every tensor is there, under its own name, made of bytes of its own.
    ``validate=True`` runs full validation instead [RD-2]: also the index checksum and hash
    table, layers, padding and metadata, none of which a returned tensor is read from
    (``docs/reference/torch.md``; it reads the file's padding, 1.6% of the 1B benchmark's
    bytes).  Payload checksums are checked by neither: ``Reader.verify``.

    ``backend`` has safetensors' meaning, on the CPU: ``"mmap"`` (the default) returns
    tensors in one private, copy-on-write map of the file (read when first touched; writing
    to a tensor changes only the process's copy; a file truncated while mapped faults on
    touch, SIGBUS, as with safetensors); ``"pread"`` reads every byte now, into fresh
    tensors, with the reader's bulk read.  For another device both read into pinned host
    memory and copy it over."""
    if backend not in ("mmap", "pread"):
        raise ValueError(f"backend must be 'mmap' or 'pread', not {backend!r}")
    with Reader(filename) as reader:
        infos = reader.validated_entries() if validate else _checked_entries(reader)
        if backend == "mmap" and torch.device(device).type == "cpu":
            tensors = _mapped(reader, infos)
        else:
            tensors = read_entries(reader, infos, device)
        return dict(zip((i.name for i in infos), tensors, strict=True))


def _checked_entries(reader: Reader) -> list[TensorInfo]:
    """Every entry, each checked [ENT-*], then their payloads' placement [SLAB-4, SLAB-5] and
    their names' uniqueness [NAME-3]; a name found twice is reported by full validation, which
    raises the file's first failure."""
    infos = reader.entries()
    check_slab(reader.index)
    if len({info.name for info in infos}) != len(infos):
        reader.validate()  # raises; DUPLICATE_NAME at the latest
    return infos


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
    data: none on the ``meta`` device) to an AWQ-v2 file, in dict order, like
    ``safetensors.torch.save_file``; ``metadata`` is what :func:`reference.save` takes, a
    JSON object (safetensors' ``dict[str, str]`` is one), stored as the file's metadata
    object [META-1]."""
    _check_metadata(metadata)
    if not isinstance(tensors, dict):
        raise TorchSaveError("TORCH_NOT_A_DICT", None, "dict[str, torch.Tensor]", type(tensors))
    for name, tensor in tensors.items():
        _check_tensor(name, tensor)
    _check_no_overlap(tensors)
    with Writer(filename, metadata=metadata) as writer:
        for name, tensor in tensors.items():
            writer.add(name, raw_array(tensor), dtype=_DTYPE_OF_TORCH[tensor.dtype])


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
        found = "a tensor on the meta device: it has no data to save"
        raise TorchSaveError("TORCH_META_DEVICE", name, "a tensor with data", found)
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
            found = f"{owner!r} and {name!r} overlap"
            raise TorchSaveError("TORCH_SHARED_MEMORY", name, "tensors that share no bytes", found)
        if dev != device or end > reach:
            device, reach, owner = dev, end, name


__all__ = [
    "TORCH_DTYPES",
    "TorchLinear",
    "TorchMetadataError",
    "TorchSaveError",
    "bytes_of",
    "from_array",
    "load_file",
    "load_linear",
    "raw_array",
    "read_entries",
    "save_file",
]
