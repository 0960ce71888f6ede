"""Running inputs: long-lived worker processes (one per CPU, restarted after a timeout or a
crash), per-input time limits, each worker's address-space limit, and the tally.

A worker builds input ``number`` itself (:func:`tools.fuzz.inputs.make_input`), writes it to
its own folder under a run directory in ``/dev/shm`` (removed at the end, even after a
SIGKILL of a worker), and runs the reader path on it (:func:`tools.fuzz.target.run_one`).
An unexpected exception, a worker that dies (a signal), an input over the time limit, and an
input whose peak memory exceeds its file size + :data:`JSON_FACTOR` x its JSON +
:data:`MEMORY_SLACK` fail the run; with
``--save-crashes`` the failing inputs are written out with their recipe.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.fuzz.inputs import make_input, write_input
from tools.fuzz.mutant import Seed
from tools.fuzz.target import Result, run_one

MEMORY_SLACK = 64 << 20  # an input may use its file size plus this much
#: ... plus this many times the JSON it holds (AWQ v1 configs, shard index, safetensors
#: headers), which a reader holds parsed as Python objects: a list of small numbers costs 8
#: bytes a slot for 2 bytes of text ("0,").
JSON_FACTOR = 8
TRACE_SLOWDOWN = 5  # time limit factor for inputs run under tracemalloc


@dataclass
class Config:
    seed: int
    timeout: float
    trace_every: int  # tracemalloc on every N-th input (0: never); it slows Python code 3-15x
    memory_limit: int

    def traced(self, number: int) -> bool:
        return bool(self.trace_every) and number % self.trace_every == 0

    def time_limit(self, number: int) -> float:
        return self.timeout * (TRACE_SLOWDOWN if self.traced(number) else 1)


def _worker(conn: mpc.Connection, seeds: list[Seed], config: Config, run_dir: Path) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    warnings.simplefilter("ignore", RuntimeWarning)  # inf/NaN scales overflow in dequantize
    if config.memory_limit:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (config.memory_limit, config.memory_limit))
    parent = os.getppid()
    folder = run_dir / str(os.getpid())  # the parent removes run_dir, even after a SIGKILL
    folder.mkdir()
    try:
        while True:
            while not conn.poll(1.0):  # other workers hold our pipe too: watch the parent
                if os.getppid() != parent:
                    return
            number = conn.recv()
            if number is None:
                break
            try:
                item = make_input(seeds, config.seed, number)
            except Exception as exc:  # a bug of the fuzzer itself: reported, not a death
                site = "tools/fuzz (building the input)"
                conn.send(Result(number, 0, "unexpected", exc_type=type(exc).__name__, site=site,
                                 message=str(exc)[:300], stage="make_input"))  # fmt: skip
                continue
            traced = config.traced(number)
            conn.send(run_one(folder, number, item.files, item.targets, item.base.names, traced,
                              item.convert))  # fmt: skip
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Worker:
    def __init__(self, ctx: Any, seeds: list[Seed], config: Config, run_dir: Path) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=_worker, args=(child, seeds, config, run_dir), daemon=True
        )
        self.process.start()
        child.close()
        self.number: int | None = None
        self.deadline = 0.0

    def send(self, number: int, timeout: float) -> None:
        self.number = number
        self.deadline = time.monotonic() + timeout
        self.conn.send(number)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, OSError):
            os.kill(self.process.pid, signal.SIGKILL)  # this worker only, by its pid
        self.process.join(5)
        self.conn.close()

    def stop(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self.conn.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.kill()


@dataclass
class Summary:
    inputs: int = 0
    accepted: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    unexpected: dict[str, list[Result]] = field(default_factory=dict)
    deaths: list[tuple[int, str]] = field(default_factory=list)
    timeouts: list[int] = field(default_factory=list)
    over_memory: list[Result] = field(default_factory=list)
    lazy: Counter[tuple[str, str]] = field(default_factory=Counter)
    lazy_example: dict[tuple[str, str], int] = field(default_factory=dict)
    peak: Result | None = None
    rss: Result | None = None
    traced: int = 0
    slowest: Result | None = None
    busy: float = 0.0  # seconds the workers spent inside inputs
    interrupted: bool = False
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return bool(self.unexpected or self.deaths or self.timeouts or self.over_memory)

    def add(self, r: Result) -> None:
        self.inputs += 1
        if r.outcome == "unexpected":
            self.unexpected.setdefault(f"{r.exc_type} at {r.site}", []).append(r)
        elif r.outcome == "accepted":
            self.accepted += 1
        else:
            self.codes[r.code or "?"] += 1
        for key in r.lazy_after_valid:
            self.lazy[key] += 1
            self.lazy_example.setdefault(key, r.number)
        budget = r.size + JSON_FACTOR * r.json_size + MEMORY_SLACK
        if r.peak > budget or r.rss_growth > budget:
            self.over_memory.append(r)
        self.traced += r.traced
        self.busy += r.seconds
        if self.slowest is None or r.seconds > self.slowest.seconds:
            self.slowest = r
        if self.peak is None or r.peak > self.peak.peak:
            self.peak = r
        if self.rss is None or r.rss_growth > self.rss.rss_growth:
            self.rss = r


def save_input(
    folder: Path | None, seeds: list[Seed], seed: int, number: int, kind: str, detail: str
) -> str:
    if folder is None:
        return ""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        item = make_input(seeds, seed, number)
    except Exception as exc:  # reported with the result already
        return f"(not built: {type(exc).__name__})"
    stem = folder / f"{kind}-{seed}-{number}"
    where = write_input(item, stem.with_name(stem.name + item.suffix))
    recipe = "\n".join(f"  {s}" for s in item.steps)
    stem.with_suffix(".txt").write_text(
        f"input {number} of --seed {seed}: {kind}\nbase: {item.base.id}\nmutations:\n{recipe}\n\n"
        f"{detail}\n",
        encoding="utf-8",
    )
    return str(where)


def fuzz(args: argparse.Namespace, seeds: list[Seed]) -> Summary:
    config = Config(args.seed, args.timeout, args.trace_every, args.memory_limit << 20)
    ctx = mp.get_context("fork")
    shm = Path("/dev/shm")
    run_dir = Path(tempfile.mkdtemp(prefix="awq2-fuzz-", dir=shm if shm.is_dir() else None))
    workers = [Worker(ctx, seeds, config, run_dir) for _ in range(args.workers)]
    summary = Summary()
    saved: Counter[str] = Counter()
    crash_dir = Path(args.save_crashes) if args.save_crashes else None
    started = time.monotonic()
    stop_at = started + args.seconds if args.seconds else None
    next_number, last_report = 0, started

    def more() -> bool:
        if args.inputs is not None and next_number >= args.inputs:
            return False
        return stop_at is None or time.monotonic() < stop_at

    def replace(w: Worker) -> Worker:
        w.kill()
        fresh = Worker(ctx, seeds, config, run_dir)
        workers[workers.index(w)] = fresh
        return fresh

    try:
        while True:
            for w in workers:
                if w.number is None and more():
                    w.send(next_number, config.time_limit(next_number))
                    next_number += 1
            busy = [w for w in workers if w.number is not None]
            if not busy:
                break
            wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready = mpc.wait([w.conn for w in busy], timeout=wait)
            for w in busy:
                number = w.number
                assert number is not None
                if w.conn in ready:
                    try:
                        r: Result = w.conn.recv()
                    except (EOFError, OSError):
                        w.process.join(5)
                        code = w.process.exitcode
                        why = f"worker died, exit code {code}"
                        if code is not None and code < 0:
                            why += f" ({signal.Signals(-code).name})"
                        where = save_input(crash_dir, seeds, args.seed, number, "death", why)
                        summary.deaths.append((number, why + (f", saved {where}" if where else "")))
                        summary.inputs += 1
                        replace(w)
                        continue
                    w.number = None
                    summary.add(r)
                    key = f"{r.exc_type} at {r.site}"
                    if r.outcome == "unexpected" and saved[key] < 3:
                        saved[key] += 1
                        save_input(
                            crash_dir,
                            seeds,
                            args.seed,
                            number,
                            "crash",
                            f"{key}\nstage: {r.stage}\n{r.trace}",
                        )
                elif time.monotonic() >= w.deadline:
                    summary.timeouts.append(number)
                    summary.inputs += 1
                    save_input(
                        crash_dir,
                        seeds,
                        args.seed,
                        number,
                        "timeout",
                        f"over {config.time_limit(number)} s",
                    )
                    replace(w)
            now = time.monotonic()
            if not args.quiet and now - last_report >= args.progress:
                last_report = now
                rate = summary.inputs / (now - started)
                bad = sum(map(len, summary.unexpected.values())) + len(summary.deaths)
                print(
                    f"  ... {summary.inputs} inputs, {rate:.0f}/s, {summary.accepted} accepted, "
                    f"{bad} unexpected, {len(summary.timeouts)} timeouts",
                    file=sys.stderr,
                    flush=True,
                )
    except KeyboardInterrupt:
        summary.interrupted = True
    finally:
        for w in workers:
            w.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    summary.seconds = time.monotonic() - started
    return summary
