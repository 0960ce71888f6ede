"""Regenerate the tables of the spec pages from the machine-readable spec.

``python -m tools.docgen`` rewrites, in every Markdown file under ``docs/``, the regions
delimited by a line ``<!-- BEGIN GENERATED: <kind> [arg] -->`` and a line
``<!-- END GENERATED -->``; ``python -m tools.docgen --check`` writes nothing and exits 1,
naming each stale file, when regenerating would change anything.  ``python -m tools.regen``
runs this with every other generator.  Exit status 2 means a
malformed region (an unknown kind, a missing ``END``, a bad argument).

Kinds (all rendered from :mod:`spec`, never from ``reference``):

``struct Header|Trailer|Entry``
    field table of a fixed-size structure, from :func:`spec.schema.field_table`.
``index-sections``
    the sections of the index region, their order, offsets and sizes.
``dtypes``, ``layouts``, ``flags``, ``limits``, ``errors``
    the registries of :mod:`spec.registry` and the limits of :mod:`spec.constants`.
``requirements <PREFIX>``
    the statements of one id prefix (``HDR``, ``IDX`` ...), one list item each, led by an
    HTML anchor so that ``format.md#HDR-1`` links to the statement.
``requirement-index``
    every requirement id with its level and subject, linked to its statement.
``requirement-list <ID-or-PREFIX,...>``
    the statements named (``RD-1,RD-2,IDX-9`` or whole prefixes, ``LIM``), in the order
    given, one list item each, led by a link to its anchor in ``format.md`` (no anchor of
    its own): other pages quote statements without copying them by hand.
``hash-examples``
    FNV-1a 64 hashes and buckets of a few names, computed by :mod:`spec.algorithms`.

Regions of kinds owned by another generator (``codec-*``: :mod:`tools.codec_tables`;
``site-*``: :mod:`tools.sitegen`, which needs the reference) are left as they are.
The output depends only on the spec modules, so it is deterministic.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spec import schema
from spec.algorithms import FNV64_OFFSET_BASIS, FNV64_PRIME, bucket_of, fnv1a_64
from spec.constants import INDEX_SECTION_ALIGN, LIMITS
from spec.geometry import index_geometry
from spec.registry import DTYPES, ERROR_CODES, FLAGS, LAYOUTS, DType
from spec.requirements import REQUIREMENT_BY_ID, REQUIREMENTS, Requirement
from tools import DOCS, ROOT

#: The page that holds the requirement anchors; links from other pages point here.
SPEC_PAGE = DOCS / "spec" / "format.md"
#: Requirements stated on a page of their own (every other prefix: SPEC_PAGE).
REQUIREMENT_PAGES = {"SET": DOCS / "spec" / "sets.md"}

BEGIN_RE = re.compile(r"^<!-- BEGIN GENERATED: (?P<kind>[A-Za-z0-9_-]+)(?: (?P<arg>[^ >]+))? -->$")
END_LINE = "<!-- END GENERATED -->"
#: Region kinds rendered by other generators; docgen leaves their bodies untouched.
FOREIGN_PREFIXES = ("codec-", "site-")

STRUCTS: dict[str, Any] = {
    "Header": schema.Header,
    "Trailer": schema.Trailer,
    "Entry": schema.Entry,
}
HASH_EXAMPLE_NAMES = (
    "a",
    "lm_head.weight",
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.q_proj.qweight",
    "model.layers.0.self_attn.q_proj.scales",
)
HASH_EXAMPLE_BITS = (1, 4, 10)

_ID_RE = re.compile(r"^[A-Z][A-Z0-9]{0,4}-[1-9][0-9]*$")
_CITATION_RE = re.compile(r"\[([A-Z][A-Z0-9]{0,4}-[0-9]+(?:, [A-Z][A-Z0-9]{0,4}-[0-9]+)*)\]")


class DocgenError(ValueError):
    """A malformed generated region: the message names the file and the line."""


@dataclass(frozen=True)
class Region:
    """One generated region: the lines ``begin`` and ``end`` hold the two markers (0-based)."""

    kind: str
    arg: str | None
    begin: int
    end: int


# --------------------------------------------------------------------------- small helpers


def requirement_link(rid: str, page: Path) -> str:
    """Markdown link to requirement ``rid`` as seen from ``page``."""
    home = REQUIREMENT_PAGES.get(requirement_prefix(rid), SPEC_PAGE)
    if page.resolve() == home.resolve():
        target = ""
    else:
        target = Path(os.path.relpath(home, page.parent)).as_posix()
    return f"[{rid}]({target}#{rid})"


def link_citations(text: str, page: Path) -> str:
    """Turn ``[HDR-1, VER-2]`` citations in a meaning into ``(HDR-1, VER-2)`` with links."""

    def replace(match: re.Match[str]) -> str:
        ids = match.group(1).split(", ")
        if not all(rid in REQUIREMENT_BY_ID for rid in ids):
            return match.group(0)
        return "(" + ", ".join(requirement_link(rid, page) for rid in ids) + ")"

    return _CITATION_RE.sub(replace, text)


def cell(value: object) -> str:
    """One table cell: pipes escaped, line breaks folded."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A Markdown pipe table."""
    lines = ["| " + " | ".join(cell(h) for h in header) + " |"]
    lines.append("|" + "---|" * len(header))
    lines.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in rows)
    return lines


