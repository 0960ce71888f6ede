"""``reference.safe_open``: safetensors' lazy reading interface over AWQ-v2 files and sets.

>>> with reference.safe_open("model.awq2", framework="np") as f:  # doctest: +SKIP
...     for name in f.keys():
...         first_rows = f.get_slice(name)[:2]

What it mirrors, checked in safetensors 0.8.0's Python binding (``bindings/python/src/lib.rs``
of huggingface/safetensors at 24b0b2857fef, the line numbers below are that file's):

* ``safe_open(path, framework, device="cpu", *, backend="mmap")`` is a context manager with
  ``keys()``, ``offset_keys()``, ``get_tensor(name)``, ``get_tensors()``, ``get_slice(name)``
  and ``metadata()``; once the block is left every call raises :class:`RefusedError`
  (code ``SAFE_OPEN_CLOSED``; safetensors: ``SafetensorError("File is closed")``,
  lib.rs:1277).  ``framework`` is ``"np"``/``"numpy"`` or ``"pt"``/``"torch"``/``"pytorch"``
  (safetensors also takes ``tf``, ``flax``, ``mlx``, ``paddle``: not here); a device other
  than the CPU is refused at open for NumPy, as there (lib.rs:613).
* ``backend`` (lib.rs:332-364): ``"mmap"`` serves tensors from a map of the file,
  ``"pread"`` by positioned reads of the open file; anything else is refused at open
  (``ValueError``).  Here ``"mmap"`` gives ``get_tensor`` as a view of one private,
  copy-on-write map of the file (``ACCESS_COPY``, ``MAP_PRIVATE``), made on first use and
  shared by every tensor taken from it: writable, read when touched, a write changing only
  this process's copy, seen by every view of those bytes (safetensors' torch storage is the
  same: one ``UntypedStorage.from_file(..., shared=False)`` per file, lib.rs:704-741, each
  tensor a slice of it; its NumPy path copies the bytes into a new array, lib.rs:825-837);
  ``"pread"`` reads the tensor into a new array.  ``get_slice`` reads by ``preadv`` with
  either.
* ``keys()`` is sorted (lib.rs:775-779); ``offset_keys()`` is in the order of the payloads
  (lib.rs:786-788; here slab order, then member by member); ``get_tensors()`` is
  ``{name: get_tensor(name)}`` in that order (lib.rs:1139-1158).
* ``metadata()`` is ``None`` when the writer was given none (safetensors: no
  ``__metadata__`` key, lib.rs:766-768): here ``metadata_length`` 0 [META-1], which
  ``reference.save`` and the ``save_file`` functions write for ``metadata=None``, and which is
  apart from an empty object (``{}``, two bytes, read back as ``{}``, as safetensors reads an
  empty ``__metadata__``).  Of a set, its first member's [SET-10].
* ``get_slice(name)`` returns an object with ``get_shape()`` (a list of ints),
  ``get_dtype()`` (the registry name, ``"F16"``, ``"BF16"``..., safetensors' own spellings)
  and ``__getitem__``.  With ``"pt"`` it takes what a torch tensor's ``[]`` takes: safetensors
  reshapes the mapped bytes and calls torch's ``__getitem__`` with the key (lib.rs:1563-1628),
  so lists, empty lists, arrays, int and bool tensors, ``None`` and booleans all work there,
  and here (ints, slices and ``...`` read only the rows they cover; any other key reads the
  whole tensor, then indexes it with torch).  With ``"np"``: an int (negative counts from the
  end) or a slice per dimension, and a whole key ``[]`` (an empty list: no rows), as
  safetensors' own parser takes (lib.rs:1436-1456); here also any step (negative too) and one
  ``...``.  Other lists, arrays, booleans and ``None`` are refused (``TypeError``;
  safetensors: "Non empty lists are not implemented"), an int out of range is an
  ``IndexError`` (safetensors: ``SafetensorError``), and a slice past the end is cut at the
  end, as NumPy cuts it (safetensors refuses it).

What differs, on purpose:

* ``path`` is anything :func:`reference.open` opens as AWQ-v2: a file, a model folder, a
  split set or, with ``rank=r``, rank ``r`` of a rank set (refused without it:
  ``TP_RANK_REQUIRED`` [SET-13]); an AWQ v1 or compressed-tensors checkpoint is refused.
* ``metadata()`` is the file's metadata object [META-1] as :attr:`Reader.metadata` gives it,
  any JSON object (nested values, numbers...); safetensors gives ``dict[str, str]``.
* A quantised layer's entries come as stored, in the Marlin layout (``Reader.linear`` and
  ``Reader.dequantize`` interpret them).
* ``get_slice`` never reads through the map.  The leading integer indices and the first
  slice fix one contiguous run of the payload: the rows ``[a, b)`` that slice covers (of the
  dimensions after the integers), read by one positioned read (``preadv``, across short
  reads) into a new array, exactly ``(b - a)`` times the row's bytes; the remaining indices
  (columns, steps) are applied in memory.  A file found shorter raises ``TRUNCATED``.

A file truncated after it was opened (another process, a download started again) is refused
with ``TRUNCATED`` by every call (``keys``, ``metadata``, ``get_tensor``, ``get_slice``),
never by a SIGBUS: each call first compares the size of the open file (one ``fstat`` of its
descriptor) with its size at open, before any page of the map is touched (the index, which
``keys`` and every lookup read, lies in the map too).  Of a set, each member a call reads is
checked so (``FileSet.lease``).  Indexing a slice taken before the cut needs no check: it
reads by ``preadv``, which finds the new end itself and raises ``TRUNCATED`` for rows past
it, never faults, and returns rows still there.  What is left is a race: a file cut between
the check and the touch of a page (the index, or a ``get_tensor`` map with ``"mmap"``, which
faults whenever it is read after the cut) still kills the process.  ``backend="pread"``
closes it for ``get_tensor``; ``reference.open(path, copy=True)`` reads the file once into
memory.

Threads may share one ``safe_open``, of a set too: a member being read is never closed to
make room for another (``FileSet.lease``).

``"pt"`` results on the CPU are tensors over the NumPy result's memory, no copy
(:func:`reference.torch.as_tensor`): with ``"mmap"``, ``get_tensor`` is a tensor over the
private, copy-on-write map of its pages, as safetensors' is a view of its copy-on-write
storage; on another device they are new tensors (:func:`reference.torch.from_array`, which
copies the bits once, into pinned memory for a CUDA device, then ``.to(device)``).  That
module, and torch with it, is imported by the first ``safe_open(..., "pt")``, so that
``import reference`` never pays for torch.
"""

