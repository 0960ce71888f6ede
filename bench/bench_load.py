"""Benchmark loading a whole model: AWQ v1 + NumPy repack against AWQ-v2, and the I/O floor.

Usage: ``python bench/bench_load.py [--shape 1b|7b|tiny] [--dir DIR] [--keep] [--repeats N]``.

It writes a synthetic AutoAWQ (AWQ v1) Llama checkpoint (``reference.examples``), converts it to
AWQ-v2 (``reference.convert.convert``, timed without verification with ``--jobs 1`` and then
with the default thread count, the cores this process may use; then the verification), and
times, with
a warm page cache and then a cold one (each file dropped with ``posix_fadvise(DONTNEED)`` before
every repeat), loading every tensor of the model into memory:

(a) AWQ v1 + repack of every linear layer to Marlin in NumPy (what an engine does today);
(b) AWQ-v2 ``reference.open`` + ``Reader.read_many_into`` of every tensor into one
    preallocated buffer (how an engine fills pinned or device-staging memory; adjacent
    payloads fetched together, up to 64 MiB at a time: copied out of the memory map where
    the pages are in the page cache, else one ``preadv``);
(b3) the same with one ``Reader.read_into`` (one ``preadv``) per tensor;
(b2) AWQ-v2 ``reference.open`` + a fresh copy of every tensor (``np.array(f.tensor(name))``):
    the memory map plus new arrays (their page faults counted);
(c) the floor: a plain sequential read of the AWQ-v2 file, 16 MiB ``readinto`` calls, into a
    buffer allocated and touched before the timer;
(c2) the same into a buffer allocated inside the timer (its page faults counted, as they are in
    (a), (b) and (d), which return fresh arrays);
(c3) the other one-thread floor: the whole file copied out of a memory map (``mmap``, 16 MiB
    slices) into the preallocated buffer of (c);
(c4) (c) on every core: the file in 8 MiB pieces spread over one thread per usable core (the
    threads started before the timer, as the reader's pool is), each piece one ``os.preadv``
    into the buffer of (c) (warm: the page cache copied on every core; cold: that many reads
    in flight);
(c5) (c3) on every core: the same pieces copied out of the map by NumPy, on the same threads.
    "The floor", in each phase, is the fastest of the four: the faster of the one-thread floor
    ((c) or (c3)) and the every-core floor ((c4) or (c5)), both printed, since (b) copies on
    every core (``reference.ground.parallel``) and a one-thread floor is no floor for it;
(d) ``safetensors.numpy.load_file`` of the v1 file (no repack);
(e) AWQ-v2 index + one ``O_DIRECT`` ``os.preadv`` per tensor at its own offset into a
    page-aligned buffer (no page cache, no bounce copy), checked against every ``data_crc``;
    the same read at a safetensors tensor's offset is shown to fail with EINVAL.
(t) ``reference.torch.load_file`` of the AWQ-v2 file, against (ts) ``safetensors.torch.load_file``
    of a safetensors file holding the same tensors (written from (t)'s result with
    ``safetensors.torch.save_file``); both check what the tensors are made of (entries,
    offsets, no overlap), not the rest of the file; (tv) is (t) with ``validate=True``, full
    validation first (shown, no target); (tp) and (tsp) the same two with ``backend="pread"``:
    only where torch imports, else one line says so.  The default ``mmap`` backends of both
    return tensors in a private (copy-on-write) map of the file, paged in on first touch, so
    (t) and (ts) have not read the bytes that (tp) and (tsp) have.
(l) ``reference.numpy.load_file(backend="pread")`` of the AWQ-v2 file, beside (ls) the same of a
    split set of the same model (``convert --max-shard-size``, about four members) and (lr) of
    rank 0 of a rank set (``convert --tp 2``: rank 0's members only, ``rank=0``); with torch,
    (tl), (tls) and (tlr) the same three through ``reference.torch.load_file``.  A set costs a
    member's opening checks per file; a rank reads its share of the bytes.

It prints best and median of ``--repeats``, GB/s (of the file each case reads, 1 GB = 1e9 B) and
the two floors and the ratios (a)/(b), (b)/(floor) (target <= 1.1), (b) against each floor,
(b)/(d) (target <= 1.0), (t)/(ts) and
(tp)/(tsp) (target
<= 1.0), conversion/(a) (target
<= 3.0, the default thread count), the conversions against (a) and (c) with ``--jobs 1`` and
the default, and default/jobs 1 (target <= 0.67: 1.5x faster on 2 cores), from the best
times.  When (b) misses a target, (b) is profiled with cProfile.  Exit
status 0 always: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import gc
import mmap
import os
import platform
import pstats
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import safetensors
from safetensors.numpy import load_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

try:  # reference.numpy: load_file of a file, a split set or one rank of a rank set
    import reference.numpy as awq_numpy
except ImportError:  # pragma: no cover - an older checkout
    awq_numpy = None

try:  # the optional extra torch: (t) and (ts) only where it imports
    import safetensors.torch as safetensors_torch

    import reference.torch as awq_torch
except ImportError as exc:
    awq_torch = safetensors_torch = None
    TORCH_MISSING = str(exc)

import reference
from reference.convert import convert, convert_folder, default_jobs
from reference.examples import LlamaShape, write_checkpoint
from reference.format.layers import PARTS
from reference.ground.parallel import available_cores
from reference.sources.v1 import read_safetensors_header
from spec.algorithms import crc32c

SHAPES = {
    "tiny": LlamaShape(),  # 2 layers, hidden 256: a smoke run
    # TinyLlama-1.1B: hidden 2048, intermediate 5632, 22 layers, 32 heads / 4 kv heads
    "1b": LlamaShape(2048, 5632, 22, 32, 4, 32000),
    # Llama-2-7B: hidden 4096, intermediate 11008, 32 layers, 32 heads / 32 kv heads
    "7b": LlamaShape(4096, 11008, 32, 32, 32, 32000),
}
CHUNK = 16 << 20  # plain sequential read chunk
PIECE = 8 << 20  # a piece of the every-core floors (c4) and (c5)
#: The floors: one thread, and every core; "the floor" is the fastest of them all.
FLOORS_ONE, FLOORS_ALL = ("(c)", "(c3)"), ("(c4)", "(c5)")
DIRECT_ALIGN = 4096  # O_DIRECT length rounding and buffer alignment
TARGETS = {
    "(b)/(floor)": 1.1,
    "(b)/(d)": 1.0,
    "(t)/(ts)": 1.0,
    "(tp)/(tsp)": 1.0,
    "conversion/(a)": 3.0,
    "default/jobs 1": 1 / 1.5,
}
COLD_SLOWDOWN = 1.3  # a cold sequential read at least this much slower than a warm one
GB = 1e9


# ------------------------------------------------------------------------------ page cache


def read_all(path: Path) -> None:
    """Read a file once (to warm the page cache)."""
    with path.open("rb", buffering=0) as f:
        while f.read(CHUNK):
            pass


def drop_cache(path: Path) -> None:
    """Write back and drop a file's pages from the page cache."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def resident_fraction(path: Path) -> float | None:
    """Share of a file's pages in the page cache (``mincore``), or None where unavailable."""
    size, pages = path.stat().st_size, -(-path.stat().st_size // mmap.PAGESIZE)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long)
    except (OSError, AttributeError):
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if addr in (None, ctypes.c_void_p(-1).value):
        return None
    vec = (ctypes.c_ubyte * pages)()
    failed = libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec)
    libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(size))
    return None if failed else sum(v & 1 for v in vec) / pages


