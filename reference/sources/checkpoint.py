"""Safetensors checkpoints, read strictly: what the AWQ v1 and compressed-tensors readers share.

A checkpoint is one ``.safetensors`` file, or a folder with ``model.safetensors`` or the
shards that ``model.safetensors.index.json`` lists, and its ``config.json``.  This module
reads those files and nothing else: each shard's JSON header (checked: well formed, every
payload inside the file, a length that is its shape's) [V1-3, CT-4], the shard index (plain
file names in the folder only) and the JSON configuration files with the metadata's strict
rules [META-5, META-6].  Opening reads no tensor data; :meth:`SafetensorsFiles.tensor` reads
one tensor through the ``safetensors`` package.

Every failure is a ``LegacyError`` whose code names the checkpoint family that was being
read: ``family="V1"`` raises ``V1_INCOMPLETE`` and its siblings, ``family="CT"`` raises
``CT_INCOMPLETE`` and so on (``spec.registry``).
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import numpy as np
from numpy.typing import NDArray
from safetensors import SafetensorError, safe_open

from reference.format.layers import dequantize_layer
from reference.format.metadata import lexical_depth, parse_metadata
from reference.format.rules import TensorInfo, element_count, extent_fits
from reference.ground.errors import FormatError, TensorNotFoundError, error
from reference.ground.files import open_regular
from reference.quant.dtypes import numpy_dtype
from reference.write.partial import NAME_MAX
from spec.constants import MAX_METADATA_DEPTH, MAX_METADATA_LENGTH
from spec.registry import DTYPE_BY_NAME

_ST_DTYPES = {
    "BOOL": "BOOL", "U8": "U8", "I8": "I8", "U16": "U16", "I16": "I16", "U32": "U32",
    "I32": "I32", "U64": "U64", "I64": "I64", "F16": "F16", "BF16": "BF16", "F32": "F32",
    "F64": "F64", "F8_E4M3": "F8_E4M3", "F8_E5M2": "F8_E5M2",
}  # fmt: skip
#: safetensors' own cap on its JSON header (``MAX_HEADER_SIZE`` in safetensors/src/tensor.rs).
MAX_ST_HEADER = 100_000_000
_ST_ITEMSIZE = {name: DTYPE_BY_NAME[name].itemsize for name in _ST_DTYPES}


@dataclass(frozen=True)
class StTensor:
    """One tensor of a safetensors header: where its payload lies and what it holds."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute offset of the payload in its file
    length: int


def legacy_error(family: str, kind: str, message: str, **kw: Any) -> FormatError:
    """``{family}_{kind}`` (``V1_INCOMPLETE``, ``CT_BAD_CONFIG`` ...) as a ``LegacyError``."""
    return error(f"{family}_{kind}", message, **kw)


def read_safetensors_header(
    path: Path, *, family: str = "V1"
) -> tuple[dict[str, StTensor], dict[str, str]]:
    """Parse one safetensors file's header and check that the file holds every payload
    [V1-3, CT-4]."""
    size = path.stat().st_size
    with open_regular(path) as f:
        head = _read(f, 8, path)
        if len(head) < 8:
            raise legacy_error(family, "INCOMPLETE", f"{path.name}: truncated safetensors file",
                               offset=0, expected=">= 8 bytes", found=len(head),
                               path=str(path))  # fmt: skip
        (length,) = struct.unpack("<Q", head)
        if length > MAX_ST_HEADER or 8 + length > size:
            raise legacy_error(family, "INCOMPLETE",
                               f"{path.name}: safetensors header length out of range",
                               offset=0, expected=f"<= {min(MAX_ST_HEADER, size - 8)}",
                               found=length, path=str(path))  # fmt: skip
        raw = _read(f, length, path)
    depth = lexical_depth(raw)  # measured before parsing: no recursion on hostile nesting
    if depth > MAX_METADATA_DEPTH:
        raise legacy_error(family, "INCOMPLETE",
                           f"{path.name}: safetensors header nested too deeply", offset=8,
                           expected=f"depth <= {MAX_METADATA_DEPTH}", found=depth,
                           path=str(path))  # fmt: skip
    try:
        header = json.loads(raw)
        if b"\\u" in raw:  # an escaped unpaired surrogate is no UTF-8 (nor, to safetensors, JSON)
            json.dumps(header, ensure_ascii=False).encode("utf-8")
    except (UnicodeDecodeError, ValueError) as exc:
        raise legacy_error(family, "INCOMPLETE", f"{path.name}: safetensors header is not JSON",
                           offset=8, expected="a JSON object", found=str(exc)[:80],
                           path=str(path)) from exc  # fmt: skip
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__") or {}, dict):
        raise legacy_error(family, "INCOMPLETE",
                           f"{path.name}: safetensors header is not a JSON object", offset=8,
                           expected="an object", found=type(header).__name__,
                           path=str(path))  # fmt: skip
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + length
    tensors = {
        name: _st_tensor(path, name, spec, base, size, family) for name, spec in header.items()
    }
    return tensors, metadata


