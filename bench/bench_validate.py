"""Benchmark the memory and time of full validation and ``dump --json``, 100k and 1M tensors.

Usage: ``python bench/bench_validate.py [--quick] [--counts 100000,1000000] [--baseline DIR]``.

For each tensor count, one AWQ-v2 file of empty tensors named like the layers of a large MoE
model is written with the streaming ``reference.Writer`` (as ``bench_open.py`` does).  Each
case then runs in a fresh Python process, so that its peak memory is its own:

* ``open``      ``reference.Reader(path)`` only: the baseline;
* ``validate``  ``Reader(path)``, then ``validate()`` (timed);
* ``dump``      ``reference.dump.main([FILE, "--json"])`` to /dev/null (timed, open included).

Peak memory is the process's peak resident set (``VmHWM`` in ``/proc/self/status``, Linux;
``ru_maxrss`` would include the benchmark's own pages, copied at the fork), minus the
baseline's.  The mapped file's pages count in the resident set once touched, and full
validation touches the whole index, so "above the map" subtracts the file size too: what is
left is what the code allocates.  Target: ``validate()`` of a 1,000,000-tensor file peaks at
most 200 MiB above the file's mapped size.

``--baseline DIR`` runs the same cases with the ``reference`` package of another checkout
(``git archive <commit> | tar -x -C DIR``) and prints the two side by side with ratios; the
files are written once, by this checkout.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_open import synthetic_specs, write_awq2

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_COUNTS = (100_000, 1_000_000)
QUICK_COUNTS = (10_000, 100_000)
TARGET_COUNT = 1_000_000
TARGET_BYTES = 200 << 20  # validate() at TARGET_COUNT, above the mapped file

#: What one case runs in its fresh process: prints the seconds of the timed part and the
#: process's peak resident set (VmHWM: unlike ru_maxrss, not inherited from the parent's fork).
CHILD = """
import os, re, sys, time
import reference
import reference.dump
mode, path = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if mode == "dump":
    with open(os.devnull, "w") as sink:
        assert reference.dump.main([path, "--json"], out=sink) == 0
else:
    reader = reference.Reader(path)
    t0 = time.perf_counter()
    if mode == "validate":
        reader.validate()
seconds = time.perf_counter() - t0
with open("/proc/self/status") as status:
    hwm = int(re.search(r"VmHWM:\\s*(\\d+) kB", status.read()).group(1)) * 1024
print(seconds, hwm)
"""


@dataclass(frozen=True)
class Case:
    seconds: float
    maxrss: int  # bytes


def run_case(mode: str, path: Path, code: Path) -> Case:
    """One case in a fresh process using the ``reference`` package under ``code``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    argv = [sys.executable, "-c", CHILD, mode, str(path)]
    out = subprocess.run(argv, cwd=code, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"{mode} of {path} with {code} exited {out.returncode}:\n{out.stderr}")
    seconds, hwm = out.stdout.split()
    return Case(float(seconds), int(hwm))


@dataclass(frozen=True)
class Row:
    count: int
    file_size: int
    open: Case
    validate: Case
    dump: Case

    def above_map(self, case: Case) -> int:
        """Peak RSS above the open-only baseline and above the whole mapped file."""
        return case.maxrss - self.open.maxrss - self.file_size


def measure(path: Path, count: int, code: Path) -> Row:
    cases = {mode: run_case(mode, path, code) for mode in ("open", "validate", "dump")}
    return Row(count, path.stat().st_size, **cases)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def print_table(head: list[str], lines: list[list[str]]) -> None:
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=True)]
    for cells in [head, ["-" * w for w in widths], *lines]:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(cells, widths, strict=True))))  # fmt: skip


def row_cells(label: str, r: Row) -> list[str]:
    v, d = r.above_map(r.validate), r.above_map(r.dump)
    return [
        f"{label}{r.count:,}",
        mib(r.file_size),
        f"{r.validate.seconds:.2f} s",
        mib(v),
        f"{v / r.count:,.0f} B",
        f"{r.dump.seconds:.2f} s",
        mib(d),
        f"{d / r.count:,.0f} B",
    ]


HEAD = ["tensors", "file", "validate()", "peak above map", "per tensor"]
HEAD += ["dump --json", "peak above map", "per tensor"]


def print_ratios(rows: list[Row], base: list[Row]) -> None:
    print("\nbaseline / this checkout:")
    lines = []
    for r, b in zip(rows, base, strict=True):
        lines.append(
            [
                f"{r.count:,}",
                f"{b.validate.seconds / r.validate.seconds:.2f}x",
                f"{b.above_map(b.validate) / max(r.above_map(r.validate), 1):.1f}x",
                f"{b.dump.seconds / r.dump.seconds:.2f}x",
                f"{b.above_map(b.dump) / max(r.above_map(r.dump), 1):.1f}x",
            ]
        )
    print_table(["tensors", "validate time", "validate peak", "dump time", "dump peak"], lines)


def print_target(rows: list[Row], label: str) -> None:
    top = next((r for r in rows if r.count == TARGET_COUNT), None)
    if top is None:
        print(f"target    {label}: not measured (needs {TARGET_COUNT:,} tensors)")
        return
    above = top.above_map(top.validate)
    verdict = "PASS" if above <= TARGET_BYTES else "FAIL"
    print(
        f"target    {label}: validate() of {TARGET_COUNT:,} tensors peaks {mib(above)} above "
        f"the mapped file, target <= {mib(TARGET_BYTES)}: {verdict}"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="10k and 100k tensors")
    parser.add_argument("--counts", help="comma-separated tensor counts")
    parser.add_argument(
        "--baseline", type=Path, metavar="DIR", help="another checkout to measure beside this one"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.counts:
        counts = sorted(int(c.replace("_", "")) for c in args.counts.split(","))
    else:
        counts = list(QUICK_COUNTS if args.quick else DEFAULT_COUNTS)
    print(f"python {platform.python_version()}, numpy {np.__version__}, ", end="")
    print(f"os.cpu_count() = {os.cpu_count()}")
    print("peak = VmHWM of a fresh process, minus an open-only process and the file size")
    specs = synthetic_specs(max(counts))
    rows, base = [], []
    with tempfile.TemporaryDirectory(prefix="bench_validate.") as tmp:
        for count in counts:
            path = Path(tmp) / f"n{count}.awq2"
            write_s = write_awq2(path, specs[:count])
            print(f"  wrote {count:,} tensors in {write_s:.1f} s ({mib(path.stat().st_size)})")
            rows.append(measure(path, count, ROOT))
            if args.baseline:
                base.append(measure(path, count, args.baseline.resolve()))
            path.unlink()
    for label, table in (("this checkout", rows), (f"baseline {args.baseline}", base)):
        if table:
            print(f"\n{label}:")
            print_table(HEAD, [row_cells("", r) for r in table])
    if base:
        print_ratios(rows, base)
    print()
    print_target(rows, "this checkout")
    if base:
        print_target(base, "baseline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