# ------------------------------------------------------------------------------ the cases


def v1_repack(folder: Path) -> list[Any]:
    """(a) AWQ v1: every linear layer repacked to Marlin in NumPy, plus the other tensors."""
    with reference.open(folder) as f:
        layers = f.layers()
        out: list[Any] = [f.linear(p) for p in layers]
        quantised = {f"{p}.{part}" for p in layers for part in (*PARTS, "bias")}
        out += [f.tensor(n) for n in f.names() if n not in quantised]
    return out


def v2_copies(path: Path) -> list[np.ndarray]:
    """(b2) AWQ-v2 through the reference reader's memory map: a fresh copy of every tensor."""
    with reference.open(path) as f:
        return [np.array(view) for _, view in f.tensors()]


def v2_read_many(path: Path, buf: np.ndarray) -> np.ndarray:
    """(b) AWQ-v2 through the reference reader: ``read_many_into`` every tensor, one buffer."""
    pos, jobs = 0, []
    with reference.open(path) as f:
        for info in f.entries():
            jobs.append((info, buf[pos : pos + info.length]))
            pos += info.length
        f.read_many_into(jobs)
    return buf


def v2_read_into(path: Path, buf: np.ndarray) -> np.ndarray:
    """(b3) AWQ-v2 through the reference reader: ``read_into`` every tensor, one buffer."""
    pos = 0
    with reference.open(path) as f:
        for info in f.entries():
            f.read_into(info, buf[pos : pos + info.length])
            pos += info.length
    return buf


