"""``reference.safe_open`` of a split set shared by threads (issue 38, #11).

A set keeps at most a few members open and closes the least recently used one to make room
for another.  Here eight threads read tensors of a set of twelve members, two open at a time,
so members are closed and opened again all the time, while other threads read them.  Every
result must be the bytes written: each member's tensor holds its own values (the member's
number in every element, and a length of its own), so bytes of another member, a reader
closed under a thread (``AttributeError``, ``EBADF``) or a descriptor number reused by
another member (a false ``TRUNCATED``, or another member's bytes) all show.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import reference
from reference.sets import fileset
from reference.sets.setwriter import save_set

MEMBERS = 12
THREADS = 8
OPEN_AT_ONCE = 2
SECONDS = 3.0  # each thread stops after this, or after ITERATIONS reads
ITERATIONS = 4000


def _tensors() -> dict[str, np.ndarray]:
    """One tensor per member: member ``i`` holds ``i + 1`` in every element, and has
    ``64 + 16 i`` rows (a member's length is its own)."""
    return {f"t{i:02d}": np.full((64 + 16 * i, 256), i + 1, np.int32) for i in range(MEMBERS)}


@pytest.fixture
def split_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    tensors = _tensors()
    largest = max(a.nbytes for a in tensors.values())
    members = save_set(tmp_path / "set", tensors, max_size=largest + 8192)
    assert len(members) == MEMBERS  # one tensor per member
    monkeypatch.setattr(fileset, "MAX_OPEN_MEMBERS", OPEN_AT_ONCE)  # eviction all the time
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave at every few bytecodes
    try:
        yield tmp_path / "set"
    finally:
        sys.setswitchinterval(switch)


def _reader(
    opened: reference.safe_open,
    tensors: dict[str, np.ndarray],
    seed: int,
    start: threading.Barrier,
    failures: list[str],
) -> None:
    rng = np.random.default_rng(seed)
    names = sorted(tensors)
    start.wait()
    deadline = time.monotonic() + SECONDS
    for i in range(ITERATIONS):
        if time.monotonic() > deadline or len(failures) > 20:
            return
        name = names[int(rng.integers(len(names)))]
        want = tensors[name]
        a = int(rng.integers(want.shape[0]))
        b = int(rng.integers(a, want.shape[0])) + 1
        try:
            if i % 4 == 3:
                got = opened.get_tensor(name)
                expected = want
            else:
                got = opened.get_slice(name)[a:b, 1:-1:3]
                expected = want[a:b, 1:-1:3]
        except Exception as exc:  # every error is a failure here
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if got.shape != expected.shape or not np.array_equal(got, expected):
            found = sorted(set(np.asarray(got).reshape(-1).tolist()))[:5]
            failures.append(f"{name}: values {found}, expected {int(want.flat[0])}")


def test_threads_sharing_a_set_read_their_own_members_bytes(split_set: Path) -> None:
    tensors = _tensors()
    start = threading.Barrier(THREADS)
    failures: list[str] = []
    with reference.safe_open(split_set, "np") as opened:
        threads = [
            threading.Thread(target=_reader, args=(opened, tensors, seed, start, failures))
            for seed in range(THREADS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert opened.keys() == sorted(tensors)
    assert not failures, f"{len(failures)} bad read(s), first: " + "; ".join(failures[:5])
