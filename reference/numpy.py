"""NumPy interface: ``save``, ``load``, ``save_file`` and ``load_file`` with the meaning of
``safetensors.numpy``'s, for AWQ-v2 files, model folders and file sets.

What "the same meaning" is, checked in safetensors 0.8.0's
``bindings/python/py_src/safetensors/numpy.py`` (the functions named there) and its tests
(``bindings/python/tests/test_simple.py``); ``tests/test_numpy_api.py`` runs each case through
both libraries side by side:

* ``save(tensors, metadata=None) -> bytes`` (``numpy.py:save``) and ``save_file(tensors,
  filename, metadata=None) -> None`` (``numpy.py:save_file``): a ``dict`` of arrays, stored
  in safetensors' order whatever the dict's (:func:`safetensors_order`: by dtype, the widest
  first, then by name, as ``prepare`` in ``safetensors/src/tensor.rs`` sorts), so that the
  same tensors give the same bytes; a big-endian array is stored little-endian
  (``numpy.py:_flatten`` byteswaps, and ``test_simple.py:test_serialization_no_big_endian``
  checks it); the same array under two names, or two overlapping arrays, are stored twice
  (``_flatten`` has no check of shared memory, unlike ``safetensors.torch``); empty arrays,
  zero-size dimensions, 0-d arrays and ``bool`` are stored as they are
  (``test_simple.py:test_numpy_bool``).  ``metadata=None`` stores none: ``safe_open``'s
  ``metadata()`` is ``None`` then, as there.
* ``load(data) -> dict`` (``numpy.py:load``) and ``load_file(filename) -> dict``
  (``numpy.py:load_file``): every tensor, as writable arrays that share no memory with
  ``data``; ``load_file``'s keyword ``backend`` is ``"mmap"`` (arrays in one private,
  copy-on-write map of each file) or ``"pread"`` (every byte read up front).  A missing file
  raises ``FileNotFoundError``.  The metadata is not returned, as there: read it with
  ``reference.open(path).metadata``.

Where this module differs, on purpose (``docs/reference/numpy.md`` has the table):

* ``metadata`` is what :func:`reference.save` takes, any JSON object [META-1]: safetensors'
  ``dict[str, str]`` is one, and so are nested objects, lists, numbers, booleans and null,
  which safetensors' Rust binding refuses with ``TypeError``.  What a reader would reject
  [META-5, LIM-5] is refused (``TypeError`` or ``ValueError``) before a file is opened.
* an array that is not C-contiguous (a transpose, a strided slice, Fortran order) is stored
  by its values, in row-major order; ``numpy.py:_flatten`` hands safetensors the array's
  data pointer and ``nbytes``, so it stores the first ``nbytes`` of the memory under the
  array (other values, silently) although its docstring asks for contiguous arrays.
* BF16, F8_E4M3 and F8_E5M2 arrays (``ml_dtypes``) load as what they are; safetensors saves
  them but its ``numpy.py:_getdtype`` has no entry for them (``KeyError`` on load).  A
  ``complex64`` array, which safetensors stores (C64), is refused: the registry has no
  complex type [ENT-4].  Anything that is not a ``numpy.ndarray`` is refused by name with
  ``TypeError`` (safetensors fails with ``AttributeError``).
* ``load`` takes any bytes-like object (safetensors: ``bytes`` only); ``load_file`` takes a
  file, a model folder (``model.awq2``) or a file set: a split set gives every tensor; a
  rank set refuses without ``rank=`` (``TP_RANK_REQUIRED`` [SET-13]) and gives rank ``r``'s
  shards with ``rank=r``.  A checkpoint of another format is refused (``ValueError``).

Before returning anything, ``load`` and ``load_file`` check what safetensors checks of its
header (``Metadata::validate`` in ``safetensors/src/tensor.rs``): every entry [ENT-*], that
no two payloads overlap and each lies where it must [SLAB-4, SLAB-5], and that no name comes
twice [NAME-3; in a set, SET-6].  ``validate=True`` runs full validation instead [RD-2;
a set's, SET-8].  :func:`read_all` and :func:`checked_entries` are the same checks for
``reference.torch``.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from numpy.typing import NDArray

from reference.format.index import Index
from reference.format.order import slab_order
from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.format.validate import check_slab, validate_index
from reference.opener import open as open_any
from reference.quant.dtypes import numpy_dtype
from reference.sets.fileset import FileSet
from reference.write.writer import dtype_name_of
from reference.write.writer import save as save_arrays

_T = TypeVar("_T")

#: What ``backend`` may be, as ``safetensors.numpy.load_file`` takes it.
BACKENDS = ("mmap", "pread")

#: The registry's dtypes in the order of safetensors' ``Dtype`` enum, which its comment calls
#: "increasing alignment order" (``safetensors/src/tensor.rs:808-860`` at 24b0b2857fef; its
#: ``F4``, ``F6_*``, ``F8_E8M0``, ``*FNUZ`` and ``C64`` are not in the registry [ENT-4]).
SAFETENSORS_DTYPE_ORDER = ("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                           "BF16", "I32", "U32", "F32", "F64", "I64", "U64")  # fmt: skip

# -------------------------------------------------------------------------------------- saving


def save(tensors: Mapping[str, NDArray[Any]], metadata: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of the AWQ-v2 file :func:`save_file` writes for ``tensors`` and ``metadata``
    (``safetensors.numpy.save``): written through :class:`reference.Writer` into a temporary
    folder, read back and removed."""
    with tempfile.TemporaryDirectory(prefix="awq2-save-") as folder:
        path = Path(folder) / "tensors.awq2"
        save_file(tensors, path, metadata)
        return path.read_bytes()


