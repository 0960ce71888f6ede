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
``site-walkthrough``
    a real vector, byte by byte: hex dumps of every region, each field annotated from the
    construct schema (:mod:`spec.schema`), and every checksum recomputed.

Regions use the markers of :mod:`tools.docgen` (``<!-- BEGIN GENERATED: site-... -->`` ...
``<!-- END GENERATED -->``); docgen leaves ``site-*`` regions alone.  The byte-map picture
``docs/assets/file-map.svg`` is generated whole.

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
from spec import schema
from spec.algorithms import bucket_of, crc32c, fnv1a_64
from spec.constants import ALIGNMENT, SLAB_OFFSET
from spec.geometry import entry_checksum, geometry_of, pack_dims
from spec.registry import DTYPE_BY_CODE, LAYOUT_BY_CODE
from tools import DOCS, ROOT, docgen

MANIFEST = ROOT / "conformance" / "manifest.json"
FILE_MAP_SVG = DOCS / "assets" / "file-map.svg"
#: The vector the walkthrough explains: one small tensor and a metadata document.
WALKTHROUGH_VECTOR = "y_metadata_nested"
#: The modules whose parsers the CLI reference renders.
CLI_MODULES = ("reference.dump", "reference.convert", "conformance.run")

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
        f"`python -m reference.dump conformance/vectors/{WALKTHROUGH_VECTOR}.awq2 --hexdump`.",
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
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 780 230" role="img" '
        'aria-labelledby="t d" font-family="sans-serif" font-size="13">',
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


# ------------------------------------------------------------------------------ documents

RENDERERS: dict[str, Callable[[Path, str | None], str]] = {
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


def outputs() -> dict[Path, str]:
    """Every file this generator owns, with the text it should hold."""
    files: dict[Path, str] = {FILE_MAP_SVG: file_map_svg()}
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
        "byte-by-byte walkthrough) and docs/assets/file-map.svg.",
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