def _read(f: BinaryIO, n: int, path: Path) -> bytes:
    """``f.read(n)``; a failed read raises an OSError that names the file (the one ``read``
    raises names none, and a checkpoint has several)."""
    try:
        return f.read(n)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc


def _st_tensor(path: Path, name: str, spec: Any, base: int, size: int, family: str) -> StTensor:
    """One safetensors header entry, checked: well formed, inside the file, a known dtype,
    a length that is its shape's [V1-3, CT-4]."""
    if not _well_formed(spec):
        raise legacy_error(family, "INCOMPLETE",
                           f"{path.name}: malformed header entry for {name!r}", offset=8,
                           expected="dtype, shape and data_offsets of one tensor",
                           found=str(spec)[:80], path=str(path))  # fmt: skip
    start, end = spec["data_offsets"]
    if base + end > size:
        raise legacy_error(family, "INCOMPLETE",
                           f"{path.name}: tensor {name!r} runs past the end of the file "
                           "(truncated download?)", offset=base + start,
                           expected=f"file of >= {base + end} bytes", found=size,
                           path=str(path))  # fmt: skip
    dtype = _ST_DTYPES.get(spec["dtype"])
    if dtype is None:
        raise legacy_error(family, "UNSUPPORTED", f"{path.name}: dtype {spec['dtype']} of {name!r}",
                           offset=8, expected=sorted(_ST_DTYPES), found=spec["dtype"])  # fmt: skip
    if end - start != _ST_ITEMSIZE[dtype] * element_count(tuple(spec["shape"])):
        raise legacy_error(family, "INCOMPLETE", f"{path.name}: {name!r} length is not its shape's",
                           offset=8, expected=f"shape {spec['shape']} of {dtype}",
                           found=f"{end - start} bytes", path=str(path))  # fmt: skip
    if not extent_fits(tuple(spec["shape"]), _ST_ITEMSIZE[dtype]):
        raise legacy_error(family, "INCOMPLETE",
                           f"{path.name}: {name!r} shape is not representable", offset=8,
                           expected="non-zero dimensions x itemsize < 2**63",
                           found=spec["shape"], path=str(path))  # fmt: skip
    return StTensor(name, path, dtype, tuple(spec["shape"]), base + start, end - start)


def _well_formed(spec: Any) -> bool:
    """A safetensors header entry: a str dtype, a list of sizes, two ordered offsets."""

    def sizes(value: Any) -> bool:
        return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)

    if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str):
        return False
    offsets = spec.get("data_offsets")
    if not sizes(spec.get("shape")) or not isinstance(offsets, list) or not sizes(offsets):
        return False
    return len(offsets) == 2 and offsets[0] <= offsets[1]


def read_json(
    path: Path, *, limit: int = MAX_METADATA_LENGTH, family: str = "V1"
) -> dict[str, Any]:
    """A checkpoint's JSON file, read with the metadata's strict rules [META-5, META-6]: at
    most ``limit`` bytes, depth measured before parsing, no duplicate keys, NaN, overlong or
    out-of-range numbers or unpaired surrogates, and an object at the top."""
    try:
        with open_regular(path) as f:  # read what is there, not a buffer of the limit's size
            raw = f.read(min(os.fstat(f.fileno()).st_size, limit) + 1)
    except OSError as exc:
        raise legacy_error(family, "BAD_CONFIG", f"{path.name} cannot be read", offset=0,
                           expected="a readable file", found=exc.strerror or str(exc),
                           path=str(path)) from exc  # fmt: skip
    if len(raw) > limit:
        raise legacy_error(family, "BAD_CONFIG", f"{path.name} is too large", offset=0,
                           expected=f"<= {limit} bytes", found=f"more than {limit} bytes",
                           path=str(path))  # fmt: skip
    try:
        return parse_metadata(raw, offset=0)
    except FormatError as exc:
        raise legacy_error(family, "BAD_CONFIG",
                           f"{path.name} is not a strict JSON object: {exc.message}",
                           offset=exc.offset, expected=exc.expected, found=exc.found,
                           path=str(path)) from exc  # fmt: skip


