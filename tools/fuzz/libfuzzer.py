"""Coverage-guided fuzzing of the C loader with libFuzzer: ``python -m tools.fuzz.libfuzzer``.

Usage::

    python -m tools.fuzz.libfuzzer [--seconds S | --runs N] [--corpus DIR] [--artifacts DIR]
                                   [--log FILE] [--seed K]

Builds ``conformance/adapters/c/fuzz/fuzz_reader.c`` (the target: the bytes through
``awq2_open``, ``awq2_validate``, ``awq2_verify`` and ``awq2_describe``, the path of the
adapter's ``main.c``) with ``clang -fsanitize=fuzzer,address,undefined
-fno-sanitize-recover=all`` into ``conformance/adapters/c/build/fuzz/awq2c-fuzz``, seeds it
with every vector of ``conformance/manifest.json`` (copied into a folder made for the run)
and the dictionary ``fuzz/awq2.dict``, runs it for S seconds (or N executions) and prints
what it did: executions, executions per second, the corpus (files, bytes), libFuzzer's
coverage counters (``cov``: edges, ``ft``: features) and the crashes (files libFuzzer left
in the artifacts folder: ``crash-*``, ``leak-*``, ``timeout-*``, ``oom-*``).

``hash.c`` (CRC-32C, FNV-1a, SHA-256) is built with the sanitizers but without libFuzzer's
coverage instrumentation: its loops take no branch on the data, and instrumenting them made
every execution about twice as slow (the mutator rewrites the checksums after most
mutations).  Its memory accesses are still checked by ASan.

The inputs are 64 KiB to 1 MiB (the slab starts at 0x10000), so ``-max_len`` is the largest
seed plus 64 KiB and ``-len_control=0`` (else libFuzzer would truncate every mutant of a
640 KiB seed to a few bytes for its first hours).  One process (no ``-jobs``): the machines
this runs on are shared.

Exit status: 0 when libFuzzer stopped by itself with no crash, 1 on a crash (its input is in
the artifacts folder; reproduce with ``conformance/adapters/c/build/fuzz/awq2c-fuzz FILE``),
2 when clang or libFuzzer is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT

MANIFEST = ROOT / "conformance" / "manifest.json"
C_DIR = ROOT / "conformance" / "adapters" / "c"
FUZZ_DIR = C_DIR / "fuzz"
BUILD = C_DIR / "build" / "fuzz"
BINARY = BUILD / "awq2c-fuzz"
DICTIONARY = FUZZ_DIR / "awq2.dict"
#: The loader's sources linked into the target (main.c, the command line, is not).
LOADER = ("error.c", "json.c", "reader.c", "codec.c", "describe.c")
UNINSTRUMENTED = ("hash.c",)
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
CFLAGS = ["-std=c11", "-g", "-O1", "-Wall", "-Wextra", "-Wpedantic", "-Werror"]
#: What libFuzzer leaves for an input that failed.
ARTIFACT_PREFIXES = ("crash-", "leak-", "timeout-", "oom-", "slow-unit-")


def clang() -> str:
    return os.environ.get("CLANG") or "clang"


def build(out: Path = BINARY) -> Path:
    """The target, with libFuzzer, ASan and UBSan."""
    out.parent.mkdir(parents=True, exist_ok=True)
    objects = []
    for name in UNINSTRUMENTED:
        obj = out.parent / (Path(name).stem + ".o")
        _cc([*CFLAGS, *SANITIZE, "-c", "-o", str(obj), str(C_DIR / name)])
        objects.append(str(obj))
    sources = [str(FUZZ_DIR / "fuzz_reader.c"), *(str(C_DIR / n) for n in LOADER)]
    _cc([*CFLAGS, "-fsanitize=fuzzer", *SANITIZE, "-o", str(out), *sources, *objects])
    return out


def _cc(args: list[str]) -> None:
    cmd = [clang(), *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.stderr.write(f"{shlex.join(cmd)}\n{done.stdout}{done.stderr}")
        raise SystemExit(2)


def vectors() -> list[Path]:
    """Every vector file of the manifest (file sets' folders aside: the target reads one file)."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    return [MANIFEST.parent / v["file"] for v in manifest["vectors"] if "file" in v]


def set_folders() -> list[Path]:
    """Every file-set vector's folder (spec 2.1), which the adapter takes as its argument."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    return [MANIFEST.parent / v["folder"] for v in manifest["vectors"] if "folder" in v]


def seed_folder(dest: Path) -> Path:
    """A folder holding a copy of every vector (libFuzzer may not write into it)."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in vectors():
        shutil.copyfile(path, dest / path.name)
    return dest


def max_len() -> int:
    """The largest vector plus 64 KiB: room for an inserted block."""
    return max(p.stat().st_size for p in vectors()) + 65536


@dataclass
class Stats:
    """What a libFuzzer (or atheris) run printed, and the crashes it left."""

    executions: int = 0
    exec_per_sec: int = 0
    new_units: int = 0
    peak_rss_mb: int = 0
    cov: int = 0
    ft: int = 0
    seconds: float = 0.0
    corpus_files: int = 0
    corpus_bytes: int = 0
    crashes: tuple[str, ...] = ()
    status: int = 0

    def line(self, what: str) -> str:
        return (
            f"{what}: {self.executions} executions in {self.seconds:.0f} s "
            f"({self.exec_per_sec} exec/s), corpus {self.corpus_files} files "
            f"({self.corpus_bytes / 2**20:.1f} MiB), cov: {self.cov} ft: {self.ft}, "
            f"new units: {self.new_units}, peak RSS {self.peak_rss_mb} MiB, "
            f"crashes: {len(self.crashes)}"
        )


_STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.M)
_COV = re.compile(r"\bcov: (\d+) ft: (\d+)")


