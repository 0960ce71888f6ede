"""Writing AWQ-v2 files: :func:`save` for a dict of arrays, :class:`Writer` for streaming.

The writer streams every payload to a temporary file in the destination's
folder as it is added, keeping only the index in memory (about 100 bytes per
tensor plus its name), then writes the index, the trailer and the header, flushes
to storage and renames the file into place [WR-2].  The bytes depend only on the
tensors, their order and the metadata [WR-1].

State machine: a writer is ``open`` until :meth:`Writer.close` (``closed``) or
:meth:`Writer.abort` (``aborted``); any call out of that order raises
:class:`WriterStateError`.
"""

from __future__ import annotations

import enum
import fcntl
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import ArrayLike, NDArray

from reference.format import rules
from reference.format.layers import encode_linear
from reference.format.metadata import encode_metadata
from reference.ground.errors import FormatError
from reference.ground.hashing import buckets_of, fnv1a_64_many
from reference.write.partial import PARTIAL_SUFFIX, stale_partials
from reference.write.publish import Transaction, Watched
from reference.write.writeback import Writeback
from spec.algorithms import align_up, bucket_bits_for, crc32c
from spec.constants import (
    ALIGNMENT,
    MAGIC,
    MAX_BUCKET_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TENSORS,
    SLAB_OFFSET,
    VERSION_MAJOR,
    VERSION_MINOR,
)
from spec.geometry import DIM_SIZE, entry_checksum, index_geometry, pack_dims
from spec.registry import DTYPE_BY_NAME, LAYOUT_BY_NAME
from spec.schema import ENTRY_DTYPE, TRAILER_SIZE, Header, Trailer

_CHUNK = 16 << 20

_NUMPY_TO_DTYPE = {
    "bool": "BOOL",
    "uint8": "U8",
    "int8": "I8",
    "uint16": "U16",
    "int16": "I16",
    "uint32": "U32",
    "int32": "I32",
    "uint64": "U64",
    "int64": "I64",
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
}


class WriterStateError(RuntimeError):
    """A writer method called out of order (after close or abort)."""


class _State(enum.Enum):
    OPEN = "open"
    PARKED = "parked"  # every payload written; the file closed until close() finishes it
    CLOSED = "closed"
    ABORTED = "aborted"


def dtype_name_of(array: np.ndarray) -> str:
    """Registry dtype name of a NumPy array's element type."""
    name = _NUMPY_TO_DTYPE.get(array.dtype.name)
    if name is None:
        raise TypeError(f"no AWQ-v2 dtype for NumPy dtype {array.dtype}")
    return name