def hex_bytes(data: bytes) -> str:
    """``89 41 57 51``: the notation the spec uses for byte strings."""
    return " ".join(f"{b:02X}" for b in data)


def power_of_two(value: int) -> str:
    """``16777216 (2^24)`` for powers of two from 1024 up, else the plain number."""
    if value >= 1024 and value & (value - 1) == 0:
        return f"{value} (2^{value.bit_length() - 1})"
    return str(value)


def numpy_name(dtype: str) -> str:
    """``uint16`` for ``<u2``, ``ml_dtypes.bfloat16`` for ``bfloat16``: the NumPy type name,
    without a ``|`` that would split a cell, read from the registry's string (tools/ does not
    need ``ml_dtypes`` to render it)."""
    if dtype[0] in "<>|=":
        return f"`{np.dtype(dtype).name}`"
    return f"`ml_dtypes.{dtype}`"


def raw_bits_name(d: DType) -> str:
    """How to get the stored bits of a type NumPy lacks: ``.view(np.uint16)``; else a dash."""
    if d.numpy[0] in "<>|=":
        return "-"
    return f"`.view(np.uint{8 * d.itemsize})`"


def requirement_prefix(rid: str) -> str:
    """``HDR`` for ``HDR-1``, ``V1`` for ``V1-3``."""
    return rid.rsplit("-", 1)[0]


def _no_arg(kind: str, arg: str | None) -> None:
    if arg is not None:
        raise DocgenError(f"kind {kind!r} takes no argument, got {arg!r}")


# --------------------------------------------------------------------------- renderers


def render_struct(arg: str | None, page: Path) -> list[str]:
    """Field table of ``Header``, ``Trailer`` or ``Entry``."""
    struct = STRUCTS.get(arg or "")
    if struct is None:
        raise DocgenError(f"struct needs one of {sorted(STRUCTS)}, got {arg!r}")
    rows = []
    for row in schema.field_table(struct):
        type_name = str(row["type"])
        if " = " in type_name:  # a Const: show its bytes in the spec's hex notation
            declared, literal = type_name.split(" = ", 1)
            type_name = f"{declared} = `{hex_bytes(ast.literal_eval(literal))}`"
        offset = int(row["offset"])
        rows.append(
            (
                f"0x{offset:02X} ({offset})",
                row["size"],
                type_name,
                f"`{row['name']}`",
                link_citations(str(row["meaning"]), page),
            )
        )
    lines = table(("offset", "size", "type", "field", "meaning"), rows)
    return [*lines, "", f"Size: {struct.sizeof()} bytes."]


def render_index_sections(arg: str | None, page: Path) -> list[str]:
    """The index region's sections, in order, with their offsets and sizes."""
    _no_arg("index-sections", arg)
    entry, align = schema.ENTRY_SIZE, INDEX_SECTION_ALIGN
    table_size = "4 * (2**bucket_bits + 1)"
    rows = [
        ("1", "bucket table", "0", f"`T = {table_size}`", "u32 cumulative entry counts"),
        ("2", "padding", "`T`", "`B - T` (4, or 0 when `bucket_bits` is 0)", "zero bytes"),
        (
            "3",
            "entries",
            f"`B = align(T, {align})`",
            f"`{entry} * tensor_count`",
            f"{entry}-byte entries",
        ),
        (
            "4",
            "dims",
            f"`D = B + {entry} * tensor_count`",
            "`8 * dims_count`",
            "u64 dimensions, in entry order",
        ),
        ("5", "name pool", "`N = D + 8 * dims_count`", "`names_length`", "UTF-8 names"),
        ("6", "metadata", "`N + names_length`", "`metadata_length`", "UTF-8 JSON object"),
    ]
    header = ("#", "section", "starts at (from `index_offset`)", "size in bytes", "contents")
    total = f"B + {entry} * tensor_count + 8 * dims_count + names_length + metadata_length"
    return [*table(header, rows), "", f"Total: `index_length = {total}`."]


