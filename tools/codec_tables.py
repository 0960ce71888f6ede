"""Worked-example tables of the codec chapter (``docs/spec/codec.md``), computed from its formulas.

The tables are generated so that they cannot be mistyped.  Every number comes from the
position formulas below, which restate the Marlin definitions of the codec chapter in plain
Python integers; nothing here imports the reference implementation, so that the test
suite's comparison of these formulas with ``reference.quant.codec`` checks one against the
other.  The test suite also checks that the chapter holds exactly this output.

``python -m tools.codec_tables`` prints every region with its markers;
``--check PATH`` exits 1 when the regions of PATH differ from the output;
``--write PATH`` rewrites the regions of PATH in place.  ``python -m tools.regen`` writes
(or, with ``--check``, checks) ``docs/spec/codec.md`` with every other generated file.

In the chapter a region is delimited by ``<!-- BEGIN GENERATED: <name> -->`` and
``<!-- END GENERATED -->`` lines, with exactly :func:`region` of ``<name>`` between them.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from spec import marlin
from spec.marlin import AWQ_ORDER, QUANT_BITS, TILE_K, TILE_N
from tools import DOCS

#: The chapter whose regions these tables fill.
CHAPTER = DOCS / "spec" / "codec.md"
BEGIN = "<!-- BEGIN GENERATED: {name} -->"
END = "<!-- END GENERATED -->"


# ---------------------------------------------------------------------------------- formulas


def pack_factor(bits: int) -> int:
    """``pf = 32 // bits``: codes per 32-bit word (8 for 4-bit, 4 for 8-bit)."""
    if bits not in QUANT_BITS:
        raise ValueError(f"bits must be 4 or 8, got {bits!r}")
    return marlin.pack_factor(bits)


def tile_words(bits: int) -> int:
    """Words per 16x64 Marlin tile: ``1024 // pf``."""
    return TILE_K * TILE_N // pack_factor(bits)


def marlin_code_at(row: int, word: int, field: int, bits: int) -> tuple[int, int]:
    """Forward map: the index ``(row, col)`` in ``q`` of the code that Marlin qweight word
    ``word`` of array row ``row`` (the codec chapter's ``R``) holds in field ``field``.
    ``word`` is the column in the row (tile ``T = word // tile_words``).
    """
    pf = pack_factor(bits)
    if not 0 <= field < pf:
        raise ValueError(f"field must be in 0..{pf - 1}, got {field}")
    tile, w = divmod(word, tile_words(bits))
    if bits == 4:
        lane, sub = divmod(w, 4)  # w = 4L + S
        dk, rest = divmod(field, 4)  # f = 4*dk + 2*blk + hk
        blk, hk = divmod(rest, 2)
    else:
        lane, rest = divmod(w, 8)  # w = 8L + 2S + blk
        sub, blk = divmod(rest, 2)
        dk, hk = divmod(field, 2)  # f = 2*dk + hk
    k = TILE_K * row + 2 * (lane % 4) + dk + 8 * hk
    n = TILE_N * tile + 16 * sub + lane // 4 + 8 * blk
    return k, n


def marlin_position(k: int, n: int, bits: int) -> tuple[int, int, int]:
    """Inverse map: ``(R, word, field)`` of the Marlin qweight that holds code ``q[k][n]``
    (``k``, ``n`` here the indices the codec chapter calls ``row`` and ``col``)."""
    row, kk = divmod(k, TILE_K)  # kk = 2*(L % 4) + dk + 8*hk
    tile, nn = divmod(n, TILE_N)  # nn = 16*S + L // 4 + 8*blk
    hk, rest = divmod(kk, 8)
    l4, dk = divmod(rest, 2)
    sub, rest = divmod(nn, 16)
    blk, c = divmod(rest, 8)
    lane = 4 * c + l4
    if bits == 4:
        w, field = 4 * lane + sub, 4 * dk + 2 * blk + hk
    else:
        w, field = 8 * lane + 2 * sub + blk, 2 * dk + hk
    return row, tile * tile_words(bits) + w, field


def grouped_scale_source(col: int) -> int:
    """Grouped map (each 64 columns an 8x8 transpose): ``out[col] = in[source]``."""
    b, rest = divmod(col, 64)
    i, j = divmod(rest, 8)  # col = 64b + 8i + j
    return 64 * b + 8 * j + i


def channelwise_scale_source(col: int) -> int:
    """Channelwise map (each 32 columns): ``out[32b + 8a + 2p + r] = in[32b + 8p + 2a + r]``."""
    b, rest = divmod(col, 32)
    a, rest = divmod(rest, 8)
    p, r = divmod(rest, 2)
    return 32 * b + 8 * p + 2 * a + r


