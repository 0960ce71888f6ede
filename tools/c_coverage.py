"""Line coverage of the C loader by the conformance vectors, and by the vectors plus fuzz
corpora: ``python -m tools.c_coverage [CORPUS ...] [--uncovered]``.

Builds ``conformance/adapters/c`` (``main.c`` included: the adapter as the runner calls it)
with ``${CC:-cc} --coverage -O0`` into ``conformance/adapters/c/build/coverage/``, runs it
once on every vector of ``conformance/manifest.json`` and reads the counts with ``gcov``;
then runs it on every file of each CORPUS folder (``python -m tools.fuzz.libfuzzer
--corpus DIR`` keeps one) and reads them again.  Prints, per source file, the executable
lines and the share run by the vectors alone and by the vectors and the corpora.

``--uncovered`` also lists every rejection site that no input reached: each line of the
loader that calls ``awq2_fail`` (a check failing, with its error code) and was never run.
Exit status: 0, or 2 when the compiler or gcov is missing or the build fails.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tools.fuzz.libfuzzer import C_DIR, set_folders, vectors

BUILD = C_DIR / "build" / "coverage"
BINARY = BUILD / "awq2c"


@dataclass
class FileCoverage:
    """gcov's counts for one source file: line number -> times run (executable lines only)."""

    name: str
    counts: dict[int, int] = field(default_factory=dict)
    text: dict[int, str] = field(default_factory=dict)

    @property
    def lines(self) -> int:
        return len(self.counts)

    @property
    def covered(self) -> int:
        return sum(1 for n in self.counts.values() if n > 0)


def sources() -> list[Path]:
    return sorted(C_DIR.glob("*.c"))


def build() -> Path:
    """Every source compiled with --coverage (one .o and .gcno each), then linked."""
    shutil.rmtree(BUILD, ignore_errors=True)
    BUILD.mkdir(parents=True)
    cc = shlex.split(os.environ.get("CC") or "cc")
    objects = []
    for src in sources():
        obj = BUILD / (src.stem + ".o")
        _run([*cc, "-std=c11", "-O0", "-g", "--coverage", "-c", "-o", str(obj), str(src)])
        objects.append(str(obj))
    _run([*cc, "--coverage", "-o", str(BINARY), *objects])
    return BINARY


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(f"{shlex.join(cmd)}\n{done.stdout}{done.stderr}")
        raise SystemExit(2)


def run_on(files: Iterable[Path]) -> int:
    """The instrumented adapter once on each file (its counts add up in the .gcda files)."""
    n = 0
    for path in files:
        try:
            subprocess.run(
                [str(BINARY), str(path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            print(f"   {path}: over 120 s, skipped")
        n += 1
    return n


_GCOV_LINE = re.compile(r"^\s*([0-9]+\*?|#####|=====|-):\s*(\d+):(.*)$")


def read_counts() -> dict[str, FileCoverage]:
    """gcov's line counts of every source, as the .gcda files stand."""
    out: dict[str, FileCoverage] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for src in sources():
            done = subprocess.run(
                ["gcov", "-t", "-o", str(BUILD), str(src)],
                capture_output=True,
                text=True,
                cwd=scratch,
            )
            cov = out.setdefault(src.name, FileCoverage(src.name))
            for line in done.stdout.splitlines():
                m = _GCOV_LINE.match(line)
                if not m or m.group(1) == "-" or int(m.group(2)) == 0:
                    continue
                count = m.group(1).rstrip("*")
                number = int(m.group(2))
                cov.counts[number] = 0 if count in ("#####", "=====") else int(count)
                cov.text[number] = m.group(3)
    return out


def table(first: dict[str, FileCoverage], second: dict[str, FileCoverage] | None) -> str:
    """One row per source file, and the total."""
    head = f"{'file':<12} {'lines':>6} {'vectors':>16}"
    if second is not None:
        head += f" {'vectors + corpus':>18}"
    rows = [head]

    def pct(n: int, d: int) -> str:
        return f"{n:>5} {100 * n / d:6.1f}%" if d else f"{n:>5}    n/a"

    total = [0, 0, 0]
    for name, cov in sorted(first.items()):
        row = f"{name:<12} {cov.lines:>6} {pct(cov.covered, cov.lines):>16}"
        total[0] += cov.lines
        total[1] += cov.covered
        if second is not None:
            row += f" {pct(second[name].covered, cov.lines):>18}"
            total[2] += second[name].covered
        rows.append(row)
    last = f"{'total':<12} {total[0]:>6} {pct(total[1], total[0]):>16}"
    if second is not None:
        last += f" {pct(total[2], total[0]):>18}"
    rows.append(last)
    return "\n".join(rows)


def unreached_rejections(counts: dict[str, FileCoverage]) -> list[str]:
    """Every awq2_fail call no input ran: file:line, the code and the line."""
    out = []
    for name, cov in sorted(counts.items()):
        for number in sorted(cov.counts):
            text = cov.text[number]
            if cov.counts[number] == 0 and "awq2_fail(" in text:
                code = re.search(r'"([A-Z_0-9]+)"', text)
                out.append(f"{name}:{number}: {code.group(1) if code else '?'}: {text.strip()}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.c_coverage",
        description="Line coverage of the C loader by the conformance vectors alone and by "
        "the vectors plus fuzz corpora (gcc --coverage, gcov).",
    )
    p.add_argument("corpus", nargs="*", type=Path, help="folders of fuzz inputs")
    p.add_argument(
        "--uncovered", action="store_true", help="list the rejection sites no input reached"
    )
    args = p.parse_args(argv)
    if shutil.which("gcov") is None:
        print("gcov not found (it comes with gcc)")
        return 2
    build()
    n = run_on([*vectors(), *set_folders()])  # files, and file sets' folders
    first = read_counts()
    second = None
    inputs = [f for d in args.corpus for f in sorted(d.iterdir()) if f.is_file()]
    if args.corpus:
        run_on(inputs)
        second = read_counts()
    where = f"{n} vectors" + (f"; {len(inputs)} corpus files" if args.corpus else "")
    print(f"C loader line coverage (gcov; {where}):")
    print(table(first, second))
    if args.uncovered:
        final = second or first
        sites = unreached_rejections(final)
        print(f"rejection sites not reached ({len(sites)}):")
        for site in sites:
            print(f"   {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
