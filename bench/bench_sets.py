"""Benchmark full validation of a split set of many tiny members: the reference against the C
loader, side by side in one run.

Usage: ``python bench/bench_sets.py [--members 5000,60000] [--jobs N] [--keep DIR]``.

For each member count N, a split set of N members is written in a temporary folder: member
``i`` is a complete AWQ-v2 file (``reference.save``) holding one tensor of its own,
``layers.{i}.weight`` (SET-6: no name in two members), and the manifest lists them with the
length, header checksum and SHA-256 measured here.  The members are written on ``--jobs``
processes without ``fsync`` (throwaway files: durability is not what is measured).  Then:

* ``reference open+validate``  ``FileSet(folder, validate=True)``: the opening checks of every
  member (SET-5), then full validation (SET-8: each member's RD-2, extra files, SET-6);
* ``reference verify``         ``verify()`` on that set: every payload checksum and SHA-256;
* ``C loader``                 ``awq2c FOLDER`` (built with ``cc -O2``): open, validate, verify
  and the JSON document, one process, output to /dev/null.

Each line prints the seconds, the microseconds per member and the ratio reference / C (the
reference's open+validate+verify against the C loader's whole run, which does at least as
much).  Linear validation shows as a per-member cost that stays flat from 5,000 to 60,000
members; the quadratic SET-6 check it replaced took 239 s at 5,000 members.  The reference
keeps at most ``reference.sets.fileset.default_max_open()`` members open; the C loader maps
one member at a time, so 60,000 members need neither 60,000 descriptors nor 60,000 maps.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import reference
from conformance.run import build_c_loader
from reference.sets.fileset import FileSet, default_max_open
from reference.sets.setmanifest import Manifest, Member, manifest_text
from reference.sets.setwriter import member_name
from spec.constants import SET_MANIFEST
from spec.schema import HEADER_CRC_OFFSET


def _no_fsync() -> None:
    """Worker setup: the members are throwaway files, so skip the writer's fsync (it costs
    ten times the rest of writing a 128 KiB member)."""
    os.fsync = lambda fd: None


def _write_members(folder: str, count: int, first: int, last: int) -> list[Member]:
    """Members ``first`` to ``last - 1`` (from 0) of a set of ``count``, each measured."""
    out = []
    payload = np.arange(4, dtype=np.float16)
    for i in range(first, last):
        name = member_name(i + 1, count)
        path = os.path.join(folder, name)
        reference.save(path, {f"layers.{i}.weight": payload})
        with open(path, "rb") as f:
            data = f.read()
        crc = struct.unpack_from("<I", data, HEADER_CRC_OFFSET)[0]
        out.append(Member(name, len(data), crc, hashlib.sha256(data).hexdigest()))
    return out


def build_split_set(folder: Path, count: int, jobs: int) -> None:
    """A split set of ``count`` one-tensor members in the empty folder ``folder``."""
    step = max(1, -(-count // (jobs * 8)))
    firsts = range(0, count, step)
    lasts = [min(i + step, count) for i in firsts]
    with ProcessPoolExecutor(jobs, initializer=_no_fsync) as pool:
        parts = pool.map(_write_members, [str(folder)] * len(lasts), [count] * len(lasts),
                         firsts, lasts)  # fmt: skip
        members = [m for part in parts for m in part]
    (folder / SET_MANIFEST).write_text(manifest_text(Manifest("split", tuple(members))))


def time_reference(folder: Path) -> tuple[float, float]:
    """Seconds of open+validate, then of verify."""
    started = time.perf_counter()
    with FileSet(folder, validate=True) as s:
        validated = time.perf_counter()
        s.verify()
        verified = time.perf_counter()
    return validated - started, verified - validated


def time_c(binary: Path, folder: Path) -> float:
    """Seconds of the C loader's whole run on the folder (exit 0 required)."""
    started = time.perf_counter()
    proc = subprocess.run([str(binary), str(folder)], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"awq2c {folder}: exit {proc.returncode}: {proc.stderr.strip()}")
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", default="5000,60000", help="member counts, comma-separated")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="processes writing members")  # fmt: skip
    parser.add_argument("--keep", type=Path, help="write the sets under DIR and keep them")
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.members.split(",")]
    binary = build_c_loader(Path(tempfile.mkdtemp(prefix="awq2c-")) / "awq2c")
    print(f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} "
          f"cores; the reference keeps at most {default_max_open()} members open")  # fmt: skip
    for count in counts:
        root = Path(tempfile.mkdtemp(dir=args.keep))
        folder = root / f"set-{count}"
        folder.mkdir()
        try:
            started = time.perf_counter()
            build_split_set(folder, count, args.jobs)
            built = time.perf_counter() - started
            validate, verify = time_reference(folder)
            c = time_c(binary, folder)
            ref = validate + verify
            print(f"{count:>6} members (built in {built:.1f} s): reference open+validate "
                  f"{validate:.2f} s ({validate / count * 1e6:.0f} us/member), verify "
                  f"{verify:.2f} s; C loader {c:.2f} s ({c / count * 1e6:.0f} us/member); "
                  f"reference/C {ref / c:.1f}x", flush=True)  # fmt: skip
        finally:
            if args.keep is None:
                shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