def render_dtypes(arg: str | None, page: Path) -> list[str]:
    _no_arg("dtypes", arg)
    rows = [
        (d.code, f"`{d.name}`", d.itemsize, numpy_name(d.numpy), raw_bits_name(d), d.meaning)
        for d in DTYPES
    ]
    return table(("code", "name", "item size", "NumPy", "raw bits", "meaning"), rows)


def render_layouts(arg: str | None, page: Path) -> list[str]:
    _no_arg("layouts", arg)
    rows = [
        (
            layout.code,
            f"`{layout.name}`",
            layout.role,
            "yes" if layout.quantized else "no",
            "reserved" if layout.reserved else "defined",
            layout.meaning,
        )
        for layout in LAYOUTS
    ]
    return table(("code", "name", "role", "quantised", "in 2.0", "meaning"), rows)


def render_flags(arg: str | None, page: Path) -> list[str]:
    _no_arg("flags", arg)
    if not FLAGS:
        return [
            "None defined in 2.0: every bit of `required_flags` and of `optional_flags` is "
            "reserved."
        ]
    rows = [
        (f.bit, f"`{f.name}`", "required" if f.required else "optional", f.since, f.meaning)
        for f in FLAGS
    ]
    return table(("bit", "name", "set", "since", "meaning"), rows)


def render_limits(arg: str | None, page: Path) -> list[str]:
    _no_arg("limits", arg)
    rows = [
        (
            f"`{limit.name}`",
            power_of_two(limit.value),
            limit.unit,
            requirement_link(limit.requirement, page),
            limit.meaning,
        )
        for limit in LIMITS
    ]
    lines = table(("limit", "value", "unit", "requirement", "applies to"), rows)
    size = largest_index()
    largest = f"{size} bytes (about {size / 2**30:.1f} GiB)"
    return [*lines, "", f"The largest index region these limits allow: {largest}."]


def largest_index() -> int:
    """``index_length`` of a file at every limit at once (names dominate)."""
    by_name = {limit.name: limit.value for limit in LIMITS}
    tensors = by_name["max_tensors"]
    return index_geometry(
        index_offset=0,
        bucket_bits=by_name["max_bucket_bits"],
        tensor_count=tensors,
        dims_count=by_name["max_dims"] * tensors,
        names_length=by_name["max_name_length"] * tensors,
        metadata_length=by_name["max_metadata_length"],
    ).length


def render_errors(arg: str | None, page: Path) -> list[str]:
    _no_arg("errors", arg)
    rows = [
        (
            f"`{e.code}`",
            f"`{e.error_class}`",
            ", ".join(requirement_link(rid, page) for rid in e.requirements),
            e.meaning,
        )
        for e in ERROR_CODES
    ]
    return table(("code", "class", "requirements", "meaning"), rows)


def requirement_item(req: Requirement) -> str:
    """One statement as a list item led by its anchor."""
    return f'- <a id="{req.id}"></a>[**{req.id}**](#{req.id}) ({req.level}) {req.text}'


def render_requirements(arg: str | None, page: Path) -> list[str]:
    """The statements of one prefix, in registry order."""
    chosen = [r for r in REQUIREMENTS if requirement_prefix(r.id) == arg]
    if not chosen:
        known = sorted({requirement_prefix(r.id) for r in REQUIREMENTS})
        raise DocgenError(f"requirements needs one of {known}, got {arg!r}")
    return [requirement_item(r) for r in chosen]


def render_requirement_list(arg: str | None, page: Path) -> list[str]:
    """Statements picked by id or prefix, in the order given, each linked to its anchor."""
    if not arg:
        raise DocgenError("requirement-list needs ids or prefixes, such as RD-1,RD-2,LIM")
    prefixes = {requirement_prefix(r.id) for r in REQUIREMENTS}
    chosen: list[Requirement] = []
    for token in arg.split(","):
        if token in REQUIREMENT_BY_ID:
            picked = [REQUIREMENT_BY_ID[token]]
        elif token in prefixes:
            picked = [r for r in REQUIREMENTS if requirement_prefix(r.id) == token]
        else:
            raise DocgenError(f"requirement-list: no requirement or prefix {token!r}")
        chosen.extend(r for r in picked if r not in chosen)
    return [f"- {requirement_link(r.id, page)} ({r.level}) {r.text}" for r in chosen]


def render_requirement_index(arg: str | None, page: Path) -> list[str]:
    _no_arg("requirement-index", arg)
    rows = [(requirement_link(r.id, page), r.level, r.subject) for r in REQUIREMENTS]
    return table(("id", "level", "subject"), rows)


