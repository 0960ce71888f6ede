"""Site parts generated from the reference and the suite: ``python -m tools.sitegen``.

The spec's own tables come from :mod:`tools.docgen` and :mod:`tools.codec_tables`, which
import only ``spec``.  What is generated here needs the reference and the suite as well
(``spec`` <- ``reference`` <- ``conformance`` <- ``tools``):

``site-vectors``
    the vector catalogue, from ``conformance/manifest.json``;
``site-cli MODULE``
    the command-line reference of ``reference.dump``, ``reference.convert`` or
    ``conformance.run``, from the module's own ``build_parser()``;
``site-download``
    the links to the downloadable suite (``docs/assets/awq2-conformance-<version>.tar.xz``,
    :mod:`tools.suite_archive`) and the commands that check, unpack and run it, for the
    manifest's ``suite_version``;
``site-tp-rules``
    the rule tables of ``awq2-convert --tp`` (:mod:`reference.sets.tpsplit`);
``site-served``
    the "What is served" table of the vLLM page, from the breadth matrix's verdicts
    (``docs/assets/served.json``);
``site-walkthrough``
    a real vector, byte by byte: hex dumps of every region, each field annotated from the
    construct schema (:mod:`spec.schema`), and every checksum recomputed.

Regions use the markers of :mod:`tools.docgen` (``<!-- BEGIN GENERATED: site-... -->`` ...
``<!-- END GENERATED -->``); docgen leaves ``site-*`` regions alone.  The byte-map picture
``docs/assets/file-map.svg`` (the home page's and the format chapter's), ``sets.svg`` (the
file sets chapter's: a split set against a rank set) and ``marlin-vs-awq.svg`` (the codec
chapter's: AWQ v1 packing against the Marlin tiling, drawn from :mod:`tools.codec_tables`'
maps) are generated whole (:data:`PICTURES`).

``python -m tools.sitegen`` rewrites what is stale; ``--check`` writes nothing and exits 1,
naming each stale file (``python -m tools.regen`` runs it with every other generator).
``tests/test_site.py`` runs the check.  The output depends only on the
repository, so it is the same on every machine.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import struct
import sys
from collections.abc import Callable, Sequence
from html import escape as html_escape
from pathlib import Path
from typing import Any

import numpy as np

from reference.dump import hexdump
from reference.sets.setwriter import member_name, rank_member_name
from reference.sets.tpsplit import ARCHITECTURES, FAMILIES
from spec import schema
from spec.algorithms import bucket_of, crc32c, fnv1a_64
from spec.constants import ALIGNMENT, SET_MANIFEST, SLAB_OFFSET
from spec.geometry import entry_checksum, geometry_of, pack_dims
from spec.marlin import AWQ_ORDER, TILE_K, TILE_N
from spec.registry import DTYPE_BY_CODE, LAYOUT_BY_CODE
from tools import DOCS, ROOT, codec_tables, docgen

MANIFEST = ROOT / "conformance" / "manifest.json"
FILE_MAP_SVG = DOCS / "assets" / "file-map.svg"
#: The vector the walkthrough explains: one small tensor and a metadata document.
WALKTHROUGH_VECTOR = "y_metadata_nested"
#: The modules whose parsers the CLI reference renders.
CLI_MODULES = ("reference.dump", "reference.convert", "reference.metaedit", "conformance.run")

BEGIN_RE = re.compile(r"^<!-- BEGIN GENERATED: (?P<kind>site-[a-z-]+)(?: (?P<arg>[^ >]+))? -->$")
END_LINE = "<!-- END GENERATED -->"


class SitegenError(ValueError):
    """A malformed region: the message names the file and the line."""


# ------------------------------------------------------------------------------ helpers


def _format_md(page: Path) -> str:
    """Relative path from ``page`` to ``docs/spec/format.md``."""
    up = [".."] * len(page.parent.relative_to(DOCS).parts)
    return Path(*up, "spec", "format.md").as_posix()


def _spec_link(page: Path, anchor: str) -> str:
    """Relative link from ``page`` to ``docs/spec/format.md#anchor``."""
    return f"{_format_md(page)}#{anchor}"


def _req_links(page: Path, ids: Sequence[str]) -> str:
    """Links to each requirement on the page that states it (sets.md for SET-, ...)."""
    return ", ".join(docgen.requirement_link(rid, page) for rid in ids)


def _cell(text: str) -> str:
    """Table-safe text: pipes escaped, no line breaks."""
    return text.replace("|", "\\|").replace("\n", " ")


def _load_manifest() -> dict[str, Any]:
    return dict(json.loads(MANIFEST.read_text(encoding="utf-8")))


# ------------------------------------------------------------------------------ vectors

_CLASSES = (
    ("accept", "Must accept (`y_`)", "a conforming reader opens, validates and verifies the file"),
    ("reject", "Must reject (`n_`)", "a conforming reader rejects the file with this code"),
    ("either", "Either (`i_`)", "optional features: accept, or reject with one of these codes"),
)


def _vector_size(v: dict[str, Any]) -> str:
    """A file's size, or a set's: its files' total and their count."""
    if "file" in v:
        return f"{v['size']:,}"
    files = v["folder_files"]
    return f"{sum(f['size'] for f in files):,} in {len(files)} files"