class Writer:
    """Streaming writer.  Use as a context manager; leaving the block normally publishes the file.

    >>> with Writer("model.awq2", metadata={"config": {}}) as w:   # doctest: +SKIP
    ...     w.add("lm_head.weight", weights)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        metadata: Mapping[str, Any] | None = None,
        check: Callable[[Path], None] | None = None,
        writeback: bool = False,
        watched: Watched | None = None,
    ):
        """``check(tmp_path)``, if given, runs on the finished temporary file before it is
        renamed into place; raising aborts the write (the converter verifies there).
        ``writeback`` flushes the payloads to storage on a thread of its own as they are
        written (:mod:`reference.write.writeback`), so that :meth:`close` has little left to flush;
        the bytes are the same either way.  ``watched``: what the run started from
        (:func:`reference.write.publish.watch`; by default the destination as it is now): a
        destination changed since is refused at close, never overwritten."""
        self.path = Path(path)
        self._metadata = encode_metadata(metadata)
        self._check = check
        # the partial, named and locked [WR-3], published by one transaction [WR-2]
        self._publish = Transaction(self.path, watched=watched)
        self._tmp = self._publish.tmp
        assert self._publish.file is not None
        self._file: BinaryIO = self._publish.file
        self._state = _State.OPEN
        self._writeback: Writeback | None = None
        try:
            if writeback:
                self._writeback = Writeback(self._file.fileno())
            self._file.write(bytes(SLAB_OFFSET))  # header area, zero-filled [PAD-1, WR-4]
        except BaseException:
            self.abort()
            raise
        self._cursor = SLAB_OFFSET  # next free 64 KiB boundary in the slab
        self._names: list[bytes] = []
        self._seen: set[bytes] = set()
        self._records: list[tuple[int, ...]] = []
        self._shapes: list[tuple[int, ...]] = []
        self._quantized: list[rules.TensorInfo] = []

    # ------------------------------------------------------------------ adding tensors

    def add(
        self,
        name: str,
        array: ArrayLike,
        *,
        dtype: str | None = None,
        layout: str = "DENSE",
        bits: int = 0,
        group_size: int = 0,
        k: int = 0,
        n: int = 0,
    ) -> rules.TensorInfo:
        """Append one tensor, its dtype inferred from the array's (``ml_dtypes.bfloat16`` is
        BF16, ``float8_e4m3fn`` F8_E4M3, ``float8_e5m2`` F8_E5M2 [DT-1]).  ``dtype`` overrides
        the registry type of a same-size array (``dtype="BF16"`` for a ``uint16`` array
        holding bfloat16 bits)."""
        arr = np.asarray(array)
        natural = dtype_name_of(arr)
        dtype_name = dtype or natural
        spec_dtype = DTYPE_BY_NAME.get(dtype_name)
        if spec_dtype is None:
            raise ValueError(f"unknown dtype {dtype_name!r}; known: {sorted(DTYPE_BY_NAME)}")
        if spec_dtype.itemsize != arr.dtype.itemsize:
            raise ValueError(
                f"dtype {dtype_name} has {spec_dtype.itemsize}-byte items, "
                f"the array has {arr.dtype.itemsize}-byte items"
            )
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        chunks = (raw[i : i + _CHUNK].data for i in range(0, raw.size, _CHUNK))
        return self.add_bytes(
            name,
            dtype_name,
            arr.shape,
            chunks,
            layout=layout,
            bits=bits,
            group_size=group_size,
            k=k,
            n=n,
        )

    def add_bytes(
        self,
        name: str,
        dtype: str,
        shape: Iterable[int],
        chunks: Iterable[Any],
        *,
        layout: str = "DENSE",
        bits: int = 0,
        group_size: int = 0,
        k: int = 0,
        n: int = 0,
    ) -> rules.TensorInfo:
        """Append one tensor from an iterable of buffers (row-major, little-endian bytes).

        The chunks are written as they come, so a payload never has to fit in memory.
        """
        self._require_open()
        shape = tuple(int(d) for d in shape)
        raw_name = self._check_name(name)
        spec_layout = LAYOUT_BY_NAME.get(layout)
        if spec_layout is None:
            raise ValueError(f"unknown layout {layout!r}; known: {sorted(LAYOUT_BY_NAME)}")
        if len(self._names) >= MAX_TENSORS:
            raise ValueError(f"more than max_tensors = {MAX_TENSORS} tensors [LIM-2]")
        rules.check_dims(len(shape), offset=0)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        length = rules.element_count(shape) * DTYPE_BY_NAME[dtype].itemsize
        offset = self._cursor
        # Entry rules the reader will apply [ENT-7]; the slab end is not known yet.
        end = offset + length
        code = DTYPE_BY_NAME[dtype].code
        rules.check_payload(
            shape, code, offset, length, slab_offset=SLAB_OFFSET, slab_end=end, offset=0
        )
        rules.check_layout(spec_layout.code, dtype, shape, bits, group_size, k, n, offset=0)
        crc = self._write_payload(name, chunks, offset, length)
        if length:
            self._cursor = align_up(offset + length, ALIGNMENT)  # [SLAB-5]
        self._names.append(raw_name)
        self._seen.add(raw_name)
        self._shapes.append(shape)
        codes = (DTYPE_BY_NAME[dtype].code, spec_layout.code)
        self._records.append((offset, length, *codes, bits, group_size, k, n, crc))
        info = rules.TensorInfo(name, dtype, shape, layout, offset, length, crc,
                                bits, group_size, k, n)  # fmt: skip
        if spec_layout.quantized:  # kept for the layer check at close [LAY-7]
            self._quantized.append(info)
        return info

    def _write_payload(self, name: str, chunks: Iterable[Any], offset: int, length: int) -> int:
        """Stream the chunks to ``offset``: exactly ``length`` bytes or an error; the CRC."""
        crc, written = 0, 0
        self._file.seek(offset)
        for chunk in chunks:
            view = memoryview(chunk).cast("B")
            if written + len(view) > length:
                self._fail_payload(offset)
                raise ValueError(f"{name!r}: more than the {length} bytes its shape needs")
            self._file.write(view)
            crc = crc32c(view, crc)
            written += len(view)
            if self._writeback is not None:
                self._writeback.wrote(len(view))
        if written != length:
            self._fail_payload(offset)
            raise ValueError(f"{name!r}: got {written} bytes, its shape needs {length}")
        if length:  # the padding is written, not left as a hole [PAD-2, WR-4]
            self._file.write(bytes(align_up(offset + length, ALIGNMENT) - offset - length))
        return crc

    def add_linear(self, prefix: str, **layer: Any) -> str:
        """Store one quantised linear layer; see :func:`reference.format.layers.encode_linear`.

        Codes ``q``/``z`` or AutoAWQ ``qweight``/``qzeros``, plus ``scales``, ``bits``,
        ``group_size`` and an optional ``bias``.  Returns ``"MARLIN"`` or ``"AWQ"``, the
        layout family chosen by the shape rules [LAY-8].
        """
        family, stored = encode_linear(prefix, **layer)
        for tensor in stored:
            self.add(tensor.name, tensor.array, **tensor.fields)
        return family

    def _check_name(self, name: str) -> bytes:
        if not isinstance(name, str):
            raise TypeError(f"tensor names are str, got {type(name).__name__}")
        raw = name.encode("utf-8")  # a str with lone surrogates raises here [NAME-2]
        if not raw:
            raise ValueError("empty tensor name [NAME-1]")
        if len(raw) > MAX_NAME_LENGTH:
            raise ValueError(
                f"name of {len(raw)} bytes, over max_name_length {MAX_NAME_LENGTH} [LIM-3]"
            )
        if raw in self._seen:
            raise ValueError(f"duplicate tensor name {name!r} [NAME-3]")
        return raw

    def _fail_payload(self, offset: int) -> None:
        """Forget a half-written payload: the next one overwrites it, then truncate."""
        self._file.truncate(offset)

    def size_with(self, tensors: Iterable[tuple[str, int, int]] = ()) -> int:
        """The length the file would have if it were closed after adding ``tensors``, each
        ``(name, data_length, ndim)``, with the metadata it has now: what a writer splitting
        a set by size asks before adding a layer [SET-10]."""
        cursor, count = self._cursor, len(self._names)
        dims = sum(len(shape) for shape in self._shapes)
        names = sum(len(name) for name in self._names)
        for name, length, ndim in tensors:
            if length:
                cursor = align_up(cursor + length, ALIGNMENT)
            count, dims, names = count + 1, dims + ndim, names + len(name.encode("utf-8"))
        geometry = index_geometry(index_offset=0, bucket_bits=bucket_bits_for(count),
                                  tensor_count=count, dims_count=dims, names_length=names,
                                  metadata_length=len(self._metadata))  # fmt: skip
        return cursor + geometry.length + TRAILER_SIZE

    # ------------------------------------------------------------------ metadata

    def set_metadata(self, metadata: Mapping[str, Any] | None) -> None:
        """Replace the metadata given to ``__init__``, checked the same way; for metadata
        finished while the payloads are written (the converter's source hashes).  It is
        written in the index, at :meth:`close` [IDX-2], so it may change until then; after
        close or abort it raises :class:`WriterStateError`."""
        self._require_open(parked=True)
        self._metadata = encode_metadata(metadata)

    # ------------------------------------------------------------------ finishing

    def park(self) -> None:
        """No more tensors: flush the payloads and close the file, so that a writer of many
        files (a set's members, whose metadata is finished last) holds no descriptor for
        it; :meth:`close` opens it again to write the index [SET-10].  The partial stays
        where it is: its writer, this process, is alive, so no clean-up takes it [WR-3]."""
        self._require_open()
        try:
            self._file.flush()
            if self._writeback is not None:
                self._writeback.close()
                self._writeback = None
            self._file.close()
        except BaseException:
            self.abort()
            raise
        self._state = _State.PARKED

    def _resume(self) -> None:
        """Open a parked partial again, locked as when it was created [WR-3]."""
        file = open(self._tmp, "r+b")  # closed by _finish or abort
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            file.close()
            raise
        self._file = self._publish.file = file
        self._state = _State.OPEN

    def close(self) -> Path:
        """Write index, trailer and header, flush to storage, rename into place."""
        self._require_open(parked=True)
        try:
            if self._state is _State.PARKED:
                self._resume()
            self._finish()
        except BaseException:
            self.abort()
            raise
        self._state = _State.CLOSED
        return self.path

    def abort(self) -> None:
        """Drop everything written; the destination is left as it was.  Never raises for
        the file itself: a write that failed (a full disk, a file-size limit) fails again
        when the buffer is flushed at close, and the partial is removed all the same."""
        if self._state is _State.CLOSED:
            raise WriterStateError("abort() after close()")
        self._state = _State.ABORTED
        try:
            if self._writeback is not None:  # the descriptor must outlive its last flush
                self._writeback.close()
        except OSError:
            pass  # the partial goes regardless
        self._publish.abort()  # the partial goes, whatever a failed write left in its buffer

    def __enter__(self) -> Writer:
        self._require_open()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._state not in (_State.OPEN, _State.PARKED):
            return
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_state", None) in (_State.OPEN, _State.PARKED):
            self.abort()

    def _require_open(self, *, parked: bool = False) -> None:
        if self._state is _State.OPEN or (parked and self._state is _State.PARKED):
            return
        raise WriterStateError(f"writer is {self._state.value}")

    def _finish(self) -> None:
        try:
            rules.check_layers(self._quantized, lambda i: 0)
        except FormatError as exc:
            raise ValueError(f"not whole layers [LAY-7]: {exc}") from exc
        index, counts = self._build_index()
        index_offset = self._cursor
        self._file.truncate(index_offset)  # drops a payload forgotten by _fail_payload
        self._file.seek(index_offset)
        self._file.write(index)
        header_fields = dict(
            magic=MAGIC,
            version_major=VERSION_MAJOR,
            version_minor=VERSION_MINOR,
            reserved0=bytes(4),
            required_flags=0,
            optional_flags=0,
            alignment=ALIGNMENT,
            slab_offset=SLAB_OFFSET,
            index_offset=index_offset,
            index_length=len(index),
            file_size=index_offset + len(index) + TRAILER_SIZE,
            tensor_count=len(self._names),
            dims_count=counts["dims"],
            names_length=counts["names"],
            metadata_length=len(self._metadata),
            bucket_bits=counts["bucket_bits"],
            reserved1=bytes(3),
            index_crc=crc32c(index),
            metadata_crc=crc32c(self._metadata),
            reserved2=bytes(8),
        )
        header = Header.build(dict(fields=dict(value=header_fields)))
        header_crc = int.from_bytes(header[-4:], "little")
        trailer = Trailer.build(
            dict(
                fields=dict(
                    value=dict(
                        index_offset=index_offset, index_length=len(index), header_crc=header_crc
                    )
                )
            )
        )
        self._file.write(trailer)
        self._file.seek(0)
        self._file.write(header)
        self._file.flush()
        if self._writeback is not None:
            self._writeback.close()  # a failed background flush fails the write here
        os.fsync(self._file.fileno())
        if self._check is not None:  # the partial stays open, so locked, until the rename
            self._check(self._tmp)
        self._publish.commit()  # the old file's mode, owner and group; refused if it changed

    def _build_index(self) -> tuple[bytes, dict[str, int]]:
        """The index region [IDX-2..8], and the header counts that describe it."""
        count = len(self._names)
        geometry = index_geometry(
            index_offset=0,
            bucket_bits=bucket_bits_for(count),
            tensor_count=count,
            dims_count=sum(len(shape) for shape in self._shapes),
            names_length=sum(len(name) for name in self._names),
            metadata_length=len(self._metadata),
        )
        hashes, order, table = self._bucket_table(geometry.bucket_slots)
        entries, dims, names = self._entries(hashes, order)
        sections = (table, bytes(geometry.bucket_padding.length), entries, dims, names)  # [PAD-3]
        index = b"".join((*sections, self._metadata))
        assert len(index) == geometry.length
        counts = {"dims": geometry.dims.length // DIM_SIZE, "names": geometry.names.length}
        return index, {**counts, "bucket_bits": bucket_bits_for(count)}

    def _bucket_table(self, slots: int) -> tuple[NDArray[np.uint64], list[int], bytes]:
        """Name hashes, the entry order (bucket, then name) and the bucket table [IDX-5, IDX-8]."""
        count = len(self._names)
        lengths = np.fromiter((len(nm) for nm in self._names), dtype=np.int64, count=count)
        pool = np.frombuffer(b"".join(self._names), dtype=np.uint8)
        offsets = np.zeros(count, dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        hashes = fnv1a_64_many(pool, offsets.astype(np.uint64), lengths)
        buckets = buckets_of(hashes, bucket_bits_for(count))
        bucket_list = buckets.tolist()
        order = sorted(range(count), key=lambda i: (bucket_list[i], self._names[i]))
        per_bucket = np.bincount(buckets.astype(np.int64), minlength=slots - 1)
        if count and per_bucket.max() > MAX_BUCKET_LENGTH:
            raise ValueError(
                f"{per_bucket.max()} names share one hash bucket, over "
                f"max_bucket_length {MAX_BUCKET_LENGTH} [LIM-6]"
            )
        table = np.zeros(slots, dtype="<u4")
        np.cumsum(per_bucket, out=table[1:])
        return hashes, order, table.tobytes()

    def _entries(self, hashes: NDArray[np.uint64], order: list[int]) -> tuple[bytes, bytes, bytes]:
        """The entry records, dims and name pool, in index order [ENT-2, ENT-3, ENT-9]."""
        count = len(order)
        entries = np.zeros(count, dtype=ENTRY_DTYPE)
        names = [self._names[i] for i in order]
        shapes = [self._shapes[i] for i in order]
        records = np.array([self._records[i] for i in order], dtype=np.int64).reshape(count, 9)
        ndims = np.fromiter((len(s) for s in shapes), dtype=np.int64, count=count)
        name_lengths = np.fromiter((len(nm) for nm in names), dtype=np.int64, count=count)
        entries["name_hash"] = hashes[order]
        entries["data_offset"] = records[:, 0]
        entries["data_length"] = records[:, 1]
        entries["name_offset"][1:] = np.cumsum(name_lengths)[:-1]  # [ENT-2]
        entries["dims_index"][1:] = np.cumsum(ndims)[:-1]  # [ENT-3]
        entries["name_length"] = name_lengths
        for column, field in enumerate(
            ("dtype", "layout", "bits", "group_size", "k", "n", "data_crc"), start=2
        ):
            entries[field] = records[:, column]
        entries["ndim"] = ndims
        dims = np.array([d for s in shapes for d in s], dtype="<u8")
        raw_entries = entries.view(np.uint8).reshape(count, ENTRY_DTYPE.itemsize)
        for i, shape in enumerate(shapes):  # [ENT-9]
            entries["entry_crc"][i] = entry_checksum(
                raw_entries[i].tobytes(), names[i], pack_dims(shape)
            )
        return entries.tobytes(), dims.tobytes(), b"".join(names)


def save(
    path: str | os.PathLike[str],
    tensors: Mapping[str, NDArray[Any]],
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write a dict of NumPy arrays (like ``safetensors.numpy.save_file``), in dict order."""
    with Writer(path, metadata=metadata) as writer:
        for name, array in tensors.items():
            writer.add(name, array)
    return writer.path


__all__ = [
    "PARTIAL_SUFFIX",
    "Writer",
    "WriterStateError",
    "encode_metadata",
    "save",
    "stale_partials",
]