def save_file(
    tensors: Mapping[str, NDArray[Any]],
    filename: str | os.PathLike[str],
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Write ``tensors`` (a dict of NumPy arrays, stored in :func:`safetensors_order`) to an
    AWQ-v2 file, like ``safetensors.numpy.save_file``; ``metadata`` is any JSON object
    [META-1] (safetensors' ``dict[str, str]`` is one; ``None`` stores none, and
    ``safe_open(...).metadata()`` reads ``None``).  Non-contiguous and big-endian arrays are
    stored by their values, little-endian [DT-1]; nothing is written when a check fails."""
    check_arrays(tensors)
    save_arrays(filename, dict(safetensors_order(tensors.items(), dtype_name_of)), metadata)


def safetensors_order(
    items: Iterable[tuple[str, _T]], dtype_of: Callable[[_T], str]
) -> list[tuple[str, _T]]:
    """``(name, tensor)`` pairs in the order safetensors writes them: by dtype, descending in
    :data:`SAFETENSORS_DTYPE_ORDER`, then by name (``prepare`` in ``safetensors/src/tensor.rs``,
    lines 227-232 at 24b0b2857fef; Rust compares strings by their UTF-8 bytes, which is
    Python's order of code points).  ``dtype_of(tensor)`` is its registry dtype name."""
    rank = {name: i for i, name in enumerate(SAFETENSORS_DTYPE_ORDER)}

    def key(item: tuple[str, _T]) -> tuple[int, str]:
        return -rank[dtype_of(item[1])], item[0]

    return sorted(items, key=key)


def check_arrays(tensors: Any) -> None:
    """``tensors`` is a mapping whose every value is a ``numpy.ndarray`` (``TypeError``
    naming the first that is not); names, dtypes and shapes are the writer's to check."""
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors must be a dict of numpy arrays, not {type(tensors).__name__}")
    for name, array in tensors.items():
        if not isinstance(array, np.ndarray):
            raise TypeError(f"{name!r}: expected a numpy.ndarray, found {type(array).__name__}")


# ------------------------------------------------------------------------------------- loading


def load(data: bytes, *, validate: bool = False) -> dict[str, NDArray[Any]]:
    """Every tensor of the AWQ-v2 file whose bytes are ``data`` (``safetensors.numpy.load``),
    as writable arrays of their own, after the checks :func:`load_file` runs."""
    return {info.name: np.array(view) for info, view in views_of(data, validate=validate)}


def views_of(data: Any, *, validate: bool = False) -> list[tuple[TensorInfo, NDArray[Any]]]:
    """Each entry of the file ``data`` holds, in slab order, with a read-only, zero-copy view
    of its payload (of a ``bytes`` copy of ``data`` when ``data`` is another bytes-like
    object, so that nothing changes under the views)."""
    raw = data if isinstance(data, bytes) else bytes(memoryview(data))
    index = Index(raw)  # the opening checks [RD-1]
    if validate:
        infos = validate_index(index, keep=True).infos or index.infos()  # [RD-2]
    else:
        infos = index.infos()  # every entry [ENT-*]
        check_slab(index)  # [SLAB-4, SLAB-5]
        if len({info.name for info in infos}) != len(infos):
            validate_index(index)  # raises; DUPLICATE_NAME at the latest [NAME-3]
    ordered = [infos[i] for i in slab_order(index)]
    return [(info, index.view(info)) for info in ordered]


def load_file(
    filename: str | os.PathLike[str],
    *,
    rank: int | None = None,
    backend: Literal["mmap", "pread"] = "mmap",
    validate: bool = False,
) -> dict[str, NDArray[Any]]:
    """Every tensor of an AWQ-v2 file, model folder or split set (of a rank set, rank
    ``rank``'s shards), like ``safetensors.numpy.load_file``.  ``backend="mmap"``: views of
    one private, copy-on-write map of each file (read when touched; a write changes only
    this process's copy); ``"pread"``: fresh arrays, every byte read now
    (:meth:`~reference.format.reader.Reader.read_many_into`)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be 'mmap' or 'pread', not {backend!r}")
    read = _mapped if backend == "mmap" else _read
    return read_all(filename, read, rank=rank, validate=validate)


def _mapped(reader: Reader, infos: list[TensorInfo]) -> list[NDArray[Any]]:
    """Each payload a view of one private map of the reader's own file (``ACCESS_COPY``)."""
    private = mmap.mmap(reader.fileno(), 0, access=mmap.ACCESS_COPY)
    out = []
    for info in infos:
        dtype = numpy_dtype(info.dtype)
        if info.length:
            array = np.frombuffer(private, dtype, info.length // dtype.itemsize, info.offset)
            out.append(array.reshape(info.shape))
        else:  # a zero-size array: no bytes to map
            out.append(np.empty(info.shape, dtype))
    return out


def _read(reader: Reader, infos: list[TensorInfo]) -> list[NDArray[Any]]:
    """Fresh arrays filled by one bulk read."""
    arrays = [np.empty(info.shape, numpy_dtype(info.dtype)) for info in infos]
    reader.read_many_into(zip(infos, (a.reshape(-1).view(np.uint8) for a in arrays), strict=True))
    return arrays


# ------------------------------------------------------------------- what reference.torch shares


def read_all(
    path: str | os.PathLike[str],
    read: Callable[[Reader, list[TensorInfo]], list[_T]],
    *,
    rank: int | None = None,
    validate: bool = False,
) -> dict[str, _T]:
    """``read(reader, infos)`` of every file ``path`` names (:func:`reference.open`: a file,
    a model folder, a set's members of one rank), each file's entries checked first
    (:func:`checked_entries`), the results by name, member by member in manifest order.

    A whole rank set refuses with ``TP_RANK_REQUIRED`` [SET-13] before anything is read; a
    name in two members raises the set's validation error (``SET_DUPLICATE_NAME`` [SET-6] at
    the latest); ``validate=True`` validates the whole set first [SET-8]."""
    with open_any(path, rank=rank) as opened:
        if isinstance(opened, Reader):
            infos = checked_entries(opened, validate)
            return dict(zip((i.name for i in infos), read(opened, infos), strict=True))
        if not isinstance(opened, FileSet):
            raise ValueError(f"{os.fspath(path)!r} is a checkpoint of another format, not "
                             "AWQ-v2: convert it (python -m reference.convert) or read it "
                             "with reference.open")  # fmt: skip
        return _read_set(opened, read, validate)


def _read_set(
    fileset: FileSet, read: Callable[[Reader, list[TensorInfo]], list[_T]], validate: bool
) -> dict[str, _T]:
    """:func:`read_all` of a set, one member at a time (a set may have more members than it
    keeps open: ``FileSet``'s descriptor budget)."""
    if fileset.kind == "rank" and fileset.only_rank is None:
        fileset.entries()  # raises TP_RANK_REQUIRED [SET-13]
    if validate:
        fileset.validate()  # [SET-8]
    out: dict[str, _T] = {}
    for reader in fileset.rank_members(fileset.only_rank or 0):
        infos = reader.entries() if validate else checked_entries(reader, False)
        if any(info.name in out for info in infos):
            fileset.validate()  # raises; SET_DUPLICATE_NAME at the latest [SET-6]
        out.update(zip((i.name for i in infos), read(reader, infos), strict=True))
    return out


def checked_entries(reader: Reader, validate: bool = False) -> list[TensorInfo]:
    """A file's entries in slab order, each checked [ENT-*], then their payloads' placement
    [SLAB-4, SLAB-5] and their names' uniqueness [NAME-3] (a name found twice is reported by
    full validation, which raises the file's first failure); ``validate``: full validation
    instead [RD-2]."""
    if validate:
        return reader.validated_entries()
    infos = reader.entries()
    check_slab(reader.index)
    if len({info.name for info in infos}) != len(infos):
        reader.validate()  # raises; DUPLICATE_NAME at the latest
    return infos


__all__ = [
    "BACKENDS",
    "SAFETENSORS_DTYPE_ORDER",
    "check_arrays",
    "checked_entries",
    "load",
    "load_file",
    "read_all",
    "safetensors_order",
    "save",
    "save_file",
    "views_of",
]
