"""The command line: ``python -m tools.fuzz [options]`` (``--help`` lists them).

Exit status: 0 when every input passed, 1 on an unexpected exception, a worker death, a
timeout or memory over the limit (``--replay``: 1 when the input raised an unexpected
exception).
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

import tools.fuzz
from tools.fuzz.harness import fuzz
from tools.fuzz.inputs import FOLDER, load_seeds, make_input, write_input
from tools.fuzz.mutant import Seed
from tools.fuzz.report import report
from tools.fuzz.target import State, convert, exercise


def _seeds(args: argparse.Namespace) -> list[Seed]:
    only = "v2" if args.v2_only else args.only
    return load_seeds(with_v1=only != "v2", with_v2=only != "v1")


def replay(args: argparse.Namespace) -> int:
    """Write input --replay N out (an AWQ-v2 file, or an AWQ v1 checkpoint folder) and run
    it here, in this process (for debugging)."""
    item = make_input(_seeds(args), args.seed, args.replay)
    out = Path(args.out or f"fuzz-input-{args.seed}-{args.replay}{item.suffix}")
    first = write_input(item, out)
    folder = first.parent if item.targets[0] != FOLDER else first
    print(
        f"input {args.replay} (--seed {args.seed}): base {item.base.id}, {item.size} bytes "
        f"-> {first if not item.v1 else folder}"
        + (f" ({', '.join(sorted(item.files))})" if item.v1 else "")
    )
    for s in item.steps:
        print(f"  {s}")
    for target in item.targets:
        st = State()
        path = folder / target if item.v1 else first
        try:
            exercise(path, item.base.names, st)
        except Exception:
            traceback.print_exc()
            print(f"{path}: stage {st.stage}")
            return 1
        print(f"{path}: " + ("accepted" if st.code is None else f"rejected: {st.code}"))
    if item.convert:
        st = State()
        try:
            with tempfile.TemporaryDirectory() as scratch:
                convert(folder / item.targets[0], Path(scratch), st)
        except Exception:
            traceback.print_exc()
            print(f"stage: {st.stage}")
            return 1
        print("reference.convert.main: a documented status")
    return 0


def build_parser() -> argparse.ArgumentParser:
    doc = tools.fuzz.__doc__ or ""
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=doc.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=None, help="stop after N inputs")
    parser.add_argument("--seconds", type=float, default=None, help="stop after S seconds")
    parser.add_argument("--seed", type=int, default=0, help="mutation seed (default 0)")
    parser.add_argument("--save-crashes", metavar="DIR", help="write failing inputs here")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per input")
    parser.add_argument(
        "--memory-limit",
        type=int,
        default=4096,
        metavar="MIB",
        help="RLIMIT_AS of each worker (0: none)",
    )
    parser.add_argument(
        "--trace-every",
        type=int,
        default=8,
        metavar="N",
        help="tracemalloc peak on every N-th input (1: all, 0: none; default 8); "
        "every input gets its peak RSS",
    )
    parser.add_argument("--progress", type=float, default=30.0, help="seconds between lines")
    parser.add_argument(
        "--only",
        choices=("v1", "v2"),
        help="only the AWQ v1 seeds (checkpoint files and folders) or only the AWQ-v2 "
        "conformance vectors; input N differs with it, so --replay needs it too",
    )
    parser.add_argument("--v2-only", action="store_true", help="the same as --only v2")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--replay", type=int, metavar="N", help="rebuild and run input N here")
    parser.add_argument(
        "--out",
        help="where --replay writes: the file (AWQ-v2) or the folder (AWQ v1) to write",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.replay is not None:
        return replay(args)
    if args.inputs is None and args.seconds is None:
        args.inputs = 10_000
    # stop cleanly, with the summary, on Ctrl-C or SIGTERM (a CI job cancelled), even when
    # started in the background by a shell that made SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    seeds = _seeds(args)
    summary = fuzz(args, seeds)
    report(summary, args, len(seeds))
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