def plain_read(path: Path, buf: np.ndarray | None = None) -> np.ndarray:
    """(c) The floor: the whole file, 16 MiB ``readinto`` calls into ``buf`` ((c2): a new one)."""
    size = path.stat().st_size
    if buf is None:
        buf = np.empty(size, np.uint8)
    view, pos = memoryview(buf), 0
    with path.open("rb", buffering=0) as f:
        while pos < size and (got := f.readinto(view[pos : pos + CHUNK])):
            pos += got
    return buf


def map_copy(path: Path, buf: np.ndarray) -> np.ndarray:
    """(c3) The other floor: the whole file copied out of a memory map into ``buf``."""
    size = path.stat().st_size
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        src, dst = memoryview(m), memoryview(buf)
        for pos in range(0, size, CHUNK):
            dst[pos : pos + CHUNK] = src[pos : pos + CHUNK]
        src.release()
    return buf


class EveryCore:
    """One thread per usable core, started once (outside the timers, as the reader's pool is),
    each given every ``threads``-th piece of :data:`PIECE` bytes of a file."""

    def __init__(self) -> None:
        self.threads = available_cores()
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="floor")
        list(self.pool.map(abs, range(self.threads)))  # start every thread now

    def run(self, size: int, piece: Callable[[int, int], None]) -> None:
        """``piece(start, stop)`` for every piece of ``range(size)``, on every thread."""
        starts = list(range(0, size, PIECE))

        def share(i: int) -> None:
            for start in starts[i :: self.threads]:
                piece(start, min(start + PIECE, size))

        for future in [self.pool.submit(share, i) for i in range(self.threads)]:
            future.result()

    def pread(self, path: Path, buf: np.ndarray) -> np.ndarray:
        """(c4) The whole file, each piece one ``os.preadv`` into ``buf``, on every core."""
        view = memoryview(buf)
        fd = os.open(path, os.O_RDONLY)
        try:
            self.run(path.stat().st_size, lambda a, b: pread_exact(fd, view[a:b], a))
        finally:
            os.close(fd)
        return buf

    def map_copy(self, path: Path, buf: np.ndarray) -> np.ndarray:
        """(c5) The whole file copied out of a memory map by NumPy, on every core."""
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            self._copy_out(m, buf)  # its array of the map is gone when it returns
        return buf

    def _copy_out(self, m: mmap.mmap, buf: np.ndarray) -> None:
        src = np.frombuffer(m, np.uint8)
        self.run(len(src), lambda a, b: np.copyto(buf[a:b], src[a:b]))