def vectors_region(page: Path, _arg: str | None) -> str:
    manifest = _load_manifest()
    vectors = manifest["vectors"]
    counts = {cls: sum(v["expect"] == cls for v in vectors) for cls, _, _ in _CLASSES}
    out = [
        f"{len(vectors)} vectors, suite version {manifest['suite_version']}, for spec version "
        f"{manifest['spec_version']}: "
        f"{counts['accept']} must-accept, {counts['reject']} must-reject, "
        f"{counts['either']} either. *Level* is the reader operation at which the failure "
        "is due (`open`, `validate` or `verify`, see [reading]"
        f"({_spec_link(page, 'reading')})); a reader may report it earlier.",
        "",
    ]
    for cls, title, what in _CLASSES:
        out += [f"### {title}", "", f"{what.capitalize()}.", ""]
        if cls == "accept":
            out += ["| id | size (bytes) | requirements | description |", "|---|---:|---|---|"]
        else:
            out += [
                "| id | expected code | level | requirements | description |",
                "|---|---|---|---|---|",
            ]
        for v in vectors:
            if v["expect"] != cls:
                continue
            reqs = _req_links(page, v["requirements"])
            desc = _cell(v["description"])
            vid = f'<a id="{v["id"]}"></a>`{v["id"]}`'
            if cls == "accept":
                out.append(f"| {vid} | {_vector_size(v)} | {reqs} | {desc} |")
            else:
                codes = [v["error_code"]] if cls == "reject" else v.get("either_codes", [])
                code = " or ".join(f"`{c}`" for c in codes)
                level = f"`{v['check_level']}`" if v.get("check_level") else "any"
                out.append(f"| {vid} | {code} | {level} | {reqs} | {desc} |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


# ------------------------------------------------------------------------------ CLI


def _parser(module: str) -> argparse.ArgumentParser:
    if module not in CLI_MODULES:
        raise SitegenError(f"no CLI reference for {module!r}; known: {', '.join(CLI_MODULES)}")
    build = importlib.import_module(module).build_parser
    parser: argparse.ArgumentParser = build()
    return parser


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _default(value: Any) -> str:
    if isinstance(value, Path):
        try:
            return f"`{value.relative_to(ROOT).as_posix()}`"
        except ValueError:
            return f"`{value}`"
    return f"`{value}`"


def cli_region(page: Path, arg: str | None) -> str:
    if arg is None:
        raise SitegenError("site-cli needs a module name")
    parser = _parser(arg)
    out = ["```text", _usage(parser), "```", ""]
    if parser.description:
        out += [parser.description, ""]
    out += ["| argument | meaning | default |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            names, meaning = "`-h`, `--help`", "print the help and exit 0"
        elif action.option_strings:
            metavar = ""
            if action.nargs != 0:
                metavar = " " + str(action.metavar or action.dest.upper())
            names = ", ".join(f"`{opt}{metavar}`" for opt in action.option_strings)
            meaning = action.help or ""
        else:
            names = f"`{action.metavar or action.dest}`"
            meaning = (action.help or "") + (" (optional)" if action.nargs == "?" else "")
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) else _default(default)
        if isinstance(action, argparse._AppendAction) and default is None:
            shown = "repeatable"
        out.append(f"| {_cell(names)} | {_cell(meaning)} | {shown} |")
    if parser.epilog:
        out += ["", parser.epilog[0].upper() + parser.epilog[1:] + "."]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------ walkthrough


def _dump(data: bytes, start: int) -> list[str]:
    return ["```text", *hexdump(data, start), "```"]


def _value(name: str, raw: bytes, type_name: str) -> str:
    if type_name.startswith("bytes"):
        if name == "magic":
            return f"`{raw!r}`"
        return "all zero" if not any(raw) else f"`{raw.hex(' ')}`"
    fmt = {"u8": "<B", "u16": "<H", "u32": "<I", "u64": "<Q", "i32": "<i"}[type_name]
    (value,) = struct.unpack(fmt, raw)
    if name.endswith("_crc") or name in ("name_hash", "required_flags", "optional_flags"):
        return f"`0x{value:0{2 * len(raw)}X}`"
    if name in ("slab_offset", "index_offset", "data_offset", "alignment") and value:
        return f"{value:,} (`0x{value:X}`)"
    if name == "dtype" and value in DTYPE_BY_CODE:
        return f"{value} (`{DTYPE_BY_CODE[value].name}`)"
    if name == "layout" and value in LAYOUT_BY_CODE:
        return f"{value} (`{LAYOUT_BY_CODE[value].name}`)"
    return f"{value:,}"


def _field_table(page: Path, struct_: Any, data: bytes, base: int) -> list[str]:
    out = [
        "| offset | bytes | field | value | meaning |",
        "|---|---|---|---|---|",
    ]
    for row in schema.field_table(struct_):
        raw = data[row["offset"] : row["offset"] + row["size"]]
        meaning = re.sub(
            r"\[([A-Z0-9, -]+)\]",
            lambda m: "(" + _req_links(page, [s.strip() for s in m[1].split(",")]) + ")",
            row["meaning"] or "",
        )
        shown = raw.hex(" ") if len(raw) <= 8 else raw[:8].hex(" ") + " ..."
        out.append(
            f"| `0x{base + row['offset']:05X}` | `{shown}` | `{row['name']}` "
            f"| {_value(row['name'], raw, row['type'].split(' ')[0])} | {_cell(meaning)} |"
        )
    return out


def _u(data: bytes, offset: int, fmt: str = "<Q") -> int:
    return int(struct.unpack_from(fmt, data, offset)[0])


def walkthrough_region(page: Path, _arg: str | None) -> str:
    vector = next(v for v in _load_manifest()["vectors"] if v["id"] == WALKTHROUGH_VECTOR)
    data = (ROOT / "conformance" / vector["file"]).read_bytes()
    hdr = {row["name"]: row for row in schema.field_table(schema.Header)}

    def h(name: str) -> int:
        row = hdr[name]
        fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[row["size"]]
        return _u(data, row["offset"], fmt)

    size = len(data)
    index_offset, index_length = h("index_offset"), h("index_length")
    count, bits = h("tensor_count"), h("bucket_bits")
    dims_count, names_length, meta_length = h("dims_count"), h("names_length"), h("metadata_length")
    header_size, trailer_size, entry_size = (
        schema.HEADER_SIZE,
        schema.TRAILER_SIZE,
        schema.ENTRY_SIZE,
    )
    fields = np.frombuffer(data, schema.HEADER_DTYPE, 1)[0]
    geo = geometry_of({name: fields[name] for name in schema.HEADER_DTYPE.names or ()})
    table = geo.buckets.length
    entries_at, dims_at = geo.entries.offset, geo.dims.offset
    names_at, meta_at = geo.names.offset, geo.metadata.offset
    trailer_at = size - trailer_size
    entry = data[geo.entry_offset(0) : geo.entry_offset(1)]
    e = {row["name"]: row for row in schema.field_table(schema.Entry)}

    def ef(name: str) -> int:
        row = e[name]
        fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[row["size"]]
        return _u(entry, row["offset"], fmt)

    data_offset, data_length = ef("data_offset"), ef("data_length")
    name = data[names_at + ef("name_offset") : names_at + ef("name_offset") + ef("name_length")]
    ndim, dims_index = ef("ndim"), ef("dims_index")
    dims = [_u(data, geo.dim_offset(dims_index + i)) for i in range(ndim)]
    dtype = DTYPE_BY_CODE[ef("dtype")]
    payload = data[data_offset : data_offset + data_length]
    metadata = data[meta_at : meta_at + meta_length]
    values = (
        struct.unpack(f"<{data_length // dtype.itemsize}d", payload) if dtype.name == "F64" else ()
    )
    assert not any(data[header_size:SLAB_OFFSET]), "header padding is not zero"
    slab_pad = data[data_offset + data_length : index_offset]
    assert not any(slab_pad), "slab padding is not zero"

    fmt_link = _format_md(page)
    parts = [
        ("header", 0, header_size, "header"),
        ("zero padding", header_size, SLAB_OFFSET - header_size, "padding"),
        (f"payload of `{name.decode()}`", data_offset, data_length, "slab"),
        ("zero padding", data_offset + data_length, len(slab_pad), "padding"),
        ("bucket table", geo.buckets.offset, geo.buckets.length, "bucket-table"),
        ("padding", geo.bucket_padding.offset, geo.bucket_padding.length, "index"),
        ("entries", geo.entries.offset, geo.entries.length, "entries"),
        ("dims", geo.dims.offset, geo.dims.length, "dims"),
        ("name pool", geo.names.offset, geo.names.length, "name-pool"),
        ("metadata", geo.metadata.offset, geo.metadata.length, "metadata-section"),
        ("trailer", trailer_at, trailer_size, "trailer"),
    ]
    out = [
        f"The file is `conformance/vectors/{WALKTHROUGH_VECTOR}.awq2` ({size:,} bytes; "
        f"{vector['description']}): one `{dtype.name}` tensor `{name.decode()}` of shape "
        f"{dims} and a metadata document. Print the same with "
        f"`awq2-dump conformance/vectors/{WALKTHROUGH_VECTOR}.awq2 --hexdump`.",
        "",
        "| part | from | to (inclusive) | bytes | spec |",
        "|---|---|---|---:|---|",
    ]
    for label, start, length, anchor in parts:
        if length == 0:
            continue
        out.append(
            f"| {label} | `0x{start:05X}` | `0x{start + length - 1:05X}` | {length:,} "
            f"| [{anchor.replace('-', ' ')}]({fmt_link}#{anchor}) |"
        )
    out += ["", "### The header", "", f"Bytes `0x00000` to `0x{header_size - 1:05X}`:", ""]
    out += _dump(data[:header_size], 0)
    out += ["", *_field_table(page, schema.Header, data[:header_size], 0)]
    crc = crc32c(data[: schema.HEADER_CRC_OFFSET])
    out += [
        "",
        f"Check: CRC-32C of bytes 0 to {schema.HEADER_CRC_OFFSET - 1} is `0x{crc:08X}`, the "
        f"stored `header_crc` ({'match' if crc == h('header_crc') else 'MISMATCH'}).",
        "",
        "### Padding and the slab",
        "",
        f"Bytes `0x{header_size:05X}` to `0x{SLAB_OFFSET - 1:05X}` are "
        f"{SLAB_OFFSET - header_size:,} zero bytes. The slab starts at `0x{SLAB_OFFSET:05X}`; "
        f"the entry of `{name.decode()}` puts its payload at `data_offset` = `0x{data_offset:05X}` "
        f"(a multiple of {ALIGNMENT:,}), `data_length` = {data_length} bytes "
        f"({' x '.join(map(str, dims))} x {dtype.itemsize}-byte `{dtype.name}`):",
        "",
    ]
    out += _dump(payload, data_offset)
    if values:
        out += ["", f"As little-endian `{dtype.name}`: {', '.join(repr(x) for x in values)}."]
    crc = crc32c(payload)
    out += [
        "",
        f"Check: CRC-32C of the payload is `0x{crc:08X}`, the entry's `data_crc` "
        f"({'match' if crc == ef('data_crc') else 'MISMATCH'}). The {len(slab_pad):,} bytes "
        f"after it, up to `index_offset` = `0x{index_offset:05X}`, are zero.",
        "",
        "### The index",
        "",
        f"`index_length` = {index_length} bytes from `0x{index_offset:05X}`. With "
        f"`bucket_bits` = {bits} the bucket table is {geo.bucket_slots} `u32` ({table} bytes), "
        f"then the {count} entry of {entry_size} bytes at `0x{entries_at:05X}`, "
        f"{dims_count} `u64` dim at `0x{dims_at:05X}`, the {names_length}-byte name pool at "
        f"`0x{names_at:05X}` and {meta_length} bytes of metadata at `0x{meta_at:05X}`:",
        "",
    ]
    out += _dump(data[index_offset : index_offset + index_length], index_offset)
    out += ["", "The entry:", ""]
    out += _field_table(page, schema.Entry, entry, entries_at)
    name_hash = fnv1a_64(name)
    crc = entry_checksum(entry, name, pack_dims(dims))
    index_crc = crc32c(data[index_offset : index_offset + index_length])
    out += [
        "",
        f"Lookup of `{name.decode()}`: FNV-1a 64 of its UTF-8 bytes is `0x{name_hash:016X}` "
        f"(the entry's `name_hash`), its bucket is {bucket_of(name_hash, bits)} of "
        f"{1 << bits}, and `buckets[0..1]` = "
        f"{_u(data, index_offset, '<I')}, {_u(data, index_offset + 4, '<I')} name the run of "
        "entries to compare names with.",
        "",
        f"Checks: `entry_crc` covers entry bytes 0 to {schema.ENTRY_CRC_OFFSET - 1}, the name "
        f"and the dims: `0x{crc:08X}` "
        f"({'match' if crc == ef('entry_crc') else 'MISMATCH'}); `index_crc` covers the whole "
        f"region: `0x{index_crc:08X}` ({'match' if index_crc == h('index_crc') else 'MISMATCH'}); "
        f"`metadata_crc` covers the metadata bytes: `0x{crc32c(metadata):08X}` "
        f"({'match' if crc32c(metadata) == h('metadata_crc') else 'MISMATCH'}).",
        "",
        "The metadata, canonical JSON:",
        "",
        "```json",
        metadata.decode("utf-8"),
        "```",
        "",
        "### The trailer",
        "",
        f"The last {trailer_size} bytes, from `0x{trailer_at:05X}`:",
        "",
    ]
    trailer = data[trailer_at:]
    out += _dump(trailer, trailer_at)
    out += ["", *_field_table(page, schema.Trailer, trailer, trailer_at)]
    crc = crc32c(trailer[: schema.TRAILER_CRC_OFFSET])
    out += [
        "",
        f"Check: CRC-32C of trailer bytes 0 to {schema.TRAILER_CRC_OFFSET - 1} is `0x{crc:08X}` "
        f"({'match' if crc == _u(trailer, schema.TRAILER_CRC_OFFSET, '<I') else 'MISMATCH'}); "
        f"`index_offset + index_length + {trailer_size}` = "
        f"{index_offset + index_length + trailer_size:,} = the file size.",
    ]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------ file map


def file_map_svg() -> str:
    """The byte map of a file, as an SVG picture (not to scale; offsets from :mod:`spec`)."""
    boxes = [
        ("header", f"0x0, {schema.HEADER_SIZE} B", "#3f51b5"),
        ("zero padding", f"to 0x{SLAB_OFFSET:X}", "#9e9e9e"),
        ("payload 0", f"0x{SLAB_OFFSET:X}", "#009688"),
        ("pad", "zeros", "#9e9e9e"),
        ("payload 1", "k x 64 KiB", "#009688"),
        ("pad", "zeros", "#9e9e9e"),
        ("...", "", "#b2dfdb"),
        ("index", "index_offset", "#ff9800"),
        ("trailer", f"last {schema.TRAILER_SIZE} B", "#e91e63"),
    ]
    widths = [70, 110, 100, 45, 100, 45, 50, 150, 80]
    x0, y0, height = 10, 30, 60
    parts = [
        '<svg xmlns="http://www.w3.org/2000/svg" width="780" height="230" '
        'viewBox="0 0 780 230" role="img" aria-labelledby="t d" font-family="sans-serif" '
        'font-size="13">',
        '<title id="t">Byte map of an AWQ-v2 file</title>',
        '<desc id="d">Header at offset 0, zero padding to 0x10000, the slab of payloads each '
        "starting on a 64 KiB boundary, the index, then the 32-byte trailer. Not to scale.</desc>",
        '<rect width="780" height="230" fill="#ffffff"/>',
        '<text x="10" y="20" fill="#212121">AWQ-v2 file (not to scale)</text>',
    ]
    x = x0
    starts = []
    for (label, sub, colour), width in zip(boxes, widths, strict=True):
        starts.append(x)
        parts.append(
            f'<rect x="{x}" y="{y0}" width="{width}" height="{height}" fill="{colour}" '
            'stroke="#212121"/>'
        )
        fill = "#ffffff" if colour not in ("#b2dfdb", "#9e9e9e") else "#212121"
        parts.append(
            f'<text x="{x + width / 2:g}" y="{y0 + 26}" fill="{fill}" text-anchor="middle">'
            f"{html_escape(label)}</text>"
        )
        if sub:
            parts.append(
                f'<text x="{x + width / 2:g}" y="{y0 + 44}" fill="{fill}" font-size="11" '
                f'text-anchor="middle">{html_escape(sub)}</text>'
            )
        x += width
    # the slab brace and the index detail
    slab_from, slab_to = starts[2], starts[7]
    parts.append(
        f'<path d="M{slab_from} {y0 + height + 8} v8 H{slab_to} v-8" fill="none" stroke="#212121"/>'
    )
    parts.append(
        f'<text x="{(slab_from + slab_to) / 2:g}" y="{y0 + height + 32}" fill="#212121" '
        'text-anchor="middle">slab: every payload starts on a 64 KiB boundary</text>'
    )
    sections = ["bucket table", "entries", "dims", "names", "metadata"]
    ix, iy, iw = 380, 160, 78
    parts.append(
        f'<path d="M{starts[7]} {y0 + height} L{ix} {iy} M{starts[7] + widths[7]} {y0 + height} '
        f'L{ix + iw * len(sections)} {iy}" fill="none" stroke="#ff9800" stroke-dasharray="4 3"/>'
    )
    for i, label in enumerate(sections):
        parts.append(
            f'<rect x="{ix + i * iw}" y="{iy}" width="{iw}" height="40" fill="#ffe0b2" '
            'stroke="#212121"/>'
        )
        parts.append(
            f'<text x="{ix + i * iw + iw / 2:g}" y="{iy + 25}" fill="#212121" font-size="12" '
            f'text-anchor="middle">{label}</text>'
        )
    parts.append(
        f'<text x="10" y="{iy + 25}" fill="#212121" font-size="12">O(1) lookup: hash the name, '
        "read its bucket's entries</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------ pictures
# Pictures of the spec pages, drawn from the facts they show (the Marlin maps of
# tools.codec_tables, the names of reference.sets).  Each is a light card with its own
# background, so that it reads the same in Material's light and dark palettes (an <img>
# cannot take the page's colours), with a <title> and a <desc> for screen readers.

INK = "#212121"
GRID = "#bdbdbd"
CARD = "#ffffff"
FAINT = "#f5f5f5"
ORANGE, PALE_ORANGE = "#ffb74d", "#ffe0b2"
TEAL, INDIGO, PINK = "#00796b", "#3f51b5", "#ad1457"
MONO = 'font-family="monospace"'

SETS_SVG = DOCS / "assets" / "sets.svg"
CODEC_SVG = DOCS / "assets" / "marlin-vs-awq.svg"


def _svg_head(width: int, height: int, title: str, desc: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-labelledby="t d" '
        'font-family="sans-serif" font-size="13">',
        f'<title id="t">{html_escape(title)}</title>',
        f'<desc id="d">{html_escape(desc)}</desc>',
        f'<rect width="{width}" height="{height}" fill="{CARD}"/>',
    ]


def _text(
    x: float,
    y: float,
    text: str,
    *,
    size: int = 13,
    anchor: str = "start",
    fill: str = INK,
    extra: str = "",
) -> str:
    attrs = f' font-size="{size}"' if size != 13 else ""
    attrs += f' text-anchor="{anchor}"' if anchor != "start" else ""
    attrs += f" {extra}" if extra else ""
    return f'<text x="{x:g}" y="{y:g}" fill="{fill}"{attrs}>{html_escape(text)}</text>'


def _rect(
    x: float, y: float, w: float, h: float, fill: str, *, stroke: str = INK, extra: str = ""
) -> str:
    tail = f" {extra}" if extra else ""
    return (
        f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}" fill="{fill}" '
        f'stroke="{stroke}"{tail}/>'
    )


# -- the codec chapter: one 4-bit word of each layout over the same corner of q

#: Cell size of the 16 x 16 corners and where the two grids start.
_CELL, _GRID_Y, _AWQ_X, _MARLIN_X = 18, 74, 60, 410
_CORNER = 16  # rows and columns shown: one Marlin sub-tile, two AWQ words per row


def _awq_cells() -> dict[tuple[int, int], tuple[int, int]]:
    """(row, col) -> (word, field) of the AWQ v1 words of row 0 in the corner."""
    order = AWQ_ORDER[4]
    return {(0, 8 * c + order[f]): (c, f) for c in range(_CORNER // 8) for f in range(8)}


def _marlin_cells(words: Sequence[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """(row, col) -> (word, field) of the given Marlin words of array row 0."""
    return {codec_tables.marlin_code_at(0, w, f, 4): (w, f) for w in words for f in range(8)}


def _grid(
    x0: int, cells: dict[tuple[int, int], tuple[int, int]], colours: dict[int, tuple[str, str]]
) -> list[str]:
    """The 16 x 16 corner of q with the cells of some words filled and their field numbers."""
    out = [
        _text(x0 + _CELL * c + _CELL / 2, _GRID_Y - 6, str(c), size=9, anchor="middle")
        for c in range(_CORNER)
    ]
    out += [
        _text(x0 - 6, _GRID_Y + _CELL * r + 13, str(r), size=9, anchor="end")
        for r in range(_CORNER)
    ]
    for r in range(_CORNER):
        for c in range(_CORNER):
            word_field = cells.get((r, c))
            fill = colours[word_field[0]][0] if word_field else CARD
            x, y = x0 + _CELL * c, _GRID_Y + _CELL * r
            out.append(_rect(x, y, _CELL, _CELL, fill, stroke=GRID))
            if word_field:
                out.append(
                    _text(
                        x + _CELL / 2,
                        y + 13,
                        str(word_field[1]),
                        size=10,
                        anchor="middle",
                        fill=colours[word_field[0]][1],
                    )
                )
    side = _CELL * _CORNER
    out.append(_rect(x0, _GRID_Y, side, side, "none", stroke=INK))
    out.append(
        _text(
            x0 + side / 2, _GRID_Y - 20, "col (n, output features) \u2192", size=11, anchor="middle"
        )
    )
    out.append(_text(x0 - 4, _GRID_Y - 6, "row (k) \u2193", size=11, anchor="end"))
    return out


def _word(x0: int, y: int, holds: Sequence[tuple[int, int]], fill: str, ink: str) -> list[str]:
    """One 32-bit word drawn as its 8 fields, field 0 (bits 0..3) first, with what each holds."""
    width = _CELL * _CORNER / 8
    out = []
    for f, (row, col) in enumerate(holds):
        x = x0 + width * f
        out.append(_rect(x, y, width, 22, fill))
        out.append(_text(x + width / 2, y + 15, f"f{f}", size=11, anchor="middle", fill=ink))
        out.append(_text(x + width / 2, y + 38, f"{row},{col}", size=10, anchor="middle"))
    return out


def _tile_strip(y: int) -> list[str]:
    """One Marlin row: tiles of 16 x 64 codes, the first cut into its four sub-tiles, and
    the first words of tile 0 with the lane and sub-tile each belongs to."""
    words = codec_tables.tile_words(4)
    out = [
        _text(
            _AWQ_X,
            y,
            f"A Marlin row R holds rows 16R .. 16R+15 of q: n / {TILE_N} tiles of "
            f"{TILE_K} x {TILE_N} codes, {words} words each.",
            size=12,
        ),
        _text(
            _AWQ_X,
            y + 16,
            "Each tile is four sub-tiles S of 16 columns; S0 of tile 0 is the corner drawn above.",
            size=12,
        ),
    ]
    ty, th = y + 28, 40
    for t in range(4):
        out.append(_rect(_AWQ_X + 160 * t, ty, 160, th, FAINT if t else CARD))
        out.append(
            _text(
                _AWQ_X + 160 * t + 80,
                ty + th + 15,
                f"tile T = {t}" if t < 3 else "...",
                size=11,
                anchor="middle",
            )
        )
    for s in range(4):
        out.append(_rect(_AWQ_X + 40 * s, ty, 40, th, "#e0f2f1" if s == 0 else CARD))
        out.append(_text(_AWQ_X + 20 + 40 * s, ty + 25, f"S{s}", size=11, anchor="middle"))
    out.append(_text(_AWQ_X + 650, ty + 25, "n \u2192", size=11, anchor="end"))
    wy = ty + th + 38
    out.append(
        _text(
            _AWQ_X,
            wy,
            "The words of tile 0 in the row (word: lane L, sub-tile S); word "
            "4L + S is lane L's share of sub-tile S:",
            size=12,
        )
    )
    for i, w in enumerate([*range(9), words - 1]):
        x = _AWQ_X + 64 * i + (14 if i == 9 else 0)  # a gap for the ellipsis before the last
        fill, ink = {0: (TEAL, CARD), 4: (INDIGO, CARD)}.get(w, (CARD, INK))
        out.append(_rect(x, wy + 8, 60, 22, fill))
        lane, sub = divmod(w, 4)
        out.append(
            _text(x + 30, wy + 23, f"{w}: L{lane} S{sub}", size=10, anchor="middle", fill=ink)
        )
        if i == 8:
            out.append(_text(x + 63, wy + 23, "\u2026", size=12))
    return out


def codec_svg() -> str:
    """AWQ v1 packing against the Marlin tiling, 4-bit, over the same 16 x 16 corner of q."""
    awq = _awq_cells()
    marlin = _marlin_cells((0, 4))
    side = _CELL * _CORNER
    parts = _svg_head(
        720,
        670,
        "AWQ v1 packing against the Marlin tiling (4-bit)",
        "The same 16 x 16 corner of the codes q, rows along k and columns along n. Left, AWQ "
        "v1: word 0 of row 0 holds the 8 neighbouring columns 0 to 7 of row 0, field i "
        "holding column 0, 2, 4, 6, 1, 3, 5, 7; word 1 the columns 8 to 15. Right, Marlin: "
        "word 0 of array row 0 holds the codes at (row, col) (0,0), (8,0), (0,8), (8,8), "
        "(1,0), (9,0), (1,8), (9,8); word 4, lane 1, the same pattern two rows down. Below, "
        "a Marlin row: tiles of 16 x 64 codes, each of four 16-column sub-tiles, 128 words "
        "per tile, word 4L + S belonging to lane L and sub-tile S.",
    )
    parts.append(
        _text(
            _AWQ_X, 20, "AWQ v1: AWQ_QWEIGHT, I32 [k, n / 8]", size=14, extra='font-weight="bold"'
        )
    )
    parts.append(
        _text(
            _MARLIN_X,
            20,
            "Marlin: MARLIN_QWEIGHT, I32 [k / 16, 2n]",
            size=14,
            extra='font-weight="bold"',
        )
    )
    parts += _grid(_AWQ_X, awq, {0: (ORANGE, INK), 1: (PALE_ORANGE, INK)})
    parts += _grid(_MARLIN_X, marlin, {0: (TEAL, CARD), 4: (INDIGO, CARD)})
    wy = _GRID_Y + side + 22
    parts.append(
        _text(_AWQ_X, wy, "word [0][0], fields 0 .. 7 (f0 = bits 0..3): row, col", size=11)
    )
    parts.append(
        _text(_MARLIN_X, wy, "word [0][0], fields 0 .. 7 (f0 = bits 0..3): row, col", size=11)
    )
    by_field = {v: k for k, v in awq.items()}
    parts += _word(_AWQ_X, wy + 8, [by_field[(0, f)] for f in range(8)], ORANGE, INK)
    by_field = {v: k for k, v in marlin.items()}
    parts += _word(_MARLIN_X, wy + 8, [by_field[(0, f)] for f in range(8)], TEAL, CARD)
    cy = wy + 68
    order = ", ".join(str(i) for i in AWQ_ORDER[4])
    for i, line in enumerate(
        (
            "One word: 8 neighbouring columns of one row,",
            f"interleaved {order}. A row of q is n / 8 words;",
            "rows follow one another.",
        )
    ):
        parts.append(_text(_AWQ_X, cy + 16 * i, line, size=12))
    for i, line in enumerate(
        (
            "One word: lane 0 of sub-tile 0, rows 0, 1, 8, 9 of",
            "columns 0 and 8 (the mma.m16n8k16 B fragment).",
            "Word 4, lane 1: rows 2, 3, 10, 11 of the same columns.",
        )
    ):
        parts.append(_text(_MARLIN_X, cy + 16 * i, line, size=12))
    parts += _tile_strip(cy + 70)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# -- the sets chapter: a split set against a rank set

#: Glyph size of one tensor, drawn as q[k, n]: rows along k, columns along n.
_GW, _GH, _GSTEP = 22, 16, 25
#: How tensor parallelism cuts each tensor drawn for a layer (q_proj, o_proj, a norm).
_LAYER_CUTS = ("column", "row", "whole")
_MEMBER_W, _MANIFEST_W = 150, 232


def _glyph(x: float, y: float, cut: str, part: int | None, colour: str) -> list[str]:
    """One tensor: whole (``part`` None), or rank ``part``'s half of it, the other half an
    outline: column-parallel cuts n (left | right), row-parallel cuts k (top / bottom)."""
    if part is None or cut == "whole":
        return [_rect(x, y, _GW, _GH, colour)]
    out = [_rect(x, y, _GW, _GH, CARD, extra='stroke-dasharray="3 2"')]
    if cut == "column":
        out.append(_rect(x + part * _GW / 2, y, _GW / 2, _GH, colour))
    else:
        out.append(_rect(x, y + part * _GH / 2, _GW, _GH / 2, colour))
    return out


def _member(
    x: float, y: float, name: str, rows: Sequence[str], part: int | None, colour: str
) -> list[str]:
    """A member file: its name, then one line per layer it holds (q_proj, o_proj, norm)."""
    out = [
        _rect(x, y, _MEMBER_W, 26 + 22 * len(rows), FAINT, extra='rx="4"'),
        _text(x + 5, y + 15, name, size=9, extra=MONO),
    ]
    for i, label in enumerate(rows):
        ry = y + 22 + 22 * i
        if label == "\u22ee":
            out.append(_text(x + 24, ry + 14, label, size=13))
            continue
        out.append(_text(x + 5, ry + 13, label, size=10))
        if not label.startswith("layers."):  # a dense tensor, drawn whole (cut or not)
            out.append(_rect(x + 74, ry + 2, 2 * _GSTEP + _GW - 4, _GH, colour))
            continue
        for j, cut in enumerate(_LAYER_CUTS):
            out += _glyph(x + 70 + _GSTEP * j, ry + 2, cut, part, colour)
    return out


def _manifest(x: float, y: float, lines: Sequence[str], members: Sequence[float]) -> list[str]:
    """The manifest with its lines, and a connector to each member's left edge."""
    height = 22 + 14 * len(lines)
    out = [
        _rect(x, y, _MANIFEST_W, height, "#fff8e1", extra='rx="4"'),
        _text(x + 6, y + 15, SET_MANIFEST, size=11, extra=f'{MONO} font-weight="bold"'),
    ]
    out += [
        _text(
            x + 6 + 6 * (len(line) - len(line.lstrip())),
            y + 30 + 14 * i,
            line.strip(),
            size=10,
            extra=MONO,
        )
        for i, line in enumerate(lines)
    ]
    out += [
        f'<path d="M{x + _MANIFEST_W:g} {y + 12:g} L{mx:g} {y + 12:g}" fill="none" '
        f'stroke="{INK}" stroke-dasharray="2 2"/>'
        for mx in members
    ]
    return out


def _split_panel(y: float) -> list[str]:
    names = [member_name(i, 3) for i in (1, 2, 3)]
    xs = [250 + (_MEMBER_W + 6) * i for i in range(3)]
    out = [
        _text(
            10,
            y,
            'Split set: kind "split" (filled in order, each member at most the size limit)',
            size=14,
            extra='font-weight="bold"',
        )
    ]
    out += _manifest(
        10,
        y + 10,
        [
            '"kind": "split"',
            "files, in order:",
            *(f"  {n}" for n in names),
            "each: size, header_crc, sha256",
        ],
        xs,
    )
    contents = (
        ("embed_tokens", "layers.0", "\u22ee"),
        ("layers.11", "layers.12", "\u22ee"),
        ("layers.22", "\u22ee", "layers.31"),
    )
    for x, name, rows in zip(xs, names, contents, strict=True):
        out += _member(x, y + 10, name, rows, None, TEAL)
    out.append(
        _text(
            10,
            y + 140,
            "Every tensor and every quantised layer is whole, in one "
            "member; a name is looked up member by member, in the "
            "manifest's order.",
            size=12,
        )
    )
    return out


def _rank_panel(y: float) -> list[str]:
    names = [rank_member_name(r, 2) for r in (0, 1)]
    xs = [250 + (_MEMBER_W + 6) * r for r in (0, 1)]
    out = [
        _text(
            10,
            y,
            'Rank set: kind "rank", tp_size 2 (one file per rank)',
            size=14,
            extra='font-weight="bold"',
        )
    ]
    out += _manifest(
        10,
        y + 10,
        [
            '"kind": "rank", "tp_size": 2',
            "files:",
            *(f"  {n} rank {r}" for r, n in enumerate(names)),
            "each: size, header_crc, sha256",
        ],
        xs,
    )
    rows = ("layers.0", "layers.1", "\u22ee", "layers.31")
    for r, (x, name, colour) in enumerate(zip(xs, names, (INDIGO, PINK), strict=True)):
        out += _member(x, y + 10, name, rows, r, colour)
    notes = (
        "Each rank's file holds its",
        "shard of every layer,",
        "already cut: q_proj",
        "along n, o_proj along k,",
        "the norm whole. Rank r",
        "reads its own file only:",
        "contiguous, 64 KiB-aligned",
        "payloads.",
    )
    out += [_text(570, y + 22 + 14 * i, line, size=11) for i, line in enumerate(notes)]
    return out


def sets_svg() -> str:
    """A split set against a rank set, tensors drawn as q[k, n] (q_proj, o_proj, a norm)."""
    parts = _svg_head(
        720,
        370,
        "A split set against a rank set",
        f"Above, a split set: {SET_MANIFEST} lists three members filled in order, each holding "
        "whole tensors and whole layers (embed_tokens, layers.0 onwards in the first, "
        "layers.11 onwards in the second, layers.22 to layers.31 in the third). Below, a rank "
        "set for two tensor-parallel ranks: the manifest lists one file per rank with its "
        "rank; each holds its rank's shard of every layer, q_proj cut along n, o_proj cut "
        "along k, the norm whole.",
    )
    parts += _split_panel(20)
    parts += _rank_panel(190)
    parts.append(
        _text(
            10,
            360,
            "A layer is drawn as its q_proj, o_proj and norm, each as "
            "q[k, n] (rows: k, columns: n). Filled: what the file holds; "
            "dashed: another rank's part.",
            size=11,
        )
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------ download


def download_region(page: Path, _arg: str | None) -> str:
    manifest = _load_manifest()
    name = f"awq2-conformance-{manifest['suite_version']}"
    assets = Path("../" * (len(page.relative_to(DOCS).parts) - 1) + "assets")
    archive, checksum = f"{name}.tar.xz", f"{name}.tar.xz.sha256"
    return "\n".join(
        [
            f"- [{archive}]({(assets / archive).as_posix()}): suite version "
            f"{manifest['suite_version']}, for spec version {manifest['spec_version']}, "
            f"{len(manifest['vectors'])} vectors with `manifest.json` and `schema/`, in one "
            f"top folder `{name}/`",
            f"- [{checksum}]({(assets / checksum).as_posix()}): its SHA-256, one `sha256sum` line",
            "",
            '```sh title="run the downloaded suite"',
            f"sha256sum -c {checksum}          # {archive}: OK",
            f"tar -xJf {archive}                     # makes {name}/",
            "python3 -m venv awq2-venv && . awq2-venv/bin/activate",
            'pip install awq_v2-*.whl      # the runner: see "Installing the runner" below',
            f'awq2-conformance --suite {name} --loader "./my_loader {{file}}"',
            "```",
            "",
            f"`--suite {archive}` runs the archive without unpacking it (the runner unpacks it "
            "into a temporary folder, refusing links, absolute names and `..`).",
        ]
    )


def tp_rules_region(_page: Path, _arg: str | None) -> str:
    """The rule tables ``awq2-convert --tp`` cuts with (:mod:`reference.sets.tpsplit`)."""
    lines = ["| table | architectures | module (pattern) | kind |", "|---|---|---|---|"]
    for family, rules in FAMILIES.items():
        names = ", ".join(f"`{a}`" for a, f in ARCHITECTURES.items() if f == family)
        for i, (pattern, kind) in enumerate(rules):
            escaped = pattern.replace("|", "\\|")
            first = (f"`{family}`", names) if i == 0 else ("", "")
            lines.append(f"| {first[0]} | {first[1]} | `{escaped}` | `{kind}` |")
    return "\n".join(lines)


SERVED = DOCS / "assets" / "served.json"


#: The kinds of host the breadth matrix is measured on (``awq2_vllm.host.kind()``), in words.
HOST_KINDS = {
    "avx512-amx": "an x86 CPU with AVX-512 and AMX tiles",
    "avx512": "an x86 CPU with AVX-512 and no AMX tiles",
    "avx2": "an x86 CPU without AVX-512 (AVX2 only)",
}


def served_region(_page: Path, _arg: str | None) -> str:
    """The breadth matrix's verdicts (``docs/assets/served.json``, written and checked by
    ``integrations/vllm/tests/cpu/test_breadth.py``): for each kind of host measured, one row
    per checkpoint and TP size."""
    document = json.loads(SERVED.read_text(encoding="utf-8"))
    lines: list[str] = []
    for kind, measured in document["hosts"].items():
        lines += [f"**On {HOST_KINDS.get(kind, kind)}** (`{kind}`):", ""]
        lines += _served_table(measured)
        lines.append("")
    lines += [
        "Measured by `integrations/vllm/tests/cpu/test_breadth.py` (in CI, which compares a "
        "run only with the rows of its own kind of host; `AWQ2_BREADTH_AS_AVX2=1` runs it as "
        "an AVX2-only host does, on any x86 host). **equal**: the same 16 greedy tokens for "
        "both prompts as vLLM's stock path, every logprob difference 0. **close**: where "
        "stock has no kernel, against the checkpoint dequantised to its dense dtype and served "
        "by stock vLLM, within the bounds of [Where vLLM has no 4-bit kernel]"
        "(#where-vllm-has-no-4-bit-kernel). `refused: CODE` is the plugin's refusal.",
    ]
    return "\n".join(lines)


def _served_table(measured: dict[str, Any]) -> list[str]:
    forms = ("file", "split set", "rank set")
    cells: dict[tuple[str, str, int], dict[str, str]] = {}
    for row in measured["rows"]:
        key = (row["fixture"], row["architecture"], row["tp"])
        got = cells.setdefault(key, {"stock": row["stock"], "dense": row.get("dense", "-")})
        got[row["form"]] = row["awq_v2"]
    dense = any(got["dense"] != "-" for got in cells.values())
    head = "| checkpoint | architecture | TP | vLLM's stock path |" + (
        " dense model |" if dense else "")  # fmt: skip
    lines = [head + " file | split set | rank set |", "|---" * (7 + dense) + "|"]
    for (fixture, architecture, tp), got in cells.items():
        verdicts = " | ".join(got.get(form, "-") for form in forms)
        middle = f" {got['dense']} |" if dense else ""
        lines.append(f"| {fixture} | `{architecture}` | {tp} | {got['stock']} |{middle} "
                     f"{verdicts} |")  # fmt: skip
    reference = [g for g in cells.values() if g["stock"] == "served" or g["dense"] == "served"]
    ours = sum(1 for g in reference if all(g.get(f) in ("equal", "close") for f in forms))
    lines += ["", f"{measured['vllm']}: of the {len(reference)} cases the reference serves, "
              f"`awq_v2` serves {ours} from every form."]  # fmt: skip
    return lines


# ------------------------------------------------------------------------------ documents

RENDERERS: dict[str, Callable[[Path, str | None], str]] = {
    "site-served": served_region,
    "site-tp-rules": tp_rules_region,
    "site-vectors": vectors_region,
    "site-cli": cli_region,
    "site-walkthrough": walkthrough_region,
    "site-download": download_region,
}


def render_text(text: str, page: Path) -> str:
    """``text`` with every ``site-*`` region's body replaced by the generator's output."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        match = BEGIN_RE.match(line)
        if line.startswith("<!-- BEGIN GENERATED: site-") and match is None:
            raise SitegenError(f"{page}:{i + 1}: malformed marker {line!r}")
        if match is None:
            i += 1
            continue
        kind, arg = match["kind"], match["arg"]
        if kind not in RENDERERS:
            raise SitegenError(f"{page}:{i + 1}: unknown kind {kind!r}")
        try:
            end = lines.index(END_LINE, i + 1)
        except ValueError:
            raise SitegenError(f"{page}:{i + 1}: no {END_LINE!r} after this line") from None
        body = RENDERERS[kind](page, arg)
        out.append("")
        out.extend(body.rstrip("\n").split("\n"))
        out.append("")
        out.append(END_LINE)
        i = end + 1
    return "\n".join(out)


#: Every picture generated whole, with the function that draws it.
PICTURES: dict[Path, Callable[[], str]] = {
    FILE_MAP_SVG: file_map_svg,
    SETS_SVG: sets_svg,
    CODEC_SVG: codec_svg,
}


def outputs() -> dict[Path, str]:
    """Every file this generator owns, with the text it should hold."""
    files: dict[Path, str] = {path: draw() for path, draw in PICTURES.items()}
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        if "<!-- BEGIN GENERATED: site-" in text:
            files[page] = render_text(text, page)
    return files


def stale() -> list[Path]:
    return [
        path
        for path, text in outputs().items()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.sitegen",
        description="Regenerate the site-* regions of docs/ (vector catalogue, CLI reference, "
        "byte-by-byte walkthrough) and the pictures of docs/assets/ (file-map.svg, sets.svg, "
        "marlin-vs-awq.svg).",
        epilog="exit status: 0 fresh or rewritten, 1 stale (with --check), 2 malformed region",
    )
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    try:
        files = outputs()
    except SitegenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    changed = [p for p, t in files.items() if not p.exists() or p.read_text("utf-8") != t]
    for path in changed:
        rel = path.relative_to(ROOT)
        if args.check:
            print(f"{rel}: stale; run python -m tools.regen", file=sys.stderr)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[path], encoding="utf-8")
            print(f"wrote {rel}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