def plain_file_name(name: str) -> bool:
    """A file name with no folder part: no separator, not '.' or '..', no NUL, and short
    enough to be one (at most NAME_MAX bytes) [V1-3]."""
    return (
        name not in ("", ".", "..")
        and len(name.encode("utf-8", "surrogatepass")) <= NAME_MAX
        and "/" not in name
        and os.sep not in name
        and "\0" not in name
        and (os.altsep is None or os.altsep not in name)
    )


def weight_map(index: Path, *, family: str = "V1") -> dict[str, str]:
    """The shard index's tensor -> file map, refused before any shard is opened unless it is
    an object of names to plain file names in the checkpoint folder [V1-3, CT-4]."""
    mapping = read_json(index, limit=MAX_ST_HEADER, family=family).get("weight_map")
    if not isinstance(mapping, dict) or not all(isinstance(file, str) for file in mapping.values()):
        found = type(mapping).__name__ if not isinstance(mapping, dict) else "other values"
        message = "weight_map is not an object of tensor -> file name"
        raise legacy_error(family, "BAD_CONFIG", message, offset=0,
                           expected="an object of strings", found=found,
                           path=str(index))  # fmt: skip
    outside = sorted({file for file in mapping.values() if not plain_file_name(file)})
    if outside:
        message = "the shard index names files that are not plain names in the checkpoint folder"
        raise legacy_error(family, "BAD_CONFIG", message, offset=0,
                           expected="plain file names", found=outside[:5],
                           path=str(index))  # fmt: skip
    return mapping


def is_safetensors(path: Path) -> bool:
    """A file that starts like a safetensors file: u64 length, then ``{``."""
    with open_regular(path) as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"


class SafetensorsFiles:
    """The safetensors files of one checkpoint: their headers, read and cross-checked on
    opening, and each tensor read on demand.

    ``path`` is a ``.safetensors`` file or a folder with ``model.safetensors`` or a shard
    index; every shard the index names must be there and hold the tensors it is said to
    [V1-3, CT-4].
    """

    def __init__(self, path: Path, *, family: str = "V1") -> None:
        self.path = path
        self.family = family
        self._weight_map: dict[str, str] = {}
        self.files = self._shard_files()
        self.tensors: dict[str, StTensor] = {}
        self.metadata: dict[str, str] = {}
        for file in self.files:
            tensors, meta = read_safetensors_header(file, family=family)
            self.tensors.update(tensors)
            self.metadata.update(meta)
        self._check_weight_map()
        self._identity = {file: _identity(file) for file in self.files}  # what was opened
        self._handles: dict[Path, Any] = {}
        self._handles_lock = threading.Lock()  # the converter reads from several threads

    def _shard_files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            self._weight_map = weight_map(index, family=self.family)
            names = sorted(set(self._weight_map.values()))
            missing = [n for n in names if not (self.path / n).is_file()]
            if missing:
                raise legacy_error(self.family, "INCOMPLETE",
                                   "the shard index names files that are missing", offset=0,
                                   expected="every shard present", found=missing[:5],
                                   path=str(index))  # fmt: skip
            return [self.path / n for n in names]
        single = self.path / "model.safetensors"
        if single.is_file():
            return [single]
        found = sorted(p.name for p in self.path.glob("*.safetensors"))
        raise legacy_error(self.family, "INCOMPLETE",
                           "no model.safetensors or model.safetensors.index.json", offset=0,
                           expected="a checkpoint folder", found=found[:5] or "nothing",
                           path=str(self.path))  # fmt: skip

    def _check_weight_map(self) -> None:
        for name, file in self._weight_map.items():
            t = self.tensors.get(name)
            if t is None or t.file.name != file:
                raise legacy_error(self.family, "INCOMPLETE",
                                   f"tensor {name!r} is listed in the shard index but missing "
                                   f"from {file}", offset=0, expected=name, found="absent",
                                   path=str(self.path / file))  # fmt: skip

    def names(self) -> list[str]:
        """Tensor names in file order (shard by shard, then by offset)."""
        return [t.name for t in sorted(self.tensors.values(), key=lambda t: (t.file, t.offset))]

    def tensor(self, name: str) -> NDArray[Any]:
        """The stored payload (BF16 and FP8 as ``ml_dtypes`` arrays).  The file is checked by
        safetensors' own reader once; the bytes are then read with ``read``, never through a
        memory map: a file cut short meanwhile (a download or a sync still writing it) gives
        a short read, ``*_INCOMPLETE``, where a map would kill the process with SIGBUS."""
        t = self.tensors.get(name)
        if t is None:
            raise TensorNotFoundError(name)
        handle = self._handle(t.file)  # safetensors' own check of the file
        if _identity(t.file) != self._identity[t.file]:
            raise legacy_error(self.family, "INCOMPLETE",
                               f"{t.file.name} was replaced since the checkpoint was opened",
                               offset=t.offset, expected="the file whose header was read",
                               found="another file", path=str(t.file))  # fmt: skip
        if t.dtype not in DTYPE_BY_NAME:  # a dtype AWQ-v2 does not know: safetensors reads it
            return self._through_safetensors(handle, t)
        dtype = numpy_dtype(t.dtype)
        count = t.length // dtype.itemsize
        raw = np.fromfile(t.file, dtype=dtype, count=count, offset=t.offset)  # OSError: I/O
        if raw.size != count:  # the file was cut short since it was opened
            raise legacy_error(self.family, "INCOMPLETE",
                               f"{t.file.name}: tensor {name!r} runs past the end of the "
                               "file (truncated?)", offset=t.offset,
                               expected=f"{t.length} bytes",
                               found=f"{raw.size * dtype.itemsize} bytes",
                               path=str(t.file))  # fmt: skip
        return raw.reshape(t.shape)

    def _through_safetensors(self, handle: Any, t: StTensor) -> NDArray[Any]:
        try:
            return np.asarray(handle.get_tensor(t.name))
        except SafetensorError as exc:
            raise legacy_error(self.family, "INCOMPLETE",
                               f"{t.file.name}: safetensors refuses it: {exc}", offset=t.offset,
                               expected="a valid safetensors file", found=str(exc)[:120],
                               path=str(t.file)) from exc  # fmt: skip

    def _handle(self, file: Path) -> Any:
        """safetensors' own reader of one file, opened once; what it refuses (offsets with
        gaps or overlaps, a data section that does not end the file) is ``*_INCOMPLETE``."""
        with self._handles_lock:
            return self._handles.get(file) or self._open_handle(file)

    def _open_handle(self, file: Path) -> Any:
        """Open one file with safetensors' reader (under the lock of :meth:`_handle`)."""
        try:
            handle = safe_open(str(file), framework="numpy").__enter__()
        except SafetensorError as exc:
            raise legacy_error(self.family, "INCOMPLETE",
                               f"{file.name}: safetensors refuses it: {exc}", offset=8,
                               expected="a valid safetensors file", found=str(exc)[:120],
                               path=str(file)) from exc  # fmt: skip
        self._handles[file] = handle
        return handle

    def validate(self) -> None:
        """safetensors' own check of every shard (contiguous offsets, data to the end)."""
        for file in sorted({t.file for t in self.tensors.values()}):
            self._handle(file)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.__exit__(None, None, None)
        self._handles.clear()


