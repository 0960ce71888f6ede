"""The command line: ``python -m tools.fuzz [options]`` (``--help`` lists them).

Exit status: 0 when every input passed, 1 on an unexpected exception, a worker death, a
timeout or memory over the limit (``--replay``: 1 when the input raised an unexpected
exception).
"""

from __future__ import annotations

import argparse
import os
import signal
import traceback
from collections.abc import Sequence
from pathlib import Path

import tools.fuzz
from tools.fuzz.harness import fuzz
from tools.fuzz.inputs import load_seeds, make_input
from tools.fuzz.report import report
from tools.fuzz.target import State, exercise


def replay(args: argparse.Namespace) -> int:
    """Write input --replay N to a file and run it here, in this process (for debugging)."""
    seeds = load_seeds(not args.v2_only)
    item = make_input(seeds, args.seed, args.replay)
    out = Path(args.out or f"fuzz-input-{args.seed}-{args.replay}.awq2")
    out.write_bytes(item.data)
    if item.config is not None:
        (out.parent / "config.json").write_bytes(item.config)
        print(f"wrote {out.parent / 'config.json'} too (AWQ v1 input)")
    print(
        f"input {args.replay} (--seed {args.seed}): base {item.base.id}, {len(item.data)} bytes "
        f"-> {out}"
    )
    for s in item.steps:
        print(f"  {s}")
    st = State()
    try:
        exercise(out, item.base.names, st)
    except Exception:
        traceback.print_exc()
        print(f"stage: {st.stage}")
        return 1
    print("accepted" if st.code is None else f"rejected: {st.code}")
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
        "--v2-only",
        action="store_true",
        help="no AWQ v1 (safetensors) seeds, only the conformance vectors",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--replay", type=int, metavar="N", help="rebuild and run input N here")
    parser.add_argument("--out", help="file for --replay")
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
    seeds = load_seeds(not args.v2_only)
    summary = fuzz(args, seeds)
    report(summary, args, len(seeds))
    return 1 if summary.failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
