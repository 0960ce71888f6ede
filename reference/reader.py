"""Reading AWQ-v2 files: :func:`open` returns a :class:`Reader` over a read-only memory map.

Two levels of checking [RD-1, RD-2]:

* opening checks the header and the trailer only (O(1) work), and each lookup
  checks its own bucket and entry [IDX-9, ENT-7] before any view is made;
* :meth:`Reader.validate` (or ``open(path, validate=True)``) checks the whole
  file in the order RD-2 fixes; :meth:`Reader.verify` adds every payload checksum.

Views are zero-copy NumPy arrays of the mapped payload bytes.  The index is read
through a NumPy structured dtype derived from the construct schema
(:data:`spec.schema.ENTRY_DTYPE`), never parsed entry by entry up front.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from reference import rules
from reference.errors import FormatError, TensorNotFoundError, error
from reference.hashing import buckets_of, fnv1a_64_many
from reference.layers import LinearLayer, dequantize_layer, find_layers, read_linear
from reference.metadata import parse_metadata
from reference.v1 import V1Reader, is_safetensors
from spec.algorithms import align_up, bucket_bits_for, bucket_of, crc32c, fnv1a_64
from spec.constants import (
    ALIGNMENT,
    INDEX_SECTION_ALIGN,
    MAGIC,
    MAX_BUCKET_LENGTH,
    MAX_DIMS,
    MAX_METADATA_LENGTH,
    MAX_NAME_LENGTH,
    MAX_TENSORS,
    SLAB_OFFSET,
    TRAILER_MAGIC,
    VERSION_MAJOR,
    VERSION_MINOR,
)
from spec.registry import DTYPE_BY_NAME, KNOWN_REQUIRED_FLAGS
from spec.schema import (
    ENTRY_CRC_OFFSET,
    ENTRY_DTYPE,
    ENTRY_FIELD_OFFSET,
    ENTRY_FIELDS,
    ENTRY_SIZE,
    HEADER_CRC_OFFSET,
    HEADER_DTYPE,
    HEADER_FIELD_OFFSET,
    HEADER_FIELDS,
    HEADER_SIZE,
    TRAILER_CRC_OFFSET,
    TRAILER_DTYPE,
    TRAILER_FIELD_OFFSET,
    TRAILER_SIZE,
)


class _Record(NamedTuple):
    """One entry whose checksum has been checked, with its name and dims."""

    position: int  # index of the entry in the entry array
    offset: int  # file offset of the entry
    fields: dict[str, int]
    name: bytes
    shape: tuple[int, ...]


def _header_value(raw: np.void, name: str) -> Any:
    value = raw[name]
    return value.tobytes() if isinstance(value, np.void) else int(value)


#: read_many_into: the most bytes and buffers one positioned read takes.
_RUN_BYTES = 64 << 20
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
        with self.path.open("rb") as f:
            self.file_size = os.fstat(f.fileno()).st_size
            head = f.read(len(MAGIC))
            if len(head) == len(MAGIC) and head != MAGIC:  # [RD-1] magic first, if there is one
                raise error("BAD_MAGIC", "not an AWQ-v2 file", offset=0,
                            expected=MAGIC.hex(" "), found=head.hex(" "))  # fmt: skip
            snapshot = None
            if copy:  # a private snapshot: checks and views never touch the file again
                f.seek(0)
                snapshot = f.read()
                self.file_size = len(snapshot)
            if self.file_size < HEADER_SIZE + TRAILER_SIZE:  # [FILE-1]
                raise error(
                    "TRUNCATED",
                    "file shorter than a header and a trailer",
                    offset=self.file_size,
                    expected=f">= {HEADER_SIZE + TRAILER_SIZE} bytes",
                    found=self.file_size,
                )
            self._mmap: mmap.mmap | bytes
            if snapshot is not None:
                self._mmap, self._fd = snapshot, -1
            else:
                self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                self._fd = os.dup(f.fileno())  # read_into() reads this same file, not the path
        self._buf: NDArray[np.uint8] = np.frombuffer(self._mmap, dtype=np.uint8)
        try:
            self._open_checks()
            if validate:
                self.validate()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ opening [RD-1]

    def _open_checks(self) -> None:
        buf = self._buf
        raw = np.frombuffer(self._mmap, dtype=HEADER_DTYPE, count=1)[0]  # type: ignore[arg-type]
        h = {name: _header_value(raw, name) for name in HEADER_FIELDS}
        self.header: dict[str, Any] = h
        if h["magic"] != MAGIC:
            raise error(
                "BAD_MAGIC",
                "not an AWQ-v2 file",
                offset=0,
                expected=MAGIC.hex(" "),
                found=h["magic"].hex(" "),
            )
        if h["version_major"] != VERSION_MAJOR:
            raise error(
                "UNSUPPORTED_VERSION",
                "unsupported major version",
                offset=HEADER_FIELD_OFFSET["version_major"],
                expected=VERSION_MAJOR,
                found=h["version_major"],
            )
        crc = crc32c(buf[:HEADER_CRC_OFFSET])
        if crc != h["header_crc"]:
            raise error(
                "BAD_HEADER_CHECKSUM",
                "header checksum mismatch",
                offset=HEADER_CRC_OFFSET,
                expected=f"{crc:08x}",
                found=f"{h['header_crc']:08x}",
            )
        unknown = h["required_flags"] & ~KNOWN_REQUIRED_FLAGS
        if unknown:
            raise error(
                "UNKNOWN_REQUIRED_FLAG",
                "required feature flag not implemented",
                offset=HEADER_FIELD_OFFSET["required_flags"],
                expected="no unknown bits",
                found=f"0x{unknown:x}",
            )
        if h["version_minor"] <= VERSION_MINOR:  # [HDR-5]
            for name in ("reserved0", "reserved1", "reserved2"):
                if any(h[name]):
                    self._bad_header(name, "zero bytes", h[name].hex(" "))
        for name, want in (("alignment", ALIGNMENT), ("slab_offset", SLAB_OFFSET)):
            if h[name] != want:
                self._bad_header(name, want, h[name])
        count = h["tensor_count"]
        if count > MAX_TENSORS:
            raise error(
                "LIMIT_TENSORS",
                "too many tensors",
                offset=HEADER_FIELD_OFFSET["tensor_count"],
                expected=f"<= {MAX_TENSORS}",
                found=count,
            )
        if h["bucket_bits"] != bucket_bits_for(count):  # [IDX-5, LIM-7]
            raise error(
                "BAD_INDEX_LAYOUT",
                "bucket_bits is not the canonical value",
                offset=HEADER_FIELD_OFFSET["bucket_bits"],
                expected=bucket_bits_for(count),
                found=h["bucket_bits"],
            )
        if h["metadata_length"] > MAX_METADATA_LENGTH:
            raise error(
                "LIMIT_METADATA",
                "metadata too long",
                offset=HEADER_FIELD_OFFSET["metadata_length"],
                expected=f"<= {MAX_METADATA_LENGTH}",
                found=h["metadata_length"],
            )
        for name, per_entry in (("names_length", MAX_NAME_LENGTH), ("dims_count", MAX_DIMS)):
            if h[name] > count * per_entry:  # [IDX-10]
                raise error(
                    "BAD_INDEX_LAYOUT",
                    f"{name} larger than tensor_count allows",
                    offset=HEADER_FIELD_OFFSET[name],
                    expected=f"<= {count * per_entry}",
                    found=h[name],
                )
        if self.file_size < h["file_size"]:  # [FILE-1, FILE-2]
            raise error(
                "TRUNCATED",
                "file shorter than its header says",
                offset=self.file_size,
                expected=h["file_size"],
                found=self.file_size,
            )
        if self.file_size > h["file_size"]:
            raise error(
                "FILE_SIZE_MISMATCH",
                "file longer than its header says",
                offset=HEADER_FIELD_OFFSET["file_size"],
                expected=self.file_size,
                found=h["file_size"],
            )
        index_offset, index_length = h["index_offset"], h["index_length"]
        if index_offset % ALIGNMENT or index_offset < SLAB_OFFSET:  # [HDR-3]
            self._bad_header(
                "index_offset", f"a multiple of {ALIGNMENT}, >= {SLAB_OFFSET}", index_offset
            )
        if index_offset + index_length + TRAILER_SIZE != self.file_size:  # [FILE-4, IDX-1]
            raise error(
                "BAD_INDEX_LAYOUT",
                "index does not end where the trailer starts",
                offset=HEADER_FIELD_OFFSET["index_length"],
                expected=self.file_size - TRAILER_SIZE - index_offset,
                found=index_length,
            )
        bucket_slots = (1 << h["bucket_bits"]) + 1
        table_bytes = align_up(4 * bucket_slots, INDEX_SECTION_ALIGN)
        derived = (
            table_bytes
            + ENTRY_SIZE * count
            + 8 * h["dims_count"]
            + h["names_length"]
            + h["metadata_length"]
        )
        if derived != index_length:  # [IDX-3]
            raise error(
                "BAD_INDEX_LAYOUT",
                "index_length disagrees with the section sizes",
                offset=HEADER_FIELD_OFFSET["index_length"],
                expected=derived,
                found=index_length,
            )
        self._check_trailer()
        # Section views: zero-copy, in bounds because IDX-3 and FILE-4 hold.
        self._count = count
        self._bucket_bits = h["bucket_bits"]
        self._buckets_offset = index_offset
        self._entries_offset = index_offset + table_bytes
        self._dims_offset = self._entries_offset + ENTRY_SIZE * count
        self._names_offset = self._dims_offset + 8 * h["dims_count"]
        self._metadata_offset = self._names_offset + h["names_length"]
        mm = self._mmap
        self._buckets = np.frombuffer(mm, "<u4", bucket_slots, index_offset)  # type: ignore[arg-type]
        self._entries = np.frombuffer(mm, ENTRY_DTYPE, count, self._entries_offset)  # type: ignore[arg-type]
        self._dims = np.frombuffer(mm, "<u8", h["dims_count"], self._dims_offset)  # type: ignore[arg-type]
        self._metadata_cache: dict[str, Any] | None = None

    def _bad_header(self, field: str, expected: object, found: object) -> None:
        raise error(
            "BAD_HEADER_FIELD",
            f"header field {field}",
            offset=HEADER_FIELD_OFFSET[field],
            expected=expected,
            found=found,
        )

    def _check_trailer(self) -> None:
        start = self.file_size - TRAILER_SIZE
        raw = np.frombuffer(self._mmap, TRAILER_DTYPE, 1, start)[0]  # type: ignore[arg-type]
        magic = raw["magic"].tobytes()
        if magic != TRAILER_MAGIC:  # [TRL-1]
            raise error(
                "BAD_TRAILER_MAGIC",
                "file does not end with the trailer magic",
                offset=self.file_size - len(TRAILER_MAGIC),
                expected=TRAILER_MAGIC.hex(" "),
                found=magic.hex(" "),
            )
        crc = crc32c(self._buf[start : start + TRAILER_CRC_OFFSET])
        if crc != int(raw["trailer_crc"]):  # [TRL-2]
            raise error(
                "BAD_TRAILER_CHECKSUM",
                "trailer checksum mismatch",
                offset=start + TRAILER_CRC_OFFSET,
                expected=f"{crc:08x}",
                found=f"{int(raw['trailer_crc']):08x}",
            )
        for field in ("index_offset", "index_length", "header_crc"):  # [TRL-3]
            if int(raw[field]) != self.header[field]:
                raise error(
                    "TRAILER_MISMATCH",
                    f"trailer {field} disagrees with the header",
                    offset=start + TRAILER_FIELD_OFFSET[field],
                    expected=self.header[field],
                    found=int(raw[field]),
                )

    # ------------------------------------------------------------------ entries

    def _record(self, i: int) -> _Record:
        """Entry i with its name and dims, bounds- and checksum-checked [ENT-9, LIM-3, LIM-4]."""
        at = self._entries_offset + ENTRY_SIZE * i
        raw = bytes(self._mmap[at : at + ENTRY_SIZE])  # read once: parsed and checksummed [RD-4]
        values = np.frombuffer(raw, ENTRY_DTYPE)[0].item()
        fields = dict(zip(ENTRY_FIELDS, values, strict=True))
        rules.check_dims(fields["ndim"], offset=at + ENTRY_FIELD_OFFSET["ndim"])
        if fields["name_length"] > MAX_NAME_LENGTH:
            raise error(
                "LIMIT_NAME_LENGTH",
                "name too long",
                offset=at + ENTRY_FIELD_OFFSET["name_length"],
                expected=f"<= {MAX_NAME_LENGTH}",
                found=fields["name_length"],
            )
        name_end = fields["name_offset"] + fields["name_length"]
        if name_end > self.header["names_length"]:
            raise error(
                "BAD_ENTRY_FIELD",
                "name outside the name pool",
                offset=at + ENTRY_FIELD_OFFSET["name_offset"],
                expected=f"end <= {self.header['names_length']}",
                found=name_end,
            )
        dims_end = fields["dims_index"] + fields["ndim"]
        if dims_end > self.header["dims_count"]:
            raise error(
                "BAD_ENTRY_FIELD",
                "dims outside the dims section",
                offset=at + ENTRY_FIELD_OFFSET["dims_index"],
                expected=f"end <= {self.header['dims_count']}",
                found=dims_end,
            )
        name_start = self._names_offset + fields["name_offset"]
        name = self._mmap[name_start : name_start + fields["name_length"]]  # type: ignore[index]
        dims_start = self._dims_offset + 8 * fields["dims_index"]
        dims_raw = self._mmap[dims_start : dims_start + 8 * fields["ndim"]]  # type: ignore[index]
        crc = crc32c(raw[:ENTRY_CRC_OFFSET] + name + dims_raw)
        if crc != fields["entry_crc"]:
            raise error(
                "BAD_ENTRY_CHECKSUM",
                f"entry {i} checksum mismatch",
                offset=at + ENTRY_CRC_OFFSET,
                expected=f"{crc:08x}",
                found=f"{fields['entry_crc']:08x}",
            )
        shape = tuple(
            int.from_bytes(dims_raw[j : j + 8], "little") for j in range(0, len(dims_raw), 8)
        )
        return _Record(i, at, fields, name, shape)

    def _info(self, rec: _Record) -> rules.TensorInfo:
        """Every check local to one entry [ENT-1, ENT-4..7, NAME-1, NAME-2, IDX-7, LAY-1..6]."""
        f, at = rec.fields, rec.offset
        if f["flags"]:
            raise error(
                "BAD_ENTRY_FIELD",
                "reserved entry flags set",
                offset=at + ENTRY_FIELD_OFFSET["flags"],
                expected=0,
                found=f["flags"],
            )
        if not rec.name:
            raise error(
                "EMPTY_NAME",
                "empty tensor name",
                offset=at + ENTRY_FIELD_OFFSET["name_length"],
                expected=">= 1",
                found=0,
            )
        try:
            name = rec.name.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(
                "BAD_NAME_UTF8",
                "tensor name is not UTF-8",
                offset=self._names_offset + f["name_offset"] + exc.start,
                expected="UTF-8",
                found=rec.name[exc.start : exc.start + 4].hex(" "),
            ) from exc
        want_hash = fnv1a_64(rec.name)
        if want_hash != f["name_hash"]:
            raise error(
                "BAD_NAME_HASH",
                f"name_hash of {name!r} is wrong",
                offset=at + ENTRY_FIELD_OFFSET["name_hash"],
                expected=f"{want_hash:016x}",
                found=f"{f['name_hash']:016x}",
            )
        dtype = rules.check_payload(
            rec.shape,
            f["dtype"],
            f["data_offset"],
            f["data_length"],
            slab_offset=SLAB_OFFSET,
            slab_end=self.header["index_offset"],
            offset=at,
        )
        layout = rules.check_layout(
            f["layout"], dtype, rec.shape, f["bits"], f["group_size"], f["k"], f["n"], offset=at
        )
        return rules.TensorInfo(
            name,
            dtype,
            rec.shape,
            layout,
            f["data_offset"],
            f["data_length"],
            f["data_crc"],
            f["bits"],
            f["group_size"],
            f["k"],
            f["n"],
        )

    def _bucket_range(self, bucket: int) -> tuple[int, int]:
        lo, hi = int(self._buckets[bucket]), int(self._buckets[bucket + 1])
        if not lo <= hi <= self._count:
            raise error(
                "BAD_BUCKET_TABLE",
                f"bucket {bucket} bounds out of order",
                offset=self._buckets_offset + 4 * bucket,
                expected=f"lo <= hi <= {self._count}",
                found=f"lo={lo} hi={hi}",
            )
        if hi - lo > MAX_BUCKET_LENGTH:
            raise error(
                "LIMIT_BUCKET",
                f"bucket {bucket} too long",
                offset=self._buckets_offset + 4 * bucket,
                expected=f"<= {MAX_BUCKET_LENGTH}",
                found=hi - lo,
            )
        return lo, hi

    def _bucket_of_record(self, rec: _Record) -> int:
        return bucket_of(rec.fields["name_hash"], self._bucket_bits)

    def _find(self, raw: bytes) -> _Record | None:
        """The lookup algorithm [IDX-9]: one bucket, its entries, and its two neighbours."""
        h = fnv1a_64(raw)
        bucket = bucket_of(h, self._bucket_bits)
        lo, hi = self._bucket_range(bucket)
        for i, side in ((lo - 1, -1), (hi, 1)):  # the bucket is exactly the run of its entries
            if 0 <= i < self._count:
                other = self._bucket_of_record(self._record(i))
                if (other - bucket) * side <= 0:
                    raise error(
                        "BAD_BUCKET_TABLE",
                        f"bucket {bucket} does not cover its entries",
                        offset=self._buckets_offset + 4 * bucket,
                        expected=f"entry {i} outside bucket {bucket}",
                        found=other,
                    )
        found = None
        for i in range(lo, hi):
            rec = self._record(i)
            if self._bucket_of_record(rec) != bucket:
                raise error(
                    "BAD_ENTRY_ORDER",
                    f"entry {i} is not in bucket {bucket}",
                    offset=rec.offset,
                    expected=bucket,
                    found=self._bucket_of_record(rec),
                )
            if rec.fields["name_hash"] == h and rec.name == raw:
                found = rec
        return found

    # ------------------------------------------------------------------ public API

    def __len__(self) -> int:
        return self._count

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._lookup(name) is not None

    def _lookup(self, name: str) -> _Record | None:
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return self._find(raw)

    def entry(self, name: str) -> rules.TensorInfo:
        """What the index says about ``name``, after every check local to that entry."""
        rec = self._lookup(name)
        if rec is None:
            raise TensorNotFoundError(name)
        return self._info(rec)

    def tensor(self, name: str) -> NDArray[Any]:
        """Zero-copy, read-only view of the stored payload (BF16 and FP8 as raw integers)."""
        info = self.entry(name)
        return self._view(info)

    def _view(self, info: rules.TensorInfo) -> NDArray[Any]:
        dtype = np.dtype(DTYPE_BY_NAME[info.dtype].numpy)
        count = info.length // dtype.itemsize
        flat = np.frombuffer(self._mmap, dtype, count, info.offset)  # type: ignore[call-overload]
        return flat.reshape(info.shape)

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

    def tensors(self) -> Iterator[tuple[rules.TensorInfo, NDArray[Any]]]:
        """Every ``(entry, zero-copy view)`` in slab order, each entry checked once."""
        for info in self.entries():
            yield info, self._view(info)

    def read_into(self, tensor: str | rules.TensorInfo, out: Any) -> NDArray[Any]:
        """Read one payload into a caller's buffer (preallocated, pinned...) with positioned
        reads instead of the memory map, and return ``out``'s first ``length`` bytes viewed
        with the tensor's dtype and shape.  ``tensor`` is a name, or a ``TensorInfo`` this
        reader returned (from ``entries()``), which skips the lookup.  A file truncated
        meanwhile raises ``TRUNCATED`` here, where a mapped view would fault (SIGBUS)."""
        info = tensor if isinstance(tensor, rules.TensorInfo) else self.entry(tensor)
        target = memoryview(out).cast("B")
        if len(target) < info.length:
            raise ValueError(f"buffer of {len(target)} bytes for a {info.length}-byte payload")
        done = 0
        if isinstance(self._mmap, bytes):  # copy=True: from the snapshot, not the file
            target[: info.length] = self._mmap[info.offset : info.offset + info.length]
            done = info.length
        while done < info.length:
            got = os.preadv(self._fd, [target[done : info.length]], info.offset + done)
            if got == 0:
                raise error("TRUNCATED", f"file ended inside the payload of {info.name!r}",
                            offset=info.offset + done, expected=info.offset + info.length,
                            found=info.offset + done)  # fmt: skip
            done += got
        dtype = np.dtype(DTYPE_BY_NAME[info.dtype].numpy)
        return np.frombuffer(target[: info.length], dtype).reshape(info.shape)

    def read_many_into(
        self, items: Iterable[tuple[str | rules.TensorInfo, Any]]
    ) -> list[NDArray[Any]]:
        """``read_into`` for many tensors at once, returning the arrays in the order given.

        Payloads that follow one another in the slab are read together: one ``preadv`` per
        run of up to 64 MiB, the zero padding between them read into a scratch block, so a
        loader that wants the whole model reads the file front to back in large requests,
        as fast as a plain sequential read, and each payload still lands in its own buffer.
        """
        jobs = []
        for tensor, out in items:
            info = tensor if isinstance(tensor, rules.TensorInfo) else self.entry(tensor)
            target = memoryview(out).cast("B")
            if len(target) < info.length:
                raise ValueError(f"buffer of {len(target)} bytes for a {info.length}-byte payload")
            jobs.append((info, target[: info.length]))
        if isinstance(self._mmap, bytes):  # copy=True: from the snapshot, not the file
            for info, target in jobs:
                target[:] = self._mmap[info.offset : info.offset + info.length]
        else:
            scratch = memoryview(bytearray(ALIGNMENT))
            run: list[memoryview] = []
            run_start = run_end = 0
            for info, target in sorted(
                (job for job in jobs if job[0].length), key=lambda job: job[0].offset
            ):
                gap = info.offset - run_end
                if run and (gap < 0 or gap >= ALIGNMENT or run_end - run_start > _RUN_BYTES
                            or len(run) + 2 > _IOV_MAX):  # fmt: skip
                    self._preadv_exact(run, run_start)
                    run = []
                if not run:
                    run_start = run_end = info.offset
                elif gap:
                    run.append(scratch[:gap])
                run.append(target)
                run_end = info.offset + info.length
            if run:
                self._preadv_exact(run, run_start)
        return [
            np.frombuffer(target, np.dtype(DTYPE_BY_NAME[info.dtype].numpy)).reshape(info.shape)
            for info, target in jobs
        ]

    def _preadv_exact(self, views: list[memoryview], offset: int) -> None:
        """Fill every view from ``offset`` on, across short reads."""
        pending, at = list(views), offset
        while pending:
            got = os.preadv(self._fd, pending, at)
            if got == 0:
                raise error("TRUNCATED", "file ended inside a payload", offset=at,
                            expected=offset + sum(len(v) for v in views), found=at)  # fmt: skip
            at += got
            while pending and got >= len(pending[0]):
                got -= len(pending.pop(0))
            if got:
                pending[0] = pending[0][got:]

    def names(self) -> list[str]:
        """Every tensor name, in slab order (then by name for empty payloads)."""
        infos = [self._info(self._record(i)) for i in range(self._count)]
        return [info.name for info in sorted(infos, key=lambda t: (t.offset, t.name))]

    def entries(self) -> list[rules.TensorInfo]:
        """Every entry, in slab order."""
        infos = [self._info(self._record(i)) for i in range(self._count)]
        return sorted(infos, key=lambda t: (t.offset, t.name))

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata JSON object ({} when the file has none) [META-1..4]."""
        if self._metadata_cache is None:
            self._metadata_cache = self._parse_metadata()
        return self._metadata_cache

    @property
    def version(self) -> tuple[int, int]:
        return self.header["version_major"], self.header["version_minor"]

    def _parse_metadata(self) -> dict[str, Any]:
        start, length = self._metadata_offset, self.header["metadata_length"]
        raw = self._mmap[start : start + length]  # type: ignore[index]
        crc = crc32c(raw)
        if crc != self.header["metadata_crc"]:
            raise error(
                "BAD_METADATA_CHECKSUM",
                "metadata checksum mismatch",
                offset=HEADER_FIELD_OFFSET["metadata_crc"],
                expected=f"{crc:08x}",
                found=f"{self.header['metadata_crc']:08x}",
            )
        if not raw:
            return {}
        return parse_metadata(raw, offset=start)

    # ------------------------------------------------------------------ validation [RD-2]

    def validate(self) -> None:
        """Check everything the spec requires, in the order RD-2 fixes."""
        from reference.validate import validate_file

        validate_file(self)

    def verify(self) -> None:
        """Full validation plus every payload checksum [ENT-10]."""
        self.validate()
        for info in self.entries():
            crc = crc32c(self._buf[info.offset : info.offset + info.length])
            if crc != info.data_crc:
                raise error(
                    "BAD_TENSOR_CHECKSUM",
                    f"payload of {info.name!r} is damaged",
                    offset=info.offset,
                    expected=f"{info.data_crc:08x}",
                    found=f"{crc:08x}",
                )

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Release the memory map.  Views handed out keep their own reference and stay valid."""
        self._buf = np.empty(0, np.uint8)
        for name in ("_buckets", "_entries", "_dims"):
            if hasattr(self, name):
                delattr(self, name)
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            if isinstance(self._mmap, mmap.mmap):
                self._mmap.close()
        except BufferError:
            pass  # a view still uses it; it is unmapped when the last view goes

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # helpers for the validator ------------------------------------------------

    def _all_hashes(self) -> NDArray[np.uint64]:
        names = np.frombuffer(self._mmap, np.uint8, self.header["names_length"], self._names_offset)  # type: ignore[arg-type]
        return fnv1a_64_many(names, self._entries["name_offset"], self._entries["name_length"])

    def _all_buckets(self) -> NDArray[np.uint64]:
        return buckets_of(self._entries["name_hash"], self._bucket_bits)


def open(  # noqa: A001
    path: str | os.PathLike[str], *, validate: bool = False, copy: bool = False
) -> Reader | V1Reader:
    """Open an AWQ-v2 file, or an AWQ v1 checkpoint (file or folder) through the same API.

    ``validate=True`` runs full validation before returning.  ``copy=True`` reads an AWQ-v2
    file into private memory instead of mapping it (see :class:`Reader`: a mapped file
    truncated meanwhile kills the process with SIGBUS); AWQ v1 checkpoints ignore it.  A file
    is AWQ-v2 when it starts with the magic; a folder, or a file that starts like safetensors,
    is read as AWQ v1 [V1-1].
    """
    p = Path(path)
    if p.is_dir():
        return V1Reader(p)
    with p.open("rb") as f:
        head = f.read(len(MAGIC))
    if head != MAGIC and is_safetensors(p):
        return V1Reader(p)
    return Reader(p, validate=validate, copy=copy)


__all__ = ["FormatError", "Reader", "open", "parse_metadata"]