def pread_exact(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` from ``offset`` (``os.preadv`` may return short counts)."""
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise EOFError(f"end of file at {offset + done}")
        done += got


def round_up(value: int, to: int) -> int:
    return -(-value // to) * to


def direct_read(path: Path) -> tuple[mmap.mmap, list[tuple[Any, int]]]:
    """(e) AWQ-v2 index, then O_DIRECT reads of every payload into one page-aligned buffer.

    Returns the buffer and ``(info, position)`` of each payload in it.
    """
    with reference.open(path) as f:
        infos = [i for i in f.entries() if i.length]
    arena = mmap.mmap(-1, max(sum(round_up(i.length, DIRECT_ALIGN) for i in infos), 1))
    view, pos, placed = memoryview(arena), 0, []
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        for info in infos:
            length = round_up(info.length, DIRECT_ALIGN)
            pread_exact(fd, view[pos : pos + length], info.offset)
            placed.append((info, pos))
            pos += length
    finally:
        os.close(fd)
        view.release()
    return arena, placed


def check_direct(path: Path) -> str:
    """Run (e) once and compare every payload with its ``data_crc``."""
    arena, placed = direct_read(path)
    bad = [i.name for i, pos in placed if crc32c(arena[pos : pos + i.length]) != i.data_crc]
    arena.close()
    if bad:
        return f"O_DIRECT bytes DIFFER from data_crc for {len(bad)} tensors, e.g. {bad[0]}"
    return f"O_DIRECT bytes of all {len(placed)} payloads match their data_crc"


def misaligned_direct(v1_file: Path) -> str:
    """The same O_DIRECT read at a safetensors tensor's offset: EINVAL when misaligned."""
    tensors, _ = read_safetensors_header(v1_file)
    aligned = sum(t.offset % DIRECT_ALIGN == 0 for t in tensors.values())
    odd = [t for t in tensors.values() if t.offset % 512 and t.length]
    head = f"safetensors: {aligned}/{len(tensors)} tensor offsets are 4096-aligned"
    if not odd:
        return f"{head}; none is misaligned to 512 B, nothing to show"
    t = odd[0]
    arena = mmap.mmap(-1, round_up(t.length, DIRECT_ALIGN))
    fd = os.open(v1_file, os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.preadv(fd, [arena], t.offset)
        result = f"read {got} bytes: misaligned O_DIRECT was NOT refused"
    except OSError as exc:
        result = f"OSError {exc}  (refused, as expected)"
    finally:
        os.close(fd)
        arena.close()
    where = f"offset {t.offset} (mod 4096 = {t.offset % DIRECT_ALIGN})"
    return f"{head}\n  O_DIRECT pread of {t.name!r} at {where}: {result}"


def direct_supported(path: Path) -> str | None:
    """None when the filesystem accepts O_DIRECT, else the reason."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------------------ timing


@dataclass
class Case:
    key: str
    label: str
    run: Callable[[], object]
    files: list[Path]  # what it reads (dropped before each cold repeat)
    nbytes: int  # for GB/s: the size of the file it reads
    warm: list[float] = field(default_factory=list)
    cold: list[float] = field(default_factory=list)


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    del result
    return seconds


def measure(cases: list[Case], repeats: int, *, cold: bool) -> None:
    """Time every case ``repeats`` times, round-robin (so drift spreads evenly over cases)."""
    for _ in range(repeats):
        for case in cases:
            if cold:
                for path in case.files:
                    drop_cache(path)
            (case.cold if cold else case.warm).append(timed(case.run))


@dataclass
class ColdCheck:
    resident: float | None  # share of pages cached right after the drop
    cold_s: float  # first sequential read after the drop
    second_s: float  # the read right after it

    @property
    def achieved(self) -> bool:
        dropped = self.resident is None or self.resident <= 0.01
        return dropped and self.cold_s >= COLD_SLOWDOWN * self.second_s

    def describe(self, nbytes: int) -> str:
        res = "n/a" if self.resident is None else f"{self.resident:.1%}"
        return (
            f"cold cache {'ACHIEVED' if self.achieved else 'NOT achieved'}: after fadvise "
            f"{res} of the v2 file's pages resident (mincore); sequential read right after "
            f"the drop {nbytes / self.cold_s / GB:.2f} GB/s, the second read "
            f"{nbytes / self.second_s / GB:.2f} GB/s ({self.cold_s / self.second_s:.1f}x)"
        )


def cold_check(path: Path, buf: np.ndarray) -> ColdCheck:
    """Drop ``path``, then time two sequential reads of it into ``buf``."""
    drop_cache(path)
    resident = resident_fraction(path)
    first, second = (timed(lambda: plain_read(path, buf)) for _ in range(2))
    return ColdCheck(resident, first, second)


# ------------------------------------------------------------------------------ reporting


def gbps(nbytes: int, seconds: float) -> str:
    return f"{nbytes / seconds / GB:7.2f}" if seconds > 0 else "    inf"


def stats(times: list[float], nbytes: int) -> str:
    if not times:
        return f"{'-':>9} {'-':>9} {'-':>7}"
    best = min(times)
    return f"{best:9.4f} {statistics.median(times):9.4f} {gbps(nbytes, best)}"


def print_table(cases: list[Case]) -> None:
    print(f"\n{'case':<58} {'MB':>8} | {'warm best':>9} {'median':>9} {'GB/s':>7} "
          f"| {'cold best':>9} {'median':>9} {'GB/s':>7}")  # fmt: skip
    for c in cases:
        label = f"{c.key} {c.label}"
        print(f"{label:<58} {c.nbytes / 1e6:8.1f} | {stats(c.warm, c.nbytes)} "
              f"| {stats(c.cold, c.nbytes)}")  # fmt: skip
    print("(seconds; GB/s of the best time, of the size of the file the case reads)")


def ratio_line(name: str, num: float, den: float, note: str = "") -> str:
    value = num / den if den > 0 else float("inf")
    target = TARGETS.get(name)
    verdict = ""
    if target is not None:
        verdict = f"target <= {target:<4.2f}  {'PASS' if value <= target else 'FAIL'}"
    return f"  {name:<15} {value:8.2f}  {verdict:<20} {note}"


def print_ratios(by_key: dict[str, Case], conversion: Conversions, phase: str) -> list[str]:
    """Ratios of best times for ``phase`` ("warm" or "cold"); returns the failed names."""
    best = {k: min(getattr(c, phase)) for k, c in by_key.items() if getattr(c, phase)}
    if not {"(a)", "(b)", "(b2)", "(c)", "(c2)", *FLOORS_ONE, *FLOORS_ALL, "(d)"} <= best.keys():
        return []
    one = min(FLOORS_ONE, key=best.__getitem__)
    every = min(FLOORS_ALL, key=best.__getitem__)
    floor_key = min((one, every), key=best.__getitem__)
    size = by_key["(c)"].nbytes
    print(f"\nthe floor, {phase} cache: one thread {one} {best[one]:.4f} s "
          f"({gbps(size, best[one]).strip()} GB/s), every core {every} {best[every]:.4f} s "
          f"({gbps(size, best[every]).strip()} GB/s); the floor is {floor_key}")  # fmt: skip
    print(f"ratios, {phase} cache (best times):")
    lines = [
        ("(a)/(b)", best["(a)"], best["(b)"], "time an engine saves (v1 repack / v2 read)"),
        ("(b)/(floor)", best["(b)"], best[floor_key],
         f"v2 read / the floor, the faster of one thread and every core: {floor_key}"),
        ("(b)/(floor 1)", best["(b)"], best[one], f"v2 read / the one-thread floor, {one}"),
        ("(b)/(floor N)", best["(b)"], best[every], f"v2 read / the every-core floor, {every}"),
        ("(c3)/(c)", best["(c3)"], best["(c)"], "copy out of a map / plain sequential read"),
        ("(b)/(c)", best["(b)"], best["(c)"], "v2 read / plain sequential read"),
        ("(b)/(c2)", best["(b)"], best["(c2)"], "the same, the floor's page faults counted"),
        ("(b2)/(c2)", best["(b2)"], best["(c2)"], "v2 fresh copies / plain read, new buffer"),
        ("(b)/(d)", best["(b)"], best["(d)"], "v2 read / safetensors load_file"),
        ("conversion/(a)", conversion.default_s, best["(a)"],
         f"conversion once (--jobs {conversion.jobs}, the default) / one v1 load"),
        ("conv 1/(a)", conversion.one_s, best["(a)"], "conversion once (--jobs 1) / one v1 load"),
        ("conversion/(c)", conversion.default_s, best["(c)"],
         f"conversion (--jobs {conversion.jobs}) / plain read of its output"),
        ("conv 1/(c)", conversion.one_s, best["(c)"], "conversion (--jobs 1) / plain read"),
        ("default/jobs 1", conversion.default_s, conversion.one_s,
         f"--jobs {conversion.jobs} / --jobs 1 (target: 1.5x faster on 2 cores, <= 0.67)"),
    ]  # fmt: skip
    failed = []
    for name, num, den, note in lines:
        print(ratio_line(name, num, den, note))
        if name in TARGETS and num / den > TARGETS[name]:
            failed.append(name)
    times = getattr(by_key["(c)"], phase)
    print(f"  repeat spread of (c), slowest / fastest: {max(times) / min(times):.2f} "
          "(ratios closer to their target than this are within the noise)")  # fmt: skip
    return failed


def torch_cases(v2: Path, workdir: Path) -> list[Case]:
    """(t) and (ts): the same tensors through ``reference.torch`` and ``safetensors.torch``."""
    if awq_torch is None or safetensors_torch is None:
        return []
    same = workdir / "same_tensors.safetensors"
    safetensors_torch.save_file(awq_torch.load_file(v2), str(same))
    return [
        Case("(t)", "v2 reference.torch.load_file", lambda: awq_torch.load_file(v2), [v2],
             v2.stat().st_size),
        Case("(ts)", "safetensors.torch.load_file, the same tensors",
             lambda: safetensors_torch.load_file(str(same)), [same], same.stat().st_size),
        Case("(tv)", "v2 reference.torch.load_file(validate=True)",
             lambda: awq_torch.load_file(v2, validate=True), [v2], v2.stat().st_size),
        Case("(tp)", "v2 reference.torch.load_file(backend='pread')",
             lambda: awq_torch.load_file(v2, backend="pread"), [v2], v2.stat().st_size),
        Case("(tsp)", "safetensors.torch.load_file(backend='pread'), the same",
             lambda: safetensors_torch.load_file(str(same), backend="pread"), [same],
             same.stat().st_size),
    ]  # fmt: skip


def set_cases(v1_dir: Path, v2: Path, workdir: Path) -> list[Case]:
    """(l), (ls) and (lr): load_file of the single file, of a split set of the same model and
    of rank 0 of a rank set for 2 ranks (both converted here, not timed); with torch, (tl),
    (tls) and (tlr) the same through reference.torch."""
    if awq_numpy is None:
        return []
    split, ranks = workdir / "split", workdir / "tp2"
    shard = v2.stat().st_size // 4 + 1
    convert_folder(v1_dir, split, verify=False, max_shard_size=shard)
    convert_folder(v1_dir, ranks, verify=False, tp_size=2)
    members = {
        "file": [v2],
        "split": sorted(split.glob("*.awq2")),
        "rank": sorted(ranks.glob("*rank0.awq2")),
    }
    size = {k: sum(p.stat().st_size for p in v) for k, v in members.items()}
    every_rank = sum(p.stat().st_size for p in ranks.glob("*.awq2"))
    print(f"split set: {len(members['split'])} members, {size['split']:,} B; rank set: "
          f"rank 0 {size['rank']:,} B of {every_rank:,} B")  # fmt: skip
    where = {"file": (v2, None), "split": (split, None), "rank": (ranks, 0)}
    cases = []
    for prefix, module, kw in (("(l", awq_numpy, {"backend": "pread"}), ("(tl", awq_torch, {})):
        if module is None:
            continue
        for suffix, kind, what in (("", "file", "the single file"), ("s", "split", "a split set"),
                                   ("r", "rank", "rank 0 of a rank set (T=2)")):  # fmt: skip
            path, rank = where[kind]
            label = f"{module.__name__}.load_file {what}"

            def load(m: Any = module, p: Path = path, r: int | None = rank, k: Any = kw) -> object:
                return m.load_file(p, rank=r, **k)

            cases.append(Case(f"{prefix}{suffix})", label, load, members[kind], size[kind]))
    return cases


def print_set_ratios(by_key: dict[str, Case], phase: str) -> None:
    """load_file of a split set and of one rank against the single file, side by side."""
    for prefix in ("(l", "(tl"):
        one = by_key.get(f"{prefix})")
        if one is None or not getattr(one, phase):
            continue
        base = min(getattr(one, phase))
        for suffix, note in (("s", "split set / single file, the same tensors"),
                             ("r", "rank 0 of T=2 / single file")):  # fmt: skip
            case = by_key[f"{prefix}{suffix})"]
            times = getattr(case, phase)
            share = f", {case.nbytes / one.nbytes:.0%} of its bytes" if suffix == "r" else ""
            print(ratio_line(f"{prefix}{suffix})/{prefix})", min(times), base, note + share))


def print_torch_ratio(by_key: dict[str, Case], phase: str) -> None:
    """The (t)/(ts) line, or why it was not measured."""
    if awq_torch is None:
        print(f"  (t)/(ts)  not measured: torch is not installed ({TORCH_MISSING})")
        return
    keys = ("(t)", "(ts)", "(tv)", "(tp)", "(tsp)")
    t, ts, tv, tp, tsp = (getattr(by_key[k], phase) for k in keys)
    if t and ts and tv and tp and tsp:
        note = "reference.torch.load_file / safetensors.torch.load_file, default mmap backends"
        print(ratio_line("(t)/(ts)", min(t), min(ts), note))
        print(ratio_line("(tv)/(ts)", min(tv), min(ts), "the same, full validation first"))
        print(ratio_line("(tp)/(tsp)", min(tp), min(tsp), "the same, backend='pread' on both"))
        print(
            "  (the mmap backends return tensors in a copy-on-write map of the file, read on "
            "first touch;\n   the pread ones have read every byte)"
        )


def profile_v2_read(path: Path, *, cold: bool, top: int = 12) -> None:
    """cProfile of (b): where the time goes."""
    buf = np.empty(path.stat().st_size, np.uint8)
    if cold:
        drop_cache(path)
    else:
        read_all(path)
    profiler = cProfile.Profile()
    profiler.enable()
    result = v2_read_many(path, buf)
    profiler.disable()
    del result
    print(f"\ncProfile of (b), {'cold' if cold else 'warm'} cache, sorted by internal time:")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(top)


def print_environment(shape_name: str, shape: LlamaShape) -> None:
    print(f"Python {platform.python_version()}, numpy {np.__version__}, "
          f"safetensors {safetensors.__version__}, {platform.system()} {platform.release()}, "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    print(f"shape {shape_name}: hidden {shape.hidden_size}, intermediate "
          f"{shape.intermediate_size}, {shape.num_hidden_layers} layers, "
          f"{shape.num_attention_heads}/{shape.num_key_value_heads} heads, vocab "
          f"{shape.vocab_size}, {shape.bits}-bit, group {shape.group_size}")  # fmt: skip


# ------------------------------------------------------------------------------ the run


def generate(folder: Path, shape: LlamaShape) -> Path:
    t0 = time.perf_counter()
    write_checkpoint(folder, shape)
    seconds = time.perf_counter() - t0
    path = folder / "model.safetensors"
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"generated AWQ v1 {path}: {path.stat().st_size:,} bytes in {seconds:.2f} s "
          f"(peak RSS so far {rss:.0f} MiB)")  # fmt: skip
    return path


@dataclass
class Conversions:
    """Best conversion times (verify=False) with ``--jobs 1`` and with the default thread count."""

    one_s: float
    default_s: float
    jobs: int


def convert_timed(src: Path, dst: Path, repeats: int) -> Conversions:
    """Convert with ``--jobs 1`` and with the default, alternately, ``repeats`` times each;
    the best of each (the last output is kept)."""
    jobs = default_jobs()
    times: dict[int, list[float]] = {1: [], jobs: []}
    for _ in range(repeats):
        for n in dict.fromkeys((1, jobs)):
            # Into a new file, as a user converts: replacing the last repeat's output would
            # also time freeing its blocks (0.2 s for the 1B shape, in the rename).
            dst.unlink(missing_ok=True)
            t0 = time.perf_counter()
            summary = convert(src, dst, verify=False, jobs=n)
            times[n].append(time.perf_counter() - t0)
            print(f"converted to AWQ-v2 {dst}: {summary['file_size']:,} bytes "
                  f"({summary['tensors']} tensors, {summary['marlin_layers']}/"
                  f"{summary['layers']} Marlin layers, padding {summary['padding_bytes']:,} B) "
                  f"in {times[n][-1]:.2f} s (verify=False, --jobs {n})")  # fmt: skip
    t0 = time.perf_counter()
    with reference.open(dst, validate=True) as r:
        r.verify()
    print(f"verification (open(validate=True).verify()): {time.perf_counter() - t0:.2f} s")
    return Conversions(min(times[1]), min(times[jobs]), jobs)


def make_cases(
    v1_dir: Path, v1_file: Path, v2: Path, buf: np.ndarray, direct: bool, every: EveryCore
) -> list[Case]:
    """The timed cases; ``buf`` is the preallocated buffer of (b), (c), (c3), (c4), (c5)."""
    s1, s2 = v1_file.stat().st_size, v2.stat().st_size
    cases = [
        Case("(a)", "v1 open + NumPy repack to Marlin", lambda: v1_repack(v1_dir), [v1_file], s1),
        Case(
            "(b)",
            "v2 reference.open + read_many_into, preallocated",
            lambda: v2_read_many(v2, buf),
            [v2],
            s2,
        ),
        Case(
            "(b3)",
            "v2 reference.open + read_into per tensor, preallocated",
            lambda: v2_read_into(v2, buf),
            [v2],
            s2,
        ),
        Case("(b2)", "v2 reference.open + np.array of each view", lambda: v2_copies(v2), [v2], s2),
        Case(
            "(c)",
            "plain readinto of the v2 file, preallocated",
            lambda: plain_read(v2, buf),
            [v2],
            s2,
        ),
        Case("(c2)", "plain readinto of the v2 file, new buffer", lambda: plain_read(v2), [v2], s2),
        Case(
            "(c3)",
            "copy of the v2 file out of a map, preallocated",
            lambda: map_copy(v2, buf),
            [v2],
            s2,
        ),
        Case(
            "(c4)",
            f"(c) on every core: preadv of pieces, {every.threads} threads",
            lambda: every.pread(v2, buf),
            [v2],
            s2,
        ),
        Case(
            "(c5)",
            f"(c3) on every core: map copy of pieces, {every.threads} threads",
            lambda: every.map_copy(v2, buf),
            [v2],
            s2,
        ),
        Case(
            "(d)",
            "safetensors load_file of the v1 file",
            lambda: load_file(str(v1_file)),
            [v1_file],
            s1,
        ),
    ]
    if direct:
        cases.append(
            Case("(e)", "v2 index + O_DIRECT preadv per tensor", lambda: direct_read(v2), [v2], s2)
        )
    return cases


def run(workdir: Path, shape_name: str, repeats: int, profile: bool) -> None:
    shape = SHAPES[shape_name]
    print_environment(shape_name, shape)
    v1_dir, v2 = workdir / "v1", workdir / "model.awq2"
    v1_file = generate(v1_dir, shape)
    conversion = convert_timed(v1_dir, v2, repeats)
    print(f"file sizes: v1 {v1_file.stat().st_size:,} B, v2 {v2.stat().st_size:,} B")

    refused = direct_supported(v2)
    if refused:
        print(f"O_DIRECT: the filesystem refuses it ({refused}); case (e) skipped")
    else:
        print(check_direct(v2))
        print(misaligned_direct(v1_file))

    buf = np.empty(v2.stat().st_size, np.uint8)
    buf.fill(0)  # touch every page now, outside the timers
    every = EveryCore()
    cases = make_cases(v1_dir, v1_file, v2, buf, direct=refused is None, every=every)
    cases += torch_cases(v2, workdir)
    cases += set_cases(v1_dir, v2, workdir)
    for path in {path for case in cases for path in case.files}:
        read_all(path)
    measure(cases, repeats, cold=False)
    check = cold_check(v2, buf)
    print(check.describe(v2.stat().st_size))
    if check.achieved:
        measure(cases, repeats, cold=True)
    else:
        print("cold figures skipped: dropping the file from the page cache did not slow reads")
    if not refused:
        print("(e) bypasses the page cache: its warm and cold figures measure the same thing")

    print_table(cases)
    by_key = {c.key: c for c in cases}
    for phase in ("warm", "cold"):
        failed = print_ratios(by_key, conversion, phase)
        print_torch_ratio(by_key, phase)
        print_set_ratios(by_key, phase)
        if profile or {"(b)/(floor)", "(b)/(d)"} & set(failed):
            profile_v2_read(v2, cold=phase == "cold")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python bench/bench_load.py",
        description="Measure how long loading a whole AWQ model takes: AWQ v1 with the NumPy "
        "repack to Marlin an engine does today (a), AWQ-v2 through reference.open (b) and "
        "through one buffered pread per tensor (b2), a plain "
        "sequential read of the AWQ-v2 file (c) and a copy of it out of a map (c3) on one "
        "thread, the same two on every core (c4, c5), the fastest of the four being the floor "
        "(both the one-thread and the every-core floor are printed), safetensors load_file of "
        "the v1 "
        "file (d), and O_DIRECT reads of the 64 KiB-aligned AWQ-v2 payloads (e); warm and cold "
        "page cache, best and median of --repeats; plus the v1 -> v2 conversion time. Ratios "
        "(b)/(floor) <= 1.1, (b)/(d) <= 1.0 and conversion/(a) <= 3.0 are the targets.",
        epilog="always exits 0 (a benchmark, not a test)",
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b",
                        help="tiny (seconds), 1b (TinyLlama-1.1B shape, default) or 7b "
                        "(Llama-2-7B shape)")  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None,
                        help="folder in which to make the temporary work folder")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each case")
    parser.add_argument(
        "--profile", action="store_true", help="profile (b) even when it meets its targets"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bench_load_", dir=args.dir))
    try:
        run(workdir, args.shape, max(1, args.repeats), args.profile)
    finally:
        if args.keep:
            print(f"\nkept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
