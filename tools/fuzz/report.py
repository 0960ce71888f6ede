"""The summary of a run, as printed at its end."""

from __future__ import annotations

import argparse

from tools.fuzz.harness import JSON_FACTOR, MEMORY_SLACK, Summary


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def report(s: Summary, args: argparse.Namespace, seeds: int) -> None:
    rate = s.inputs / s.seconds if s.seconds else 0.0
    print(
        f"fuzz: {s.inputs} inputs from {seeds} seed vectors, --seed {args.seed}, "
        f"{args.workers} workers, {s.seconds:.1f} s" + (" (interrupted)" if s.interrupted else "")
    )
    print(f"  accepted:              {s.accepted}")
    print(f"  rejected:              {sum(s.codes.values())}")
    for code, n in s.codes.most_common():
        print(f"    {code:<24} {n}")
    n_unexpected = sum(map(len, s.unexpected.values()))
    print(f"  unexpected exceptions: {n_unexpected}")
    for key, results in sorted(s.unexpected.items(), key=lambda kv: -len(kv[1])):
        r = results[0]
        print(f"    {key}: {len(results)} inputs, e.g. input {r.number} ({r.stage}): {r.message}")
    print(f"  worker deaths:         {len(s.deaths)}")
    for number, why in s.deaths[:10]:
        print(f"    input {number}: {why}")
    print(
        f"  timeouts (> {args.timeout:g} s):   {len(s.timeouts)}"
        + (f"  e.g. inputs {s.timeouts[:5]}" if s.timeouts else "")
    )
    limit = f"size + {JSON_FACTOR} x JSON + {_mib(MEMORY_SLACK)}"
    print(f"  over memory (> {limit}): {len(s.over_memory)}")
    for r in s.over_memory[:5]:
        print(
            f"    input {r.number}: {_mib(r.size)} file, tracemalloc peak {_mib(r.peak)}, "
            f"ru_maxrss growth {_mib(r.rss_growth)}"
        )
    if s.rss is not None:
        print(
            f"  peak memory:           RSS growth {_mib(s.rss.rss_growth)} (input "
            f"{s.rss.number}, {_mib(s.rss.size)} file; every input)"
        )
    if s.peak is not None and s.traced:
        print(
            f"                         tracemalloc {_mib(s.peak.peak)} (input {s.peak.number}, "
            f"{_mib(s.peak.size)} file; {s.traced} inputs traced)"
        )
    if s.lazy:
        print("  validated, then rejected by a later call (information):")
        for (call, code), n in s.lazy.most_common(10):
            print(f"    {call} -> {code}: {n} (e.g. input {s.lazy_example[(call, code)]})")
    if s.slowest is not None:
        print(
            f"  slowest input:         {s.slowest.seconds:.2f} s (input {s.slowest.number}, "
            f"{_mib(s.slowest.size)} file{', traced' if s.slowest.traced else ''}); "
            f"mean {s.busy / max(s.inputs, 1) * 1e3:.1f} ms"
        )
    print(f"  inputs/s:              {rate:.1f}")
    print("  result:                " + ("FAIL" if s.failed else "ok"))
