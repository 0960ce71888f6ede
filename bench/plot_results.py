"""Draw the recorded whole-model load figures of ``docs/benchmarks.md`` as an SVG chart.

Usage: ``python bench/plot_results.py [--check]``.

The chart is a view of the page's table, not a new measurement: it reads the table of the
section "Load a whole model" (one run of ``python bench/bench_load.py``: the 1B Llama shape,
best of 3 repeats, warm and cold page cache) and writes ``docs/assets/bench_load.svg``, each
bar labelled with its figure. Change the table (a new run) and run this again; ``--check``
writes nothing and exits 1 when the committed chart is not what the table gives (the test
suite runs it). Exit status 2 when the table is missing or malformed.

The chart is a light card with its own background, so that it reads the same in the site's
light and dark palettes (an ``<img>`` cannot take the page's colours), with a ``<title>`` and
a ``<desc>`` that give every figure to a screen reader.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "assets" / "bench_load.svg"
#: The header row of the table the chart draws.
TABLE_HEADER = "| case | warm page cache | cold cache | what it is |"
#: The command that printed the table, as the page and the chart name it.
COMMAND = "python bench/bench_load.py"
ROW_RE = re.compile(
    r"^\| (?P<case>\((?P<key>[a-z0-9]+)\) [^|]+?) \| (?P<warm>[0-9.]+) s \| (?P<cold>[0-9.]+) s \|"
)
WARM, COLD, INK, GRID, CARD = "#ff9800", "#3f51b5", "#212121", "#e0e0e0", "#ffffff"
WIDTH, LABEL_W, BAR_H = 720, 250, 13


class TableError(ValueError):
    """The page has no table of the expected form: the message says what is missing."""


@dataclass(frozen=True)
class Case:
    key: str  # "a", "b", "b3", ...
    label: str  # the case as the table names it, with its key
    warm: float  # seconds
    cold: float


def read_cases(text: str) -> list[Case]:
    """The rows of the whole-model load table, in the page's order."""
    lines = text.splitlines()
    try:
        start = lines.index(TABLE_HEADER)
    except ValueError:
        raise TableError(f"{PAGE.name}: no table with the header {TABLE_HEADER!r}") from None
    cases = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        match = ROW_RE.match(line)
        if match is None:
            raise TableError(f"{PAGE.name}: a row of the load table is not understood: {line!r}")
        case = match["case"].replace("`", "")
        cases.append(Case(match["key"], case, float(match["warm"]), float(match["cold"])))
    if not cases:
        raise TableError(f"{PAGE.name}: the load table has no rows")
    return cases


def _text(
    x: float, y: float, text: str, *, size: int = 12, anchor: str = "start", bold: bool = False
) -> str:
    extra = f' text-anchor="{anchor}"' if anchor != "start" else ""
    extra += ' font-weight="bold"' if bold else ""
    return f'<text x="{x:g}" y="{y:g}" font-size="{size}" fill="{INK}"{extra}>{escape(text)}</text>'


def _scale_top(cases: Sequence[Case]) -> float:
    """The axis end: the largest figure rounded up to a step of 0.1, 0.5 or 1 s."""
    top = max(max(c.warm, c.cold) for c in cases)
    step = 0.1 if top <= 1 else 0.5 if top <= 5 else 1.0
    return -(-top // step) * step


def panel(cases: Sequence[Case], y: float, title: str) -> tuple[list[str], float]:
    """One horizontal bar chart, warm and cold bar per case, from ``y``; its height."""
    top = _scale_top(cases)
    plot_w = WIDTH - LABEL_W - 70
    out = [_text(10, y + 14, title, size=13, bold=True)]
    y0 = y + 26
    ticks = 5
    height = len(cases) * (2 * BAR_H + 10)
    for i in range(ticks + 1):
        x = LABEL_W + plot_w * i / ticks
        out.append(
            f'<line x1="{x:g}" y1="{y0:g}" x2="{x:g}" y2="{y0 + height:g}" stroke="{GRID}"/>'
        )
        out.append(_text(x, y0 + height + 14, f"{top * i / ticks:.2f} s", size=10, anchor="middle"))
    for j, case in enumerate(cases):
        cy = y0 + j * (2 * BAR_H + 10) + 5
        label = case.label if len(case.label) <= 40 else case.label[:39] + "\u2026"
        out.append(_text(LABEL_W - 8, cy + BAR_H + 4, label, size=11, anchor="end"))
        for k, (value, colour) in enumerate(((case.warm, WARM), (case.cold, COLD))):
            w = plot_w * value / top
            by = cy + k * BAR_H
            out.append(
                f'<rect x="{LABEL_W}" y="{by:g}" width="{w:.1f}" height="{BAR_H - 1}" '
                f'fill="{colour}"/>'
            )
            out.append(_text(LABEL_W + w + 4, by + BAR_H - 3, f"{value:.3f} s", size=10))
    return out, 26 + height + 22


def chart(cases: Sequence[Case]) -> str:
    """The SVG: every case, then the cases that read the file on their own scale."""
    figures = "; ".join(f"{c.label}: {c.warm} s warm, {c.cold} s cold" for c in cases)
    reads = [c for c in cases if c.key != "a"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="HEIGHT" '
        f'viewBox="0 0 {WIDTH} HEIGHT" role="img" aria-labelledby="t d" font-family="sans-serif">',
        '<title id="t">Loading a whole 1B-shaped model: every tensor into memory</title>',
        f'<desc id="d">Best of 3 repeats, warm and cold page cache, from one run of {COMMAND}. '
        f"{escape(figures)}.</desc>",
        f'<rect width="{WIDTH}" height="HEIGHT" fill="{CARD}"/>',
        _text(
            10, 18, "Loading a whole 1B-shaped model: every tensor into memory", size=14, bold=True
        ),
        f'<rect x="{LABEL_W}" y="28" width="12" height="10" fill="{WARM}"/>',
        _text(LABEL_W + 16, 37, "warm page cache", size=11),
        f'<rect x="{LABEL_W + 130}" y="28" width="12" height="10" fill="{COLD}"/>',
        _text(LABEL_W + 146, 37, "cold cache (dropped before each repeat)", size=11),
    ]
    y = 44.0
    for subset, title in (
        (cases, "Every case (seconds, shorter is better)"),
        (reads, "The cases that read the file, on their own scale"),
    ):
        drawn, height = panel(subset, y, title)
        parts += drawn
        y += height
    parts.append(
        _text(
            10,
            y + 10,
            f"One run of {COMMAND} (1B Llama shape, best of 3), as "
            "tabled on this page; drawn by python bench/plot_results.py.",
            size=11,
        )
    )
    parts.append("</svg>")
    return "\n".join(parts).replace("HEIGHT", f"{y + 20:g}") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the committed chart is stale"
    )
    args = parser.parse_args(argv)
    try:
        svg = chart(read_cases(PAGE.read_text(encoding="utf-8")))
    except TableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rel = CHART.relative_to(ROOT)
    fresh = CHART.is_file() and CHART.read_text(encoding="utf-8") == svg
    if args.check:
        if not fresh:
            print(f"{rel}: stale; run python bench/plot_results.py", file=sys.stderr)
        return 0 if fresh else 1
    if not fresh:
        CHART.write_text(svg, encoding="utf-8")
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