def _identity(file: Path) -> tuple[int, int]:
    """Which file a path names now (device and inode): a shard renamed over is another."""
    try:
        st = file.stat()
    except OSError:
        return (-1, -1)
    return (st.st_dev, st.st_ino)


_Reader = TypeVar("_Reader", bound="CheckpointReader")


class CheckpointReader:
    """What the AWQ v1 and compressed-tensors readers share of the :class:`reference.Reader`
    API: the context manager, iteration, entries, :meth:`dequantize`, and validation and
    verification by their safetensors files (``self._st``).  A subclass sets ``path``,
    ``_st`` and ``config`` and presents its own names, entries, tensors and layers."""

    path: Path
    _st: SafetensorsFiles

    def names(self) -> list[str]:
        raise NotImplementedError

    def entry(self, name: str) -> TensorInfo:
        raise NotImplementedError

    def tensor(self, name: str) -> NDArray[Any]:
        raise NotImplementedError

    def linear(self, prefix: str) -> Any:
        raise NotImplementedError

    def __enter__(self: _Reader) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._st.close()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def entries(self) -> list[TensorInfo]:
        """Every entry, in the order of :meth:`names`."""
        return [self.entry(name) for name in self.names()]

    def view(self, info: TensorInfo) -> NDArray[Any]:
        """The array of an entry this reader returned (as :meth:`tensor` presents it)."""
        return self.tensor(info.name)

    def dequantize(self, prefix: str) -> NDArray[np.float32]:
        """``float32[k, n]``: ``(code - zero) * scale``, exact (no rounding)."""
        return dequantize_layer(self.linear(prefix))

    def validate(self) -> None:
        """Configs, shard index, headers and layer shapes are checked on open; this adds
        safetensors' own check of every shard (contiguous offsets, data to the end)."""
        self._st.validate()

    def verify(self) -> None:
        """A legacy checkpoint carries no checksums: every stored tensor is read once."""
        for name in self._st.names():
            self._st.tensor(name)