from __future__ import annotations

import importlib
import math
import mmap
import operator
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.ground.errors import RefusedError, TensorNotFoundError, error, field_error
from reference.opener import open as open_any
from reference.quant.dtypes import numpy_dtype
from reference.sets.fileset import FileSet

#: safetensors' framework names that this module serves, and what each is here.
FRAMEWORKS = {"np": "np", "numpy": "np", "pt": "pt", "torch": "pt", "pytorch": "pt"}

#: safetensors' storage backends (``Backend``, lib.rs:332-364): a map, or positioned reads.
BACKENDS = ("mmap", "pread")

#: One index of one dimension after :func:`expand_index`: a position or a slice.
Index = int | slice


class safe_open:  # safetensors' name, so that code written for it reads the same
    """An open AWQ-v2 file, model folder or set; use it in a ``with`` block (or ``close()``).

    ``backend`` is ``"mmap"`` or ``"pread"``, as there; ``rank=R`` opens rank ``R`` of a rank
    set (needed there, refused elsewhere but 0); ``validate=True`` runs full validation first
    (:meth:`Reader.validate`).  The framework, the device and the backend are checked before
    the file is opened, as safetensors checks them."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        framework: str,
        device: Any = "cpu",
        *,
        backend: str = "mmap",
        rank: int | None = None,
        validate: bool = False,
    ) -> None:
        kind = FRAMEWORKS.get(framework) if isinstance(framework, str) else None
        if kind is None:
            raise ValueError(f"framework {framework!r}: one of {', '.join(FRAMEWORKS)}")
        if kind == "np" and str(device) != "cpu":
            raise ValueError(f"device {device!r} with framework {framework!r}: NumPy arrays "
                             "live on the CPU; use framework='pt' for another device")  # fmt: skip
        if backend not in BACKENDS:
            raise ValueError(f"backend {backend!r}: one of {', '.join(BACKENDS)}")
        self._torch_index = kind == "pt"
        self._read = self._mapped_view if backend == "mmap" else _read_new
        #: One private map per file a tensor was taken from (a set: by member), shared by
        #: every tensor handed out of it, as safetensors' torch storage is one per file.
        self._maps: dict[Path, mmap.mmap] = {}
        self._convert: Callable[[NDArray[Any]], Any] = _identity
        if kind == "pt":
            self._convert = _to_torch(device)
        opened = open_any(path, validate=validate, rank=rank)
        if not isinstance(opened, Reader | FileSet):
            opened.close()
            raise ValueError(f"{os.fspath(path)!r} is an AWQ v1 or compressed-tensors "
                             "checkpoint: safe_open reads AWQ-v2 (convert it, or read it "
                             "with reference.open)")  # fmt: skip
        if isinstance(opened, FileSet) and opened.kind == "rank" and opened.only_rank is None:
            opened.close()
            last = opened.tp_size - 1
            raise error("TP_RANK_REQUIRED", f"a rank set for tensor parallelism "
                        f"{opened.tp_size}: open it with safe_open(PATH, framework, "
                        f"rank=R) for R in 0..{last}; each rank holds its shard, not the "
                        "whole tensor", expected=f"a rank from 0 to {last}", found="no rank",
                        path=str(opened.manifest_path))  # fmt: skip
        self._opened: Reader | FileSet | None = opened

    def _open(self) -> Reader | FileSet:
        if self._opened is None:
            raise RefusedError("SAFE_OPEN_CLOSED", "the file is closed (use safe_open in a "
                               "with block, and its results inside it)")  # fmt: skip
        return self._opened

    def _checked(self) -> Reader | FileSet:
        """The open file, refused with ``TRUNCATED`` if it is shorter now than at open (a
        set checks each member as a call reads it)."""
        opened = self._open()
        if isinstance(opened, Reader):
            opened.check_length()
        return opened

    def keys(self) -> list[str]:
        """Every tensor name, sorted (safetensors' order, lib.rs:775-779)."""
        return sorted(self._checked().names())

    def offset_keys(self) -> list[str]:
        """Every tensor name in the order of the payloads: slab order (of a set, member by
        member)."""
        return self._checked().names()

    def metadata(self) -> dict[str, Any] | None:
        """The metadata JSON object; ``None`` when the file stores none (``metadata_length``
        0 [META-1]; of a set, its first member [SET-10])."""
        opened = self._checked()
        metadata = opened.metadata
        if metadata or not _stores_none(opened):
            return metadata
        return None

    def get_tensor(self, name: str) -> Any:
        """The whole tensor: a writable view of the file's private, copy-on-write map
        (``backend="mmap"``) or a new array (``"pread"``), as a NumPy array or, with
        ``"pt"``, a CPU tensor over the same memory (a new tensor on another device)."""
        opened = self._checked()
        if isinstance(opened, Reader):
            return self._convert(self._read(opened, opened.entry(name)))
        index = opened.find(name)
        if index is None:
            raise TensorNotFoundError(name)
        with opened.lease(index) as reader:
            return self._convert(self._read(reader, reader.entry(name)))

    def get_tensors(self) -> dict[str, Any]:
        """``{name: get_tensor(name)}`` for every name, in :meth:`offset_keys` order."""
        return {name: self.get_tensor(name) for name in self.offset_keys()}

    def get_slice(self, name: str) -> SafeSlice:
        """A tensor to index (``[rows, columns]``), reading only the rows the index covers."""
        opened = self._checked()
        if isinstance(opened, Reader):
            return SafeSlice(opened.entry(name), self._holder, self._convert, self._torch_index)
        index = opened.find(name)
        if index is None:
            raise TensorNotFoundError(name)
        with opened.lease(index) as reader:
            info = reader.entry(name)
        return SafeSlice(info, lambda: self._holder(index), self._convert, self._torch_index)

    def _holder(self, index: int = 0) -> AbstractContextManager[Reader]:
        """The reader of the file, or of member ``index`` of a set, held open while in use:
        the set may close a member meanwhile, to open others, and opens it again (with its
        opening checks); it never closes one under a reader.  Nothing is checked: a slice
        reads by ``preadv``, which finds a new end of file itself."""
        opened = self._open()
        if isinstance(opened, Reader):
            return nullcontext(opened)
        return opened.lease(index, check_length=False)

    def _mapped_view(self, reader: Reader, info: TensorInfo) -> NDArray[Any]:
        """The payload of ``info`` as a writable array over the private map of the reader's
        file (``ACCESS_COPY``: ``MAP_PRIVATE``), made on first use: nothing is read before
        it is touched, and a write changes this process's copy, seen by every tensor taken
        from this ``safe_open``, never the file.  One map per file, however many tensors
        are kept: one descriptor and one mapping, not one per tensor."""
        dtype = numpy_dtype(info.dtype)
        if not info.length:  # no bytes to map
            return np.empty(info.shape, dtype)
        private = self._maps.get(reader.path)
        if private is None:
            made = mmap.mmap(reader.fileno(), 0, access=mmap.ACCESS_COPY)
            private = self._maps.setdefault(reader.path, made)  # another thread's, if first
        array = np.frombuffer(private, dtype, info.length // dtype.itemsize, info.offset)
        return array.reshape(info.shape)

    def close(self) -> None:
        """Close the file; views and tensors handed out stay valid (each holds its map)."""
        if self._opened is not None:
            self._opened.close()
            self._opened = None
            self._maps = {}

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SafeSlice:
    """One tensor of a :class:`safe_open`, read piece by piece: ``get_shape()``,
    ``get_dtype()`` and ``[index]``."""

    def __init__(
        self,
        info: TensorInfo,
        holder: Callable[[], AbstractContextManager[Reader]],
        convert: Callable[[NDArray[Any]], Any],
        torch_index: bool = False,
    ) -> None:
        """``holder()`` holds the reader of the file that stores ``info`` open for a read;
        ``torch_index``: an index that is not ints, slices and ``...`` goes to the converted
        whole tensor's ``[]`` (``"pt"``), instead of being refused."""
        self.info = info
        self._holder, self._convert, self._torch_index = holder, convert, torch_index

    def get_shape(self) -> list[int]:
        """The whole tensor's shape."""
        return list(self.info.shape)

    def get_dtype(self) -> str:
        """The registry dtype name (``"F16"``, ``"BF16"``, ``"I32"``...)."""
        return self.info.dtype

    def __getitem__(self, key: Any) -> Any:
        info = self.info
        if isinstance(key, list) and not key:  # no rows, as safetensors (lib.rs:1444-1447)
            key = slice(0, 0)
        if self._torch_index and not is_basic(key):  # torch's own [] (lib.rs:1619-1623)
            return self._convert(self._rows(expand_index((), info.shape)))[key]
        return self._convert(self._rows(expand_index(key, info.shape)))

    def _rows(self, index: list[Index]) -> NDArray[Any]:
        """The elements ``index`` selects (one int or slice per dimension): the rows it
        covers, read by one positioned read, then indexed in memory."""
        info = self.info
        start, block_shape, local = covered_run(index, info.shape)
        block = np.empty(block_shape, numpy_dtype(info.dtype))
        if block.nbytes:
            offset = info.offset + start * block.itemsize
            with self._holder() as reader:
                pread_exact(reader.fileno(), block.reshape(-1).view(np.uint8).data, offset)
        return np.ascontiguousarray(block[local]) if local else block


def is_basic(key: Any) -> bool:
    """``key`` is ints, slices and ``...`` only (what :func:`expand_index` takes)."""
    items = key if isinstance(key, tuple) else (key,)
    return all(
        item is Ellipsis
        or isinstance(item, slice)
        or (isinstance(item, int | np.integer) and not isinstance(item, bool | np.bool_))
        for item in items
    )


def expand_index(key: Any, shape: tuple[int, ...]) -> list[Index]:
    """``key`` as one int or slice per dimension: ``...`` expanded, the dimensions not named
    taken whole, each int made non-negative and checked against its dimension."""
    items = key if isinstance(key, tuple) else (key,)
    given = sum(item is not Ellipsis for item in items)
    if len(items) - given > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if given > len(shape):
        raise IndexError(f"{given} indices for a tensor of {len(shape)} dimension(s)")
    out: list[Index] = []
    for item in items:
        if item is Ellipsis:
            out.extend([slice(None)] * (len(shape) - given))
        elif isinstance(item, slice):
            out.append(item)
        else:
            out.append(_position(item, shape[len(out)], len(out)))
    return out + [slice(None)] * (len(shape) - len(out))


def _position(item: Any, size: int, dim: int) -> int:
    """An int index, checked and made non-negative."""
    if isinstance(item, bool | np.bool_) or item is None:
        raise TypeError(f"index {item!r}: ints, slices and '...' only")
    try:
        i = operator.index(item)
    except TypeError:
        raise TypeError(f"index {item!r}: ints, slices and '...' only") from None
    if not -size <= i < size:
        raise IndexError(f"index {i} is out of bounds for dimension {dim} of size {size}")
    return i % size


def covered_run(
    index: list[Index], shape: tuple[int, ...]
) -> tuple[int, tuple[int, ...], tuple[Index, ...]]:
    """The one contiguous run of elements an index needs: where it starts (in elements from
    the payload's start), the shape to read it as, and the index that then applies to it.

    The leading ints fix a sub-tensor; the first slice after them covers the rows ``[a, b)``
    of it, from its first selected row to its last (whatever the step's sign), and those
    rows, whole, are the run.  Every index after that slice applies in memory."""
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    start, d = 0, 0
    while d < len(shape):
        position = index[d]
        if not isinstance(position, int):
            break
        start += position * strides[d]
        d += 1
    if d == len(shape):  # one element (or a 0-d tensor)
        return start, (), ()
    first = index[d]
    assert isinstance(first, slice)
    rows = range(*first.indices(shape[d]))
    low = min(rows[0], rows[-1]) if rows else 0
    count = abs(rows[-1] - rows[0]) + 1 if rows else 0
    local = (slice(rows[0] - low, None, rows.step) if rows else slice(0, 0), *index[d + 1 :])
    return start + low * strides[d], (count, *shape[d + 1 :]), local


def pread_exact(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` from ``offset`` of ``fd`` by positioned reads, across short reads; a file
    that ends first raises ``TRUNCATED``."""
    pending, at, end = view, offset, offset + view.nbytes
    while pending:
        got = os.preadv(fd, [pending], at)
        if got == 0:
            raise field_error("TRUNCATED", "file ended inside a payload", at, end, at)
        pending, at = pending[got:], at + got


def _read_new(reader: Reader, info: TensorInfo) -> NDArray[Any]:
    """The payload of ``info`` read into a new array by positioned reads."""
    array = np.empty(info.shape, numpy_dtype(info.dtype))
    if info.length:
        pread_exact(reader.fileno(), array.reshape(-1).view(np.uint8).data, info.offset)
    return array


def _stores_none(opened: Reader | FileSet) -> bool:
    """The file (of a set, its first member [SET-10]) stores no metadata: its
    ``metadata_length`` is 0 [META-1]."""
    if isinstance(opened, Reader):
        return bool(opened.header["metadata_length"] == 0)
    with opened.lease(0) as first:
        return bool(first.header["metadata_length"] == 0)


def _identity(array: NDArray[Any]) -> NDArray[Any]:
    return array


def _to_torch(device: Any) -> Callable[[NDArray[Any]], Any]:
    """A NumPy array to a torch tensor on ``device`` (checked now, as safetensors checks it
    at open): on the CPU over the array's own memory (the private map, or the array just
    read), elsewhere a copy.  :mod:`reference.torch` imports torch at its top, and
    ``import reference`` must not, so it is imported here, on first use, by name."""
    module: ModuleType = importlib.import_module("reference.torch")
    target = module.torch.device(device)
    if target.type == "cpu":
        return module.as_tensor  # type: ignore[no-any-return]
    return lambda array: module.from_array(array, target)


__all__ = [
    "BACKENDS",
    "FRAMEWORKS",
    "SafeSlice",
    "covered_run",
    "expand_index",
    "is_basic",
    "pread_exact",
    "safe_open",
]