#: Shape ``[k, n]`` of the check layer whose first words :func:`check_words_table` lists.
CHECK_K, CHECK_N = 32, 128
#: Multiplier of the check pattern (Fibonacci hashing: 2**32 divided by the golden ratio).
CHECK_MULTIPLIER = 0x9E3779B1


def check_code(bits: int, k: int, n: int) -> int:
    """The check layer's code ``q[k][n]``: the top ``bits`` bits of the 32-bit product
    ``(k * CHECK_N + n) * 0x9E3779B1 mod 2**32``."""
    product = ((k * CHECK_N + n) * CHECK_MULTIPLIER) & 0xFFFFFFFF
    return product >> (32 - bits)


def marlin_word(row: int, word: int, bits: int, code: Callable[[int, int], int]) -> int:
    """The unsigned 32-bit value of Marlin qweight word ``(row, word)`` for codes ``code(k, n)``."""
    value = 0
    for field in range(pack_factor(bits)):
        value |= code(*marlin_code_at(row, word, field, bits)) << (bits * field)
    return value


def awq_word(row: int, col: int, bits: int, code: Callable[[int, int], int]) -> int:
    """The unsigned value of AWQ-packed word ``(row, col)``: field ``i`` holds
    ``code(row, pf*col + ORDER[i])``.  AWQ_QWEIGHT and AWQ_QZEROS words."""
    pf = pack_factor(bits)
    value = 0
    for i, j in enumerate(AWQ_ORDER[bits]):
        value |= code(row, pf * col + j) << (bits * i)
    return value


def marlin_zero_word(group: int, col: int, bits: int, zero: Callable[[int, int], int]) -> int:
    """The unsigned value of MARLIN_QZEROS word ``(group, col)`` for zero points
    ``zero(g, n)``: AWQ packing of the 64-column 8x8 transpose of the zero points."""
    return awq_word(group, col, bits, lambda g, m: zero(g, grouped_scale_source(m)))


