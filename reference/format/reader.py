"""Reading AWQ-v2 files: :func:`open` returns a :class:`Reader` over a read-only memory map.

Two levels of checking [RD-1, RD-2]:

* opening checks the header and the trailer only (O(1) work), and each lookup
  checks its own bucket and entry [IDX-9, ENT-7] before any view is made;
* :meth:`Reader.validate` (or ``open(path, validate=True)``) checks the whole
  file in the order RD-2 fixes; :meth:`Reader.verify` adds every payload checksum.

Views are zero-copy NumPy arrays of the mapped payload bytes, of the types
:mod:`reference.quant.dtypes` names (``ml_dtypes`` ones for BF16 and FP8).  The index is read
through a NumPy structured dtype derived from the construct schema
(:data:`spec.schema.ENTRY_DTYPE`), never parsed entry by entry up front.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from reference.format.index import Index
from reference.format.layers import LinearLayer, dequantize_layer, find_layers, read_linear
from reference.format.metadata import parse_metadata
from reference.format.order import slab_order
from reference.format.rules import TensorInfo
from reference.format.validate import Validated, validate_index
from reference.ground.errors import FormatError, TensorNotFoundError, checksum_mismatch, field_error
from reference.ground.files import open_regular
from reference.ground.parallel import available_cores, copy_out
from reference.ground.residency import resident
from reference.quant.dtypes import numpy_dtype
from spec.algorithms import crc32c
from spec.constants import ALIGNMENT
from spec.schema import HEADER_SIZE, TRAILER_SIZE

#: read_many_into: the most bytes and buffers one positioned read takes.
_RUN_BYTES = 64 << 20
#: verify: the most payload bytes one positioned read takes.
_VERIFY_CHUNK = 8 << 20
_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


class Reader:
    """An open AWQ-v2 file.  Use :func:`open`; close it (or use ``with``) when done.

    By default the file is memory-mapped and views are zero-copy.  A mapped file that is
    truncated or rewritten in place while open (another process, a shared or network file
    system) is not checked again: touching a view of a page that is gone kills the process
    with SIGBUS, and changed bytes appear in views without any checksum noticing.  For an
    untrusted file on shared storage, pass ``copy=True``: the file is read once into private
    memory (``bytes``) and every check and view uses that snapshot, so later changes to the
    file cannot reach the reader (at the cost of reading the whole file up front) [RD-5].
    In both modes the header is checked once and kept; every entry and bucket bound a lookup
    uses is read again and checked again, whatever validation said before [RD-4].
    """

    def __init__(
        self, path: str | os.PathLike[str], *, validate: bool = False, copy: bool = False
    ) -> None:
        self.path = Path(path)
        self._fd = -1
        with open_regular(self.path) as f:  # no FIFO, device or folder
            size = os.fstat(f.fileno()).st_size
            self._data: mmap.mmap | bytes
            if copy or size < HEADER_SIZE + TRAILER_SIZE:  # a private snapshot [RD-5]
                self._data = f.read()
            else:
                self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self._fd = os.dup(f.fileno())  # read_into() reads this same file, not the path
        try:
            self._index = Index(self._data)  # the opening checks [RD-1]
            self._metadata_cache: dict[str, Any] | None = None
            if validate:
                self.validate()
        except BaseException:
            self.close()
            raise

    @property
    def index(self) -> Index:
        """The parsed index (header, geometry, entries) this reader answers from."""
        return self._index

    @property
    def header(self) -> dict[str, Any]:
        """The header fields, checked at open."""
        return self._index.header

    @property
    def file_size(self) -> int:
        return self._index.file_size

    def fileno(self) -> int:
        """The descriptor of the file this reader opened and mapped (the same file even if
        its path was since replaced); ``OSError`` for a ``copy=True`` snapshot, which holds
        none."""
        if self._fd < 0:
            raise OSError(f"{self.path}: a snapshot reader (copy=True) holds no descriptor")
        return self._fd

    # ------------------------------------------------------------------ public API

    def __len__(self) -> int:
        return self._index.tensor_count

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._index.lookup(name) is not None

    def entry(self, name: str) -> TensorInfo:
        """What the index says about ``name``, after every check local to that entry."""
        rec = self._index.lookup(name)
        if rec is None:
            raise TensorNotFoundError(name)
        return self._index.info(rec)

    def tensor(self, name: str) -> NDArray[Any]:
        """Zero-copy, read-only view of the stored payload.  BF16, F8_E4M3 and F8_E5M2 come as
        ``ml_dtypes`` arrays (``bfloat16``, ``float8_e4m3fn``, ``float8_e5m2``); their raw
        bits are ``.view(np.uint16)`` / ``.view(np.uint8)`` of it, also zero-copy."""
        return self._index.view(self.entry(name))

    def view(self, info: TensorInfo) -> NDArray[Any]:
        """Zero-copy view of an entry this reader returned (from ``entry()`` or ``entries()``)."""
        return self._index.view(info)

    def linear(
        self,
        prefix: str,
        *,
        tp_rank: int = 0,
        tp_size: int = 1,
        parallel: Literal["column", "row"] | None = None,
    ) -> LinearLayer:
        """A quantised layer's stored arrays, zero-copy; with ``tp_size > 1``, the shard of
        rank ``tp_rank`` cut from them (``parallel`` = ``"column"`` or ``"row"``)."""
        return read_linear(self, prefix, tp_rank=tp_rank, tp_size=tp_size, parallel=parallel)

    def dequantize(self, prefix: str) -> NDArray[np.float32]:
        """``float32[k, n]`` weights of a quantised layer (``in_features x out_features``)."""
        return dequantize_layer(self.linear(prefix))

    def layers(self) -> list[str]:
        """Prefixes of every quantised linear layer, in slab order."""
        return find_layers(self)

    def tensors(self) -> Iterator[tuple[TensorInfo, NDArray[Any]]]:
        """Every ``(entry, zero-copy view)`` in slab order, each entry checked once."""
        for info in self.entries():
            yield info, self._index.view(info)

    def read_into(self, tensor: str | TensorInfo, out: Any) -> NDArray[Any]:
        """Read one payload into a caller's buffer (preallocated, pinned...) and return
        ``out``'s first ``length`` bytes viewed with the tensor's NumPy type
        (:mod:`reference.quant.dtypes`) and shape.  ``tensor`` is a name, or a ``TensorInfo`` this
        reader returned (from ``entries()``), which skips the lookup.  The bytes come as
        :meth:`read_many_into` fetches them: copied from the map where already in memory,
        else by positioned reads; a file found shorter than the payload raises ``TRUNCATED``."""
        return self.read_many_into([(tensor, out)])[0]

    def read_many_into(
        self, items: Iterable[tuple[str | TensorInfo, Any]], *, threads: int | None = None
    ) -> list[NDArray[Any]]:
        """``read_into`` for many tensors at once, returning the arrays in the order given.

        Payloads that follow one another in the slab are fetched together, in runs of up to
        64 MiB (the zero padding between them goes to a scratch block), front to back, and
        each payload lands in its own buffer.  Each run is fetched the faster way for where
        its bytes are (``bench/bench_load.py`` measures both; ``docs/benchmarks.md``):

        * all of its pages in the page cache (:func:`reference.ground.residency.resident`): copied
          out of the memory map (a user-space copy; positioned reads were 2-4x slower here),
          in pieces spread over ``threads`` threads (:func:`reference.ground.parallel.copy_out`;
          by default the cores this process may use; 1: the calling thread only), every
          such run of the call in one pass after the others are read;
        * otherwise: one ``preadv`` (the kernel reads ahead in large requests; a copy out
          of the map waited on page faults, 2x slower from a cold cache).

        The size of the file is taken (``fstat``) once per call: a run that now lies past
        its end is read, not copied, and raises ``TRUNCATED``.  A file truncated *during*
        the copy faults like any mapped view (SIGBUS, see :class:`Reader`); a reader opened
        with ``copy=True`` copies from its private snapshot instead.
        """
        threads = available_cores() if threads is None else threads
        jobs = []
        for tensor, out in items:
            info = tensor if isinstance(tensor, TensorInfo) else self.entry(tensor)
            target = memoryview(out).cast("B")
            if len(target) < info.length:
                raise ValueError(f"buffer of {len(target)} bytes for a {info.length}-byte payload")
            jobs.append((info, target[: info.length]))
        if isinstance(self._data, bytes):  # copy=True: from the snapshot, not the file
            for info, target in jobs:
                target[:] = self._data[info.offset : info.offset + info.length]
        else:
            scratch = memoryview(bytearray(ALIGNMENT))
            file_end = os.fstat(self._fd).st_size
            in_memory: list[tuple[memoryview, int]] = []
            run: list[memoryview] = []
            run_start = run_end = 0
            for info, target in sorted(
                (job for job in jobs if job[0].length), key=lambda job: job[0].offset
            ):
                gap = info.offset - run_end
                if run and (gap < 0 or gap >= ALIGNMENT or run_end - run_start > _RUN_BYTES
                            or len(run) + 2 > _IOV_MAX):  # fmt: skip
                    self._fetch(run, run_start, file_end, in_memory, scratch.obj)
                    run = []
                if not run:
                    run_start = run_end = info.offset
                elif gap:
                    run.append(scratch[:gap])
                run.append(target)
                run_end = info.offset + info.length
            if run:
                self._fetch(run, run_start, file_end, in_memory, scratch.obj)
            if in_memory:
                with memoryview(self._data) as mapped:
                    copy_out(mapped, in_memory, threads)
        return [
            np.frombuffer(target, numpy_dtype(info.dtype)).reshape(info.shape)
            for info, target in jobs
        ]

    def _fetch(self, views: list[memoryview], offset: int, file_end: int,
               in_memory: list[tuple[memoryview, int]], padding: object) -> None:  # fmt: skip
        """Fill a run's views from ``offset`` on by positioned reads now, or, when every byte
        is in memory and before ``file_end`` (the file's size now), add them to ``in_memory``
        (the runs copied out of the map together, on every core, once all are sorted; the
        views of ``padding``, the scratch block the zeros between payloads are read into,
        are left out)."""
        end = offset + sum(len(v) for v in views)
        buf = self._index.buf
        in_map = end <= min(file_end, len(buf))
        if not (in_map and resident(buf.ctypes.data + offset, end - offset)):
            self._preadv_exact(views, offset)
            return
        for view in views:
            if view.obj is not padding:  # the zeros between payloads are not copied
                in_memory.append((view, offset))
            offset += len(view)

    def _pread_into(self, view: memoryview, offset: int) -> None:
        """Fill ``view`` from ``offset`` by positioned reads (not through the map)."""
        self._preadv_exact([view], offset)

    def _preadv_exact(self, views: list[memoryview], offset: int) -> None:
        """Fill every view from ``offset`` on, across short reads."""
        pending, at = list(views), offset
        while pending:
            got = os.preadv(self._fd, pending, at)
            if got == 0:
                end = offset + sum(len(v) for v in views)
                raise field_error("TRUNCATED", "file ended inside a payload", at, end, at)
            at += got
            while pending and got >= len(pending[0]):
                got -= len(pending.pop(0))
            if got:
                pending[0] = pending[0][got:]

    def names(self) -> list[str]:
        """Every tensor name, in slab order (then by name for empty payloads)."""
        return [info.name for info in self.entries()]

    def entries(self) -> list[TensorInfo]:
        """Every entry, in slab order (each checked, in index order, first)."""
        infos = self._index.infos()
        return [infos[i] for i in slab_order(self._index)]

    def iter_entries(self) -> Iterator[TensorInfo]:
        """``entries()`` one at a time, holding none of them: for a validated file (otherwise
        the first bad entry in slab order raises, not the first in index order)."""
        index = self._index
        for i in slab_order(index):
            yield index.info(index.record(int(i)))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata JSON object ({} when the file has none) [META-1..4]."""
        if self._metadata_cache is None:
            self._metadata_cache = self._index.metadata()
        return self._metadata_cache

    @property
    def version(self) -> tuple[int, int]:
        return self.header["version_major"], self.header["version_minor"]

    # ------------------------------------------------------------------ validation [RD-2]

    def validate(self) -> None:
        """Check everything the spec requires, in the order RD-2 fixes."""
        self._validate()

    def check_length(self) -> None:
        """A mapped file found shorter than when it was opened (truncated since) is refused
        with ``TRUNCATED`` before any page past its new end is touched (SIGBUS otherwise):
        one ``fstat`` of the descriptor.  A snapshot (``copy=True``) has nothing to check.
        It proves nothing about later: a file cut after this check and before a page is
        read still faults (see :class:`Reader`)."""
        if self._fd < 0:
            return
        now, opened = os.fstat(self._fd).st_size, len(self._data)
        if now < opened:
            raise field_error("TRUNCATED", f"the file is {now} bytes now, {opened} when it "
                              "was opened: truncated since", now, opened, now)  # fmt: skip

    def validated_entries(self) -> list[TensorInfo]:
        """:meth:`validate`, then :meth:`entries`, reading and checking the entries once:
        the infos come from the copy of the index that validation checked [RD-4] (listing
        a model's entries costs as much as checking them; ``reference.torch.load_file``)."""
        infos = self._validate(keep=True).infos
        if infos is None:  # walked and passed: the table changed between the two passes
            return self.entries()
        return [infos[i] for i in slab_order(self._index)]

    def _validate(self, keep: bool = False) -> Validated:
        self.check_length()
        read = self._pread_into if self._fd >= 0 else None  # padding by positioned reads [WR-4]
        validated = validate_index(self._index, read, keep=keep)
        self._metadata_cache = validated.metadata
        return validated

    def verify(self, progress: Callable[[int], object] | None = None) -> None:
        """Full validation plus every payload checksum [ENT-10], in increasing data_offset
        order, ties in index order (the order of payload placement).  ``progress``, if given,
        is called with each payload's length once its checksum has been checked.

        A mapped file's payloads are read by positioned reads, not through the map: a file
        truncated meanwhile raises ``TRUNCATED`` instead of faulting (SIGBUS)."""
        self.validate()
        index = self._index
        chunk = memoryview(bytearray(min(_VERIFY_CHUNK, self.file_size))) if self._fd >= 0 else None
        for i in np.argsort(index.entries["data_offset"], kind="stable").tolist():
            info = index.info(index.record(i))
            crc = self._payload_crc(info, chunk)
            if crc != info.data_crc:
                message = f"payload of {info.name!r} is damaged"
                raise checksum_mismatch(
                    "BAD_TENSOR_CHECKSUM", message, info.offset, crc, info.data_crc
                )
            if progress is not None:
                progress(info.length)

    def _payload_crc(self, info: TensorInfo, chunk: memoryview | None) -> int:
        """The CRC-32C of a payload: from the snapshot, or read into ``chunk`` piece by piece."""
        if chunk is None:
            return crc32c(self._index.buf[info.offset : info.offset + info.length])
        crc, at, end = 0, info.offset, info.offset + info.length
        while at < end:
            piece = chunk[: min(len(chunk), end - at)]
            self._preadv_exact([piece], at)
            crc = crc32c(piece, crc)
            at += len(piece)
        return crc

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Release the memory map.  Views handed out keep their own reference and stay valid."""
        self.__dict__.pop("_index", None)  # its section views hold the map
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            if isinstance(self._data, mmap.mmap):
                self._data.close()
        except BufferError:
            pass  # a view still uses it; it is unmapped when the last view goes

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["FormatError", "Reader", "parse_metadata"]
