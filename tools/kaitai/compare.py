"""Compare what the Kaitai parser read from a file with what the reference reader read.

Each comparison is one field; a disagreement is one line naming the field, the Kaitai value
and the reference value.  The reference side is :class:`reference.Reader` after full
validation (header fields, the index sections by :mod:`spec.geometry`, every entry's checked
record); the trailer, which the reader checks and does not keep, is read with the spec's
own construct structure :data:`spec.schema.Trailer` (whose ``Checksum`` checks trailer_crc)
and compared with the header's copies as well [TRL-3].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference.format.reader import Reader
from spec import schema
from spec.constants import SLAB_OFFSET


@dataclass
class Comparison:
    """The disagreements found in one file, and how many values agreed."""

    label: str
    problems: list[str] = field(default_factory=list)
    compared: int = 0

    def same(self, what: str, kaitai: object, reference: object) -> None:
        self.compared += 1
        if kaitai != reference:
            self.problems.append(
                f"{self.label}: {what}: kaitai {kaitai!r}, reference {reference!r}"
            )


def _int(value: Any) -> int:
    """An integer field, also when the parser resolved it to an enum member."""
    return int(value)


def _enum_name(value: Any) -> object:
    """The registry name an enum member stands for; a code outside the enum stays a number."""
    name = getattr(value, "name", None)
    return name.upper() if isinstance(name, str) else value


def compare_file(label: str, parsed: Any, reader: Reader, data: bytes) -> Comparison:
    """Every header, trailer, index and entry field of ``parsed`` against ``reader``."""
    c = Comparison(label)
    _header(c, parsed.header, reader)
    c.same("header_padding", parsed.header_padding, data[schema.HEADER_SIZE : SLAB_OFFSET])
    _trailer(c, parsed.trailer, reader, data)
    _index(c, parsed.index, reader, data)
    return c


def _header(c: Comparison, header: Any, reader: Reader) -> None:
    for name in schema.HEADER_FIELDS:
        c.same(f"header.{name}", getattr(header, name), reader.header[name])


def _trailer(c: Comparison, trailer: Any, reader: Reader, data: bytes) -> None:
    spec_trailer = schema.Trailer.parse(data[-schema.TRAILER_SIZE :])
    for name, value in spec_trailer.fields.value.items():
        if name.startswith("_"):
            continue
        c.same(f"trailer.{name}", getattr(trailer, name), value)
        c.same(f"trailer.{name} (header's copy)", getattr(trailer, name), reader.header[name])
    c.same("trailer.trailer_crc", trailer.trailer_crc, spec_trailer.trailer_crc)
    c.same("trailer.magic", trailer.magic, spec_trailer.magic)


def _section(data: bytes, section: Any) -> bytes:
    return data[section.offset : section.end]


def _index(c: Comparison, index: Any, reader: Reader, data: bytes) -> None:
    ref = reader.index
    g = ref.geometry
    c.same("index.buckets", list(index.buckets), ref.buckets.tolist())
    c.same("index.buckets_padding", index.buckets_padding, _section(data, g.bucket_padding))
    c.same("index.entries (count)", len(index.entries), ref.tensor_count)
    for i, entry in enumerate(index.entries):
        _entry(c, i, entry, reader)
    c.same("index.dims", list(index.dims), ref.dims.tolist())
    c.same("index.names", index.names, _section(data, g.names))
    c.same("index.metadata", index.metadata, _section(data, g.metadata))


def _entry(c: Comparison, i: int, entry: Any, reader: Reader) -> None:
    rec = reader.index.record(i)
    info = reader.index.info(rec)
    for name in schema.ENTRY_FIELDS:
        c.same(f"entries[{i}].{name}", _int(getattr(entry, name)), rec.fields[name])
    c.same(f"entries[{i}].name", entry.name.encode("utf-8"), rec.name)
    c.same(f"entries[{i}].dims", list(entry.dims), list(rec.shape))
    # The enums name the same registry entries as the reference's checked info [ENT-4, LAY-1].
    c.same(f"entries[{i}].dtype (enum)", _enum_name(entry.dtype), info.dtype)
    c.same(f"entries[{i}].layout (enum)", _enum_name(entry.layout), info.layout)