def render_hash_examples(arg: str | None, page: Path) -> list[str]:
    """Name hashes and buckets, so an implementation can check its FNV-1a and fold."""
    _no_arg("hash-examples", arg)
    header = ["name", "UTF-8 bytes", "`name_hash`"]
    header += [f"bucket, `bucket_bits` = {bits}" for bits in HASH_EXAMPLE_BITS]
    rows = []
    for name in HASH_EXAMPLE_NAMES:
        raw = name.encode("utf-8")
        h = fnv1a_64(raw)
        buckets = [bucket_of(h, bits) for bits in HASH_EXAMPLE_BITS]
        rows.append((f"`{name}`", len(raw), f"`0x{h:016X}`", *buckets))
    basis = f"offset basis `0x{FNV64_OFFSET_BASIS:016X}`, prime `0x{FNV64_PRIME:X}`"
    return [*table(header, rows), "", f"FNV-1a 64: {basis}."]


RENDERERS: dict[str, Callable[[str | None, Path], list[str]]] = {
    "struct": render_struct,
    "index-sections": render_index_sections,
    "dtypes": render_dtypes,
    "layouts": render_layouts,
    "flags": render_flags,
    "limits": render_limits,
    "errors": render_errors,
    "requirements": render_requirements,
    "requirement-index": render_requirement_index,
    "requirement-list": render_requirement_list,
    "hash-examples": render_hash_examples,
}


# --------------------------------------------------------------------------- regions


def is_foreign(kind: str) -> bool:
    return kind.startswith(FOREIGN_PREFIXES)


def find_regions(lines: Sequence[str], page: Path) -> list[Region]:
    """Every generated region of a page, checked for well-formed markers."""
    regions: list[Region] = []
    open_region: tuple[str, str | None, int] | None = None
    for number, line in enumerate(lines):
        match = BEGIN_RE.match(line)
        if line.startswith("<!-- BEGIN GENERATED") and match is None:
            raise DocgenError(f"{page}:{number + 1}: malformed BEGIN marker {line!r}")
        if match is not None:
            if open_region is not None:
                where = f"{page}:{number + 1}"
                raise DocgenError(f"{where}: BEGIN inside the region of line {open_region[2] + 1}")
            kind, arg = match.group("kind"), match.group("arg")
            if kind not in RENDERERS and not is_foreign(kind):
                raise DocgenError(f"{page}:{number + 1}: unknown kind {kind!r}")
            open_region = (kind, arg, number)
        elif line == END_LINE:
            if open_region is None:
                raise DocgenError(f"{page}:{number + 1}: END without BEGIN")
            regions.append(Region(open_region[0], open_region[1], open_region[2], number))
            open_region = None
    if open_region is not None:
        raise DocgenError(f"{page}:{open_region[2] + 1}: BEGIN without END")
    return regions


def render_region(region: Region, page: Path) -> list[str]:
    """The body of a region, with a blank line on each side so Markdown sees a block."""
    try:
        body = RENDERERS[region.kind](region.arg, page)
    except DocgenError as exc:
        raise DocgenError(f"{page}:{region.begin + 1}: {exc}") from exc
    return ["", *body, ""]


def render_text(text: str, page: Path) -> str:
    """``text`` with every docgen region regenerated; other text is kept byte for byte."""
    lines = text.split("\n")
    out: list[str] = []
    cursor = 0
    for region in find_regions(lines, page):
        out.extend(lines[cursor : region.begin + 1])
        if is_foreign(region.kind):
            out.extend(lines[region.begin + 1 : region.end])
        else:
            out.extend(render_region(region, page))
        cursor = region.end
    out.extend(lines[cursor:])
    return "\n".join(out)


def doc_files(docs: Path = DOCS) -> list[Path]:
    """Every Markdown page under ``docs``, in a fixed order."""
    return sorted(docs.rglob("*.md"))


def stale_files(paths: Sequence[Path]) -> list[Path]:
    """The pages whose generated regions differ from what the spec gives now."""
    stale = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if render_text(text, path) != text:
            stale.append(path)
    return stale


def write_files(paths: Sequence[Path]) -> list[Path]:
    """Regenerate the pages in place; returns those that changed."""
    changed = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        new = render_text(text, path)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(path)
    return changed


# --------------------------------------------------------------------------- command line


def _display(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.docgen",
        description="Regenerate the <!-- BEGIN GENERATED: kind [arg] --> regions of the docs "
        "from the spec modules. Exit status: 0 done (or up to date), 1 stale (--check), "
        "2 malformed region.",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming each stale file"
    )
    parser.add_argument(
        "paths", nargs="*", type=Path, help="Markdown files (default: every .md under docs/)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    paths: list[Path] = args.paths or doc_files()
    try:
        if args.check:
            stale = stale_files(paths)
            for path in stale:
                print(f"{_display(path)}: stale; run python -m tools.regen", file=sys.stderr)
            return 1 if stale else 0
        for path in write_files(paths):
            print(f"rewrote {_display(path)}")
    except DocgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
