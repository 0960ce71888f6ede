"""The index of an AWQ-v2 file, parsed and checked from its bytes: no file handle, no I/O.

:class:`Index` takes the whole file as a buffer (a memory map or ``bytes``) and runs the
opening checks [RD-1]: header, sizes, index layout, trailer.  After that it answers the
questions the reader, the validator and the tools ask, each with the checks local to it:

* :meth:`Index.bucket_range` - the entries of one hash bucket [IDX-5, LIM-6];
* :meth:`Index.record` - entry ``i`` with its name and dims, checksum-checked [ENT-9];
* :meth:`Index.info` - every rule local to one entry, as a :class:`TensorInfo` [ENT-*, LAY-*];
* :meth:`Index.find` - the lookup algorithm [IDX-9];
* :meth:`Index.view` - the zero-copy payload array of an entry;
* :meth:`Index.metadata` - the checked, parsed metadata object [META-*].

Where the sections lie comes from :func:`spec.geometry.geometry_of`, what the entry checksum
covers from :func:`spec.geometry.entry_checksum`.
"""

from __future__ import annotations

import mmap
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from reference.format import rules
from reference.format.entrytable import checked_infos
from reference.format.metadata import parse_metadata
from reference.ground.errors import checksum_mismatch, field_error, over_limit
from reference.quant.dtypes import numpy_dtype
from spec.algorithms import bucket_bits_for, bucket_of, crc32c, fnv1a_64
from spec.constants import (
    ALIGNMENT,
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
from spec.geometry import (
    BUCKET_BOUND_SIZE,
    DIM_SIZE,
    IndexGeometry,
    entry_checksum,
    geometry_of,
)
from spec.registry import KNOWN_REQUIRED_FLAGS
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

#: The buffers an index reads: a memory map of the file, or the file's bytes.
Buffer = mmap.mmap | bytes


class Record(NamedTuple):
    """One entry whose bounds and checksum have been checked, with its name and dims."""

    position: int  # index of the entry in the entry array
    offset: int  # file offset of the entry record
    fields: dict[str, int]
    name: bytes
    shape: tuple[int, ...]


def _header_value(raw: np.void, name: str) -> Any:
    value = raw[name]
    return value.tobytes() if isinstance(value, np.void) else int(value)


def _header_error(
    code: str, message: str, field: str, expected: object, found: object
) -> Exception:
    """An error about one header field, at that field's offset."""
    return field_error(code, message, HEADER_FIELD_OFFSET[field], expected, found)


def _bad_header(field: str, expected: object, found: object) -> Exception:
    """A header field that must hold one value and does not [HDR-2, HDR-3, HDR-5]."""
    return _header_error("BAD_HEADER_FIELD", f"header field {field}", field, expected, found)


def _bad_layout(message: str, field: str, expected: object, found: object) -> Exception:
    """Header sizes that do not describe the index that is there [IDX-1..3, IDX-5, IDX-10]."""
    return _header_error("BAD_INDEX_LAYOUT", message, field, expected, found)


def _bad_magic(found: bytes) -> Exception:
    return field_error("BAD_MAGIC", "not an AWQ-v2 file", 0, MAGIC.hex(" "), found.hex(" "))


class Index:
    """The header, trailer, bucket table and entries of one AWQ-v2 file, read from ``data``.

    Construction runs the opening checks [RD-1] and raises the first :class:`FormatError`;
    nothing else is read until asked.  Every answer re-reads and re-checks the entries it
    uses [RD-4], so a buffer that changes underneath cannot make it skip a check.
    """

    def __init__(self, data: Buffer) -> None:
        self.data = data
        self.file_size = len(data)
        head = bytes(data[: len(MAGIC)])
        if head != MAGIC[: len(head)]:  # [HDR-1, RD-1] the first min(8, size) bytes, first
            raise _bad_magic(head)
        smallest = HEADER_SIZE + TRAILER_SIZE
        if self.file_size < smallest:  # [FILE-1]
            raise field_error(
                "TRUNCATED",
                "file shorter than a header and a trailer",
                self.file_size,
                f">= {smallest} bytes",
                self.file_size,
            )
        self.buf: NDArray[np.uint8] = np.frombuffer(data, dtype=np.uint8)
        raw = np.frombuffer(data, HEADER_DTYPE, 1)[0]  # type: ignore[call-overload]
        self.header: dict[str, Any] = {name: _header_value(raw, name) for name in HEADER_FIELDS}
        self._check_header()
        self._check_sizes()
        self.geometry: IndexGeometry = geometry_of(self.header)
        self._check_index_layout()
        self._check_trailer()
        self.tensor_count: int = self.header["tensor_count"]
        self.bucket_bits: int = self.header["bucket_bits"]
        g = self.geometry  # section views: zero-copy, in bounds because IDX-3 and FILE-4 hold
        self.buckets = _array(data, "<u4", g.bucket_slots, g.buckets.offset)
        self.entries = _array(data, ENTRY_DTYPE, self.tensor_count, g.entries.offset)
        self.dims = _array(data, "<u8", self.header["dims_count"], g.dims.offset)

    # ------------------------------------------------------------------ opening [RD-1]

    def _check_header(self) -> None:
        """Magic, version, checksum, flags, reserved and fixed fields [HDR-*, VER-*]."""
        h = self.header
        if h["magic"] != MAGIC:  # [HDR-1]
            raise _bad_magic(h["magic"])
        if h["version_major"] != VERSION_MAJOR:  # [VER-2]
            raise _header_error(
                "UNSUPPORTED_VERSION",
                "unsupported major version",
                "version_major",
                VERSION_MAJOR,
                h["version_major"],
            )
        crc = crc32c(self.buf[:HEADER_CRC_OFFSET])
        if crc != h["header_crc"]:  # [HDR-4]
            raise checksum_mismatch(
                "BAD_HEADER_CHECKSUM",
                "header checksum mismatch",
                HEADER_CRC_OFFSET,
                crc,
                h["header_crc"],
            )
        unknown = h["required_flags"] & ~KNOWN_REQUIRED_FLAGS
        if unknown:  # [VER-3]
            raise _header_error(
                "UNKNOWN_REQUIRED_FLAG",
                "required feature flag not implemented",
                "required_flags",
                "no unknown bits",
                f"0x{unknown:x}",
            )
        for name in ("reserved0", "reserved1", "reserved2"):
            if h["version_minor"] <= VERSION_MINOR and any(h[name]):  # [HDR-5]
                raise _bad_header(name, "zero bytes", h[name].hex(" "))
        for name, want in (("alignment", ALIGNMENT), ("slab_offset", SLAB_OFFSET)):
            if h[name] != want:  # [HDR-2]
                raise _bad_header(name, want, h[name])

    def _check_sizes(self) -> None:
        """Counts within the limits, and the file exactly as long as the header says."""
        h, count = self.header, self.header["tensor_count"]
        if count > MAX_TENSORS:  # [LIM-2]
            at = HEADER_FIELD_OFFSET["tensor_count"]
            raise over_limit("LIMIT_TENSORS", "too many tensors", at, MAX_TENSORS, count)
        if h["bucket_bits"] != bucket_bits_for(count):  # [IDX-5, LIM-7]
            message = "bucket_bits is not the canonical value"
            raise _bad_layout(message, "bucket_bits", bucket_bits_for(count), h["bucket_bits"])
        if h["metadata_length"] > MAX_METADATA_LENGTH:  # [LIM-5]
            at, length = HEADER_FIELD_OFFSET["metadata_length"], h["metadata_length"]
            raise over_limit("LIMIT_METADATA", "metadata too long", at, MAX_METADATA_LENGTH, length)
        for name, per_entry in (("names_length", MAX_NAME_LENGTH), ("dims_count", MAX_DIMS)):
            if h[name] > count * per_entry:  # [IDX-10]
                message = f"{name} larger than tensor_count allows"
                raise _bad_layout(message, name, f"<= {count * per_entry}", h[name])
        size, said = self.file_size, h["file_size"]
        if size < said:  # [FILE-1, FILE-2]
            raise field_error("TRUNCATED", "file shorter than its header says", size, said, size)
        if size > said:
            raise _header_error(
                "FILE_SIZE_MISMATCH", "file longer than its header says", "file_size", size, said
            )

    def _check_index_layout(self) -> None:
        """The index starts on a boundary in the file and its sections fill it [HDR-3, IDX-3]."""
        index_offset, index_length = self.header["index_offset"], self.header["index_length"]
        if index_offset % ALIGNMENT or index_offset < SLAB_OFFSET:  # [HDR-3]
            expected = f"a multiple of {ALIGNMENT}, >= {SLAB_OFFSET}"
            raise _bad_header("index_offset", expected, index_offset)
        room = self.file_size - TRAILER_SIZE - index_offset
        if index_length != room:  # [FILE-4, IDX-1]
            message = "index does not end where the trailer starts"
            if room < 0:  # no length fits: index_offset is past the trailer's start
                message = "index_offset is past the trailer's start"
                room_text = f"index_offset <= file_size - {TRAILER_SIZE} = {room + index_offset}"
                raise _bad_layout(message, "index_length", room_text, index_length)
            raise _bad_layout(message, "index_length", room, index_length)
        if index_length != self.geometry.length:  # [IDX-3]
            message = "index_length disagrees with the section sizes"
            raise _bad_layout(message, "index_length", self.geometry.length, index_length)

    def _check_trailer(self) -> None:
        """Trailer magic, checksum, and agreement with the header [TRL-1..3]."""
        start = self.file_size - TRAILER_SIZE
        raw = np.frombuffer(self.data, TRAILER_DTYPE, 1, start)[0]  # type: ignore[call-overload]
        magic = raw["magic"].tobytes()
        if magic != TRAILER_MAGIC:  # [TRL-1]
            raise field_error(
                "BAD_TRAILER_MAGIC",
                "file does not end with the trailer magic",
                self.file_size - len(TRAILER_MAGIC),
                TRAILER_MAGIC.hex(" "),
                magic.hex(" "),
            )
        crc, stored = crc32c(self.buf[start : start + TRAILER_CRC_OFFSET]), int(raw["trailer_crc"])
        if crc != stored:  # [TRL-2]
            raise checksum_mismatch(
                "BAD_TRAILER_CHECKSUM",
                "trailer checksum mismatch",
                start + TRAILER_CRC_OFFSET,
                crc,
                stored,
            )
        for field in ("index_offset", "index_length", "header_crc"):  # [TRL-3]
            if int(raw[field]) != self.header[field]:
                raise field_error(
                    "TRAILER_MISMATCH",
                    f"trailer {field} disagrees with the header",
                    start + TRAILER_FIELD_OFFSET[field],
                    self.header[field],
                    int(raw[field]),
                )

    # ------------------------------------------------------------------ entries

    def record(self, i: int) -> Record:
        """Entry ``i`` with its name and dims, bounds and checksum checked [ENT-9, LIM-3, LIM-4]."""
        at = self.geometry.entry_offset(i)
        raw = bytes(self.data[at : at + ENTRY_SIZE])  # read once: parsed and checksummed [RD-4]
        f = dict(zip(ENTRY_FIELDS, np.frombuffer(raw, ENTRY_DTYPE)[0].item(), strict=True))
        rules.check_dims(f["ndim"], offset=at + ENTRY_FIELD_OFFSET["ndim"])
        if f["name_length"] > MAX_NAME_LENGTH:  # [LIM-3]
            where = at + ENTRY_FIELD_OFFSET["name_length"]
            raise over_limit(
                "LIMIT_NAME_LENGTH", "name too long", where, MAX_NAME_LENGTH, f["name_length"]
            )
        self._check_within(
            at,
            "name_offset",
            f["name_offset"],
            f["name_length"],
            "names_length",
            "name outside the name pool",
        )
        self._check_within(
            at,
            "dims_index",
            f["dims_index"],
            f["ndim"],
            "dims_count",
            "dims outside the dims section",
        )
        name_start = self.geometry.names.offset + f["name_offset"]
        name = bytes(self.data[name_start : name_start + f["name_length"]])
        dims_start = self.geometry.dim_offset(f["dims_index"])
        dims = bytes(self.data[dims_start : dims_start + DIM_SIZE * f["ndim"]])
        crc = entry_checksum(raw, name, dims)
        if crc != f["entry_crc"]:  # [ENT-9]
            raise checksum_mismatch(
                "BAD_ENTRY_CHECKSUM",
                f"entry {i} checksum mismatch",
                at + ENTRY_CRC_OFFSET,
                crc,
                f["entry_crc"],
            )
        shape = tuple(int(d) for d in np.frombuffer(dims, "<u8"))
        return Record(i, at, f, name, shape)

    def _check_within(
        self, at: int, field: str, start: int, count: int, total: str, message: str
    ) -> None:
        """Entry field ``field`` (``start``) plus ``count`` stays inside header ``total``."""
        if start + count > self.header[total]:
            where, limit = at + ENTRY_FIELD_OFFSET[field], self.header[total]
            raise field_error("BAD_ENTRY_FIELD", message, where, f"end <= {limit}", start + count)

    def info(self, rec: Record) -> rules.TensorInfo:
        """Every check local to one entry [ENT-1, ENT-4..7, NAME-1, NAME-2, IDX-7, LAY-1..6]."""
        f, at = rec.fields, rec.offset
        if f["flags"]:  # [ENT-1]
            where = at + ENTRY_FIELD_OFFSET["flags"]
            raise field_error("BAD_ENTRY_FIELD", "reserved entry flags set", where, 0, f["flags"])
        if not rec.name:  # [NAME-1]
            where = at + ENTRY_FIELD_OFFSET["name_length"]
            raise field_error("EMPTY_NAME", "empty tensor name", where, ">= 1", 0)
        name = self._decode_name(rec)
        want_hash = fnv1a_64(rec.name)
        if want_hash != f["name_hash"]:  # [IDX-7]
            raise field_error(
                "BAD_NAME_HASH",
                f"name_hash of {name!r} is wrong",
                at + ENTRY_FIELD_OFFSET["name_hash"],
                f"{want_hash:016x}",
                f"{f['name_hash']:016x}",
            )
        slab_end = self.header["index_offset"]
        dtype = rules.check_payload(
            rec.shape,
            f["dtype"],
            f["data_offset"],
            f["data_length"],
            slab_offset=SLAB_OFFSET,
            slab_end=slab_end,
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

    def _decode_name(self, rec: Record) -> str:
        """The name as text [NAME-2]; the error points at the first byte that is not UTF-8."""
        try:
            return rec.name.decode("utf-8")
        except UnicodeDecodeError as exc:
            at = self.geometry.names.offset + rec.fields["name_offset"] + exc.start
            found = rec.name[exc.start : exc.start + 4].hex(" ")
            raise field_error(
                "BAD_NAME_UTF8", "tensor name is not UTF-8", at, "UTF-8", found
            ) from exc

    def infos(self) -> list[rules.TensorInfo]:
        """Every entry's info, in index order: the whole table checked at once where every
        entry passes (:mod:`reference.format.entrytable`), else entry by entry, which raises the
        first failure."""
        infos = checked_infos(*self.entry_sections(), slab_end=self.header["index_offset"])
        if infos is None:
            infos = [self.info(self.record(i)) for i in range(self.tensor_count)]
        return infos

    def entry_sections(self) -> tuple[bytes, bytes, bytes]:
        """The entries, names and dims sections, each copied once [RD-4]."""
        g = self.geometry
        entries, names, dims = (
            bytes(self.data[s.offset : s.end]) for s in (g.entries, g.names, g.dims)
        )
        return entries, names, dims

    # ------------------------------------------------------------------ lookup [IDX-9]

    def bucket_of(self, rec: Record) -> int:
        """The bucket an entry's stored name hash belongs to [IDX-8]."""
        return bucket_of(rec.fields["name_hash"], self.bucket_bits)

    def bucket_bound_offset(self, bucket: int) -> int:
        """File offset of the bucket table's bound ``bucket``."""
        return self.geometry.buckets.offset + BUCKET_BOUND_SIZE * bucket

    def bucket_range(self, bucket: int) -> tuple[int, int]:
        """``[lo, hi)``: the entries of one bucket, with its bounds checked [IDX-5, LIM-6]."""
        lo, hi = int(self.buckets[bucket]), int(self.buckets[bucket + 1])
        at = self.bucket_bound_offset(bucket)
        if not lo <= hi <= self.tensor_count:
            raise field_error(
                "BAD_BUCKET_TABLE",
                f"bucket {bucket} bounds out of order",
                at,
                f"lo <= hi <= {self.tensor_count}",
                f"lo={lo} hi={hi}",
            )
        if hi - lo > MAX_BUCKET_LENGTH:
            raise over_limit(
                "LIMIT_BUCKET", f"bucket {bucket} too long", at, MAX_BUCKET_LENGTH, hi - lo
            )
        return lo, hi

    def find(self, raw: bytes) -> Record | None:
        """The lookup algorithm [IDX-9]: one bucket, its entries, and its two neighbours."""
        h = fnv1a_64(raw)
        bucket = bucket_of(h, self.bucket_bits)
        lo, hi = self.bucket_range(bucket)
        for i, side in ((lo - 1, -1), (hi, 1)):  # the bucket is exactly the run of its entries
            other = self.bucket_of(self.record(i)) if 0 <= i < self.tensor_count else None
            if other is not None and (other - bucket) * side <= 0:
                at = self.bucket_bound_offset(bucket)
                message = f"bucket {bucket} does not cover its entries"
                raise field_error(
                    "BAD_BUCKET_TABLE", message, at, f"entry {i} outside bucket {bucket}", other
                )
        found = None
        for i in range(lo, hi):
            rec = self.record(i)
            other = self.bucket_of(rec)
            if other != bucket:
                message = f"entry {i} is not in bucket {bucket}"
                raise field_error("BAD_ENTRY_ORDER", message, rec.offset, bucket, other)
            if rec.fields["name_hash"] == h and rec.name == raw:
                found = rec
        return found

    def lookup(self, name: str) -> Record | None:
        """:meth:`find` for a name given as text; None for a name no file can hold."""
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return self.find(raw)

    # ------------------------------------------------------------------ payloads, metadata

    def view(self, info: rules.TensorInfo) -> NDArray[Any]:
        """Zero-copy, read-only array of a checked entry's payload, of the NumPy type
        :mod:`reference.quant.dtypes` gives its dtype (``ml_dtypes`` ones for BF16 and FP8)."""
        dtype = numpy_dtype(info.dtype)
        return _array(self.data, dtype, info.length // dtype.itemsize, info.offset).reshape(
            info.shape
        )

    def metadata(self) -> dict[str, Any]:
        """The metadata JSON object ({} when there is none), checksum-checked [META-1..6]."""
        section = self.geometry.metadata
        raw = bytes(self.data[section.offset : section.end])
        crc, stored = crc32c(raw), self.header["metadata_crc"]
        if crc != stored:  # [META-4]
            at = section.offset  # the bytes it covers, as for the index and payloads [RD-7]
            raise checksum_mismatch(
                "BAD_METADATA_CHECKSUM", "metadata checksum mismatch", at, crc, stored
            )
        return parse_metadata(raw, offset=section.offset) if raw else {}


def _array(data: Buffer, dtype: Any, count: int, offset: int) -> NDArray[Any]:
    """A zero-copy array over ``count`` items of ``data`` from ``offset``."""
    return np.frombuffer(data, dtype, count, offset)  # type: ignore[call-overload, no-any-return]