def parse(text: str, stats: Stats) -> Stats:
    """Fill ``stats`` from libFuzzer's output (``-print_final_stats=1`` and its status lines)."""
    found = dict(_STAT.findall(text))
    stats.executions = int(found.get("number_of_executed_units", 0))
    stats.exec_per_sec = int(found.get("average_exec_per_sec", 0))
    stats.new_units = int(found.get("new_units_added", 0))
    stats.peak_rss_mb = int(found.get("peak_rss_mb", 0))
    covs = _COV.findall(text)
    if covs:
        stats.cov, stats.ft = (int(x) for x in covs[-1])
    return stats


def count_corpus(folder: Path, stats: Stats) -> None:
    files = [p for p in folder.iterdir() if p.is_file()]
    stats.corpus_files = len(files)
    stats.corpus_bytes = sum(p.stat().st_size for p in files)


def crashes_in(folder: Path) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in folder.iterdir() if p.name.startswith(ARTIFACT_PREFIXES)))


def run(
    command: Sequence[str],
    corpus: Path,
    artifacts: Path,
    log: Path,
    budget: Sequence[str],
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Stats:
    """Run a libFuzzer-style binary (``command`` then its flags) on ``corpus`` (new units go
    there) seeded with every vector; its output goes to ``log``."""
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="awq2-seeds-") as seeds:
        args = [
            *command,
            *budget,
            f"-max_len={max_len()}",
            "-len_control=0",
            "-timeout=30",
            "-rss_limit_mb=4096",
            "-print_final_stats=1",
            f"-artifact_prefix={artifacts}/",
            *extra,
            str(corpus),
            str(seed_folder(Path(seeds))),
        ]
        started = time.monotonic()
        with open(log, "w", encoding="utf-8", errors="replace") as out:
            out.write(shlex.join(args) + "\n")
            out.flush()
            status = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
        seconds = time.monotonic() - started
    stats = parse(log.read_text(encoding="utf-8", errors="replace"), Stats())
    stats.seconds = seconds
    stats.status = status
    count_corpus(corpus, stats)
    stats.crashes = crashes_in(artifacts)
    return stats


def budget_flags(args: argparse.Namespace) -> list[str]:
    flags = [f"-seed={args.seed}"] if args.seed is not None else []
    if args.runs is not None:
        return [*flags, f"-runs={args.runs}"]
    return [*flags, f"-max_total_time={args.seconds}"]


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options the C and the Python targets share."""
    p.add_argument("--seconds", type=int, default=60, help="run this long (default 60)")
    p.add_argument("--runs", type=int, help="stop after this many executions instead")
    p.add_argument("--seed", type=int, help="libFuzzer's -seed (default: from the clock)")
    p.add_argument("--corpus", type=Path, help="keep the corpus here (default: a temporary folder)")
    p.add_argument("--artifacts", type=Path, help="crash inputs go here (default: the corpus')")
    p.add_argument("--log", type=Path, help="libFuzzer's output (default: in the artifacts')")


def finish(stats: Stats, what: str, artifacts: Path, log: Path) -> int:
    print(stats.line(what))
    for name in stats.crashes:
        print(f"   crash input: {artifacts / name}")
    if stats.crashes or stats.status:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
        print("\n".join(["   " + line for line in tail]))
        print(f"{what}: libFuzzer exited with {stats.status}; its output: {log}")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tools.fuzz.libfuzzer",
        description="Fuzz the C loader (conformance/adapters/c) with libFuzzer, seeded with "
        "every conformance vector; print executions, exec/s, corpus, coverage and crashes.",
    )
    add_run_options(p)
    args = p.parse_args(argv)
    if shutil.which(clang()) is None:
        print(f"{clang()} not found: libFuzzer comes with clang (apt-get install clang)")
        return 2
    binary = build()
    with tempfile.TemporaryDirectory(prefix="awq2-libfuzzer-") as scratch:
        corpus = args.corpus or Path(scratch) / "corpus"
        artifacts = args.artifacts or corpus.parent / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        log = args.log or artifacts / "libfuzzer.log"
        stats = run(
            [str(binary)], corpus, artifacts, log, budget_flags(args), [f"-dict={DICTIONARY}"]
        )
        return finish(stats, "libfuzzer (C loader)", artifacts, log)


if __name__ == "__main__":
    sys.exit(main())