# ---------------------------------------------------------------------------------- tables


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def tile_table(bits: int, words: int | None = None) -> str:
    """Tile 0 of row 0, by default lanes 0 and 1: the ``(row, col)`` of ``q`` each field of
    each word holds."""
    pf = pack_factor(bits)
    per_lane = 4 if bits == 4 else 8
    if words is None:
        words = 2 * per_lane
    header = ["word", "L", "S"] + ([] if bits == 4 else ["blk"])
    header += [f"field {f} (bits {bits * f}..{bits * f + bits - 1})" for f in range(pf)]
    rows = []
    for w in range(words):
        lane, rest = divmod(w, per_lane)
        cells: list[object] = [w, lane]
        cells += [rest] if bits == 4 else [rest // 2, rest % 2]
        for f in range(pf):
            k, n = marlin_code_at(0, w, f, bits)
            cells.append(f"({k}, {n})")
        rows.append(cells)
    return "\n".join(_table(header, rows))


def subtile_table() -> str:
    """Inverse view, 4-bit: for each code of the 16x16 block row, col < 16 of tile 0,
    ``word.field`` where it is stored (array row 0)."""
    header = ["row \\ col"] + [str(n) for n in range(16)]
    rows = []
    for k in range(16):
        cells: list[object] = [k]
        for n in range(16):
            _, word, field = marlin_position(k, n, 4)
            cells.append(f"{word}.{field}")
        rows.append(cells)
    return "\n".join(_table(header, rows))


def check_words(bits: int) -> list[tuple[int, int]]:
    """``(row, word)`` of the check words: row 0 words 0..7, the first word of tile 1 in
    row 0, and the first word of row 1."""
    return [(0, w) for w in range(8)] + [(0, tile_words(bits)), (1, 0)]


def check_words_table(bits: int) -> str:
    """Words of the check layer (``CHECK_K x CHECK_N`` codes :func:`check_code`) as ``u32``
    values and as the bytes they occupy in the payload."""
    width = CHECK_N * 16 // pack_factor(bits)
    rows = []
    for row, w in check_words(bits):
        value = marlin_word(row, w, bits, lambda k, n: check_code(bits, k, n))
        raw = " ".join(f"{b:02x}" for b in value.to_bytes(4, "little"))
        rows.append([row, w, 4 * (row * width + w), f"`0x{value:08X}`", f"`{raw}`"])
    header = ["R", "word", "byte offset", "value (u32)", "bytes in the payload"]
    return "\n".join(_table(header, rows))


def packing_check_table() -> str:
    """AWQ_QWEIGHT and MARLIN_QZEROS words of the check layer (its codes as ``q``; its
    row 0 as the zero points of group 0), 4- and 8-bit."""
    rows: list[list[object]] = []
    for bits in (4, 8):
        pf = pack_factor(bits)
        width = CHECK_N // pf

        def code(k: int, n: int, bits: int = bits) -> int:
            return check_code(bits, k, n)

        for layout, word, row, col in (
            ("AWQ_QWEIGHT", awq_word, 0, 0),
            ("AWQ_QWEIGHT", awq_word, 0, 1),
            ("AWQ_QWEIGHT", awq_word, 1, 0),
            ("MARLIN_QZEROS", marlin_zero_word, 0, 0),
            ("MARLIN_QZEROS", marlin_zero_word, 0, 1),
            ("MARLIN_QZEROS", marlin_zero_word, 0, 64 // pf),
        ):
            value = word(row, col, bits, code)
            raw = " ".join(f"{b:02x}" for b in value.to_bytes(4, "little"))
            offset = 4 * (row * width + col)
            rows.append([layout, bits, row, col, offset, f"`0x{value:08X}`", f"`{raw}`"])
    header = ["layout", "bits", "row", "word", "byte offset", "value (u32)", "bytes"]
    return "\n".join(_table(header, rows))


def scale_map_table(kind: str) -> str:
    """One run of a scale map: the input column each output column takes (``out[col] = in[x]``)."""
    if kind == "grouped":
        source, width = grouped_scale_source, 64
    elif kind == "channelwise":
        source, width = channelwise_scale_source, 32
    else:
        raise ValueError(f"kind must be 'grouped' or 'channelwise', got {kind!r}")
    header = ["out columns"] + [f"+{j}" for j in range(8)]
    rows = []
    for base in range(0, width, 8):
        rows.append([f"{base}..{base + 7}"] + [source(base + j) for j in range(8)])
    return "\n".join(_table(header, rows))


#: Region name -> generator of its Markdown.
REGIONS: dict[str, Callable[[], str]] = {
    "codec-tile-4bit": lambda: tile_table(4),
    "codec-tile-8bit": lambda: tile_table(8),
    "codec-subtile-4bit": subtile_table,
    "codec-check-4bit": lambda: check_words_table(4),
    "codec-check-8bit": lambda: check_words_table(8),
    "codec-check-packing": packing_check_table,
    "codec-scales-grouped": lambda: scale_map_table("grouped"),
    "codec-scales-channelwise": lambda: scale_map_table("channelwise"),
}


def region(name: str) -> str:
    """The exact text between the markers of region ``name`` (ends with a newline)."""
    return REGIONS[name]() + "\n"


# ---------------------------------------------------------------------------------- documents

_REGION_RE = re.compile(
    r"^<!-- BEGIN GENERATED: (?P<name>[A-Za-z0-9_-]+) -->\n(?P<body>.*?)^<!-- END GENERATED -->$",
    re.MULTILINE | re.DOTALL,
)


def regions_in(text: str) -> dict[str, str]:
    """The generated regions of a document: name -> the text between its markers."""
    found: dict[str, str] = {}
    for match in _REGION_RE.finditer(text):
        name = match["name"]
        if name in found:
            raise ValueError(f"region {name!r} appears twice")
        found[name] = match["body"]
    return found


def render(text: str) -> str:
    """``text`` with every known region's body replaced by the generator's output."""

    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in REGIONS:
            return match[0]
        return f"{BEGIN.format(name=name)}\n{region(name)}{END}"

    return _REGION_RE.sub(fill, text)


def stale_regions(text: str) -> list[str]:
    """Names of the regions that are missing from ``text`` or differ from the output."""
    found = regions_in(text)
    return [name for name in REGIONS if found.get(name) != region(name)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.codec_tables", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", metavar="PATH", type=Path, help="exit 1 if PATH is stale")
    group.add_argument("--write", metavar="PATH", type=Path, help="rewrite PATH's regions")
    args = parser.parse_args(argv)
    if args.check is not None:
        stale = stale_regions(args.check.read_text(encoding="utf-8"))
        for name in stale:
            print(
                f"{args.check}: region {name} is missing or stale; run python -m tools.regen",
                file=sys.stderr,
            )
        return 1 if stale else 0
    if args.write is not None:
        text = args.write.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            args.write.write_text(new, encoding="utf-8")
        missing = [name for name in REGIONS if name not in regions_in(new)]
        for name in missing:
            print(f"{args.write}: no markers for region {name}", file=sys.stderr)
        return 1 if missing else 0
    blocks = [f"{BEGIN.format(name=name)}\n{region(name)}{END}" for name in REGIONS]
    print("\n\n".join(blocks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
