"""``reference.safe_open``: safetensors' lazy reading interface over AWQ-v2 files and sets.

>>> with reference.safe_open("model.awq2", framework="np") as f:  # doctest: +SKIP
...     for name in f.keys():
...         first_rows = f.get_slice(name)[:2]

What it mirrors, checked in safetensors' Python binding (``bindings/python/src/lib.rs`` of
huggingface/safetensors: ``safe_open``, ``Open``, ``PySafeSlice``, ``slice_to_indexer``):

* ``safe_open(path, framework, device="cpu")`` is a context manager with ``keys()``,
  ``get_tensor(name)``, ``get_slice(name)`` and ``metadata()``; once the block is left every
  call raises (safetensors: "File is closed").  ``framework`` is ``"np"``/``"numpy"`` or
  ``"pt"``/``"torch"``/``"pytorch"`` (safetensors also takes ``tf``, ``flax``, ``mlx``: not
  here); a device other than the CPU is refused at open for NumPy, as there.
* ``get_slice(name)`` returns an object with ``get_shape()`` (a list of ints),
  ``get_dtype()`` (the registry name, ``"F16"``, ``"BF16"``..., safetensors' own spellings)
  and ``__getitem__``: an int (negative counts from the end) or a slice per dimension, as
  there; here also any step (negative too) and one ``...``.  Lists, arrays, booleans and
  ``None`` are refused (``TypeError``; safetensors refuses non-empty lists).

What differs, on purpose:

* ``path`` is anything :func:`reference.open` opens as AWQ-v2: a file, a model folder, a
  split set or, with ``rank=r``, rank ``r`` of a rank set (refused without it:
  ``TP_RANK_REQUIRED`` [SET-13]); an AWQ v1 or compressed-tensors checkpoint is refused.
* ``metadata()`` is the file's metadata object [META-1] as :attr:`Reader.metadata` gives it,
  any JSON object (nested values, numbers...), ``{}`` when there is none; safetensors gives
  ``dict[str, str]``, or ``None``.
* ``keys()`` are in slab order (then member by member), as :meth:`Reader.names`.
* ``get_tensor`` with ``"np"`` is a read-only, zero-copy view of the memory map
  (:meth:`Reader.tensor`); safetensors copies.  A quantised layer's entries come as stored,
  in the Marlin layout (``Reader.linear`` and ``Reader.dequantize`` interpret them).
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
the check and the touch of a page (the index, or a ``get_tensor`` view, which is the map
itself and faults whenever it is read after the cut) still kills the process.  Only a
private copy closes it: ``reference.open(path, copy=True)`` reads the file once into memory
(a ``"pt"`` tensor is a copy too, but made from the map).

Threads may share one ``safe_open``, of a set too: a member being read is never closed to
make room for another (``FileSet.lease``).

``"pt"`` results are new tensors (:func:`reference.torch.from_array`, which copies the bits
once, into pinned memory for a CUDA device, then ``.to(device)``): that module, and torch
with it, is imported by the first ``safe_open(..., "pt")``, so that ``import reference`` never
pays for torch.
"""

from __future__ import annotations

import importlib
import math
import operator
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.ground.errors import TensorNotFoundError, error, field_error
from reference.opener import open as open_any
from reference.quant.dtypes import numpy_dtype
from reference.sets.fileset import FileSet

#: safetensors' framework names that this module serves, and what each is here.
FRAMEWORKS = {"np": "np", "numpy": "np", "pt": "pt", "torch": "pt", "pytorch": "pt"}

#: One index of one dimension after :func:`expand_index`: a position or a slice.
Index = int | slice


class safe_open:  # safetensors' name, so that code written for it reads the same
    """An open AWQ-v2 file, model folder or set; use it in a ``with`` block (or ``close()``).

    ``rank=R`` opens rank ``R`` of a rank set (needed there, refused elsewhere but 0);
    ``validate=True`` runs full validation first (:meth:`Reader.validate`).  The framework
    and the device are checked before the file is opened, as safetensors checks them."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        framework: str,
        device: Any = "cpu",
        *,
        rank: int | None = None,
        validate: bool = False,
    ) -> None:
        kind = FRAMEWORKS.get(framework) if isinstance(framework, str) else None
        if kind is None:
            raise ValueError(f"framework {framework!r}: one of {', '.join(FRAMEWORKS)}")
        if kind == "np" and str(device) != "cpu":
            raise ValueError(f"device {device!r} with framework {framework!r}: NumPy arrays "
                             "live on the CPU; use framework='pt' for another device")  # fmt: skip
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
            raise ValueError("the file is closed (use safe_open in a with block)")
        return self._opened

    def _checked(self) -> Reader | FileSet:
        """The open file, refused with ``TRUNCATED`` if it is shorter now than at open (a
        set checks each member as a call reads it)."""
        opened = self._open()
        if isinstance(opened, Reader):
            opened.check_length()
        return opened

    def keys(self) -> list[str]:
        """Every tensor name, in slab order (of a set, member by member)."""
        return self._checked().names()

    def metadata(self) -> dict[str, Any]:
        """The metadata JSON object, ``{}`` when there is none [META-1]."""
        return self._checked().metadata

    def get_tensor(self, name: str) -> Any:
        """The whole tensor: a read-only NumPy view of the map, or a new torch tensor."""
        return self._convert(self._checked().tensor(name))

    def get_slice(self, name: str) -> SafeSlice:
        """A tensor to index (``[rows, columns]``), reading only the rows the index covers."""
        opened = self._checked()
        if isinstance(opened, Reader):
            return SafeSlice(opened.entry(name), self._holder, self._convert)
        index = opened.find(name)
        if index is None:
            raise TensorNotFoundError(name)
        with opened.lease(index) as reader:
            info = reader.entry(name)
        return SafeSlice(info, lambda: self._holder(index), self._convert)

    def _holder(self, index: int = 0) -> AbstractContextManager[Reader]:
        """The reader of the file, or of member ``index`` of a set, held open while in use:
        the set may close a member meanwhile, to open others, and opens it again (with its
        opening checks); it never closes one under a reader.  Nothing is checked: a slice
        reads by ``preadv``, which finds a new end of file itself."""
        opened = self._open()
        if isinstance(opened, Reader):
            return nullcontext(opened)
        return opened.lease(index, check_length=False)

    def close(self) -> None:
        """Close the file; views and tensors handed out stay valid."""
        if self._opened is not None:
            self._opened.close()
            self._opened = None

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
    ) -> None:
        """``holder()`` holds the reader of the file that stores ``info`` open for a read."""
        self.info = info
        self._holder, self._convert = holder, convert

    def get_shape(self) -> list[int]:
        """The whole tensor's shape."""
        return list(self.info.shape)

    def get_dtype(self) -> str:
        """The registry dtype name (``"F16"``, ``"BF16"``, ``"I32"``...)."""
        return self.info.dtype

    def __getitem__(self, key: Any) -> Any:
        info = self.info
        index = expand_index(key, info.shape)
        start, block_shape, local = covered_run(index, info.shape)
        block = np.empty(block_shape, numpy_dtype(info.dtype))
        if block.nbytes:
            offset = info.offset + start * block.itemsize
            with self._holder() as reader:
                pread_exact(reader.fileno(), block.reshape(-1).view(np.uint8).data, offset)
        return self._convert(np.ascontiguousarray(block[local]) if local else block)


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


def _identity(array: NDArray[Any]) -> NDArray[Any]:
    return array


def _to_torch(device: Any) -> Callable[[NDArray[Any]], Any]:
    """A NumPy array to a new torch tensor on ``device`` (checked now, as safetensors checks
    it at open).  :mod:`reference.torch` imports torch at its top, and ``import reference``
    must not, so it is imported here, on first use, by name."""
    module: ModuleType = importlib.import_module("reference.torch")
    target = module.torch.device(device)
    return lambda array: module.from_array(array, target)


__all__ = ["FRAMEWORKS", "SafeSlice", "covered_run", "expand_index", "pread_exact", "safe_open"]
