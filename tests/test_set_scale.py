"""File sets of many members [SET-2, SET-5, SET-6, SET-8]: full validation is linear in the
members and names, and neither loader needs a descriptor or a map per member at once.

SET-2 allows 65536 members.  Linearity is shown by counting, not timing: the name lookups
that full validation makes.  The descriptor budget is shown by validating and verifying, in a
child process whose ``RLIMIT_NOFILE`` is far below the member count, a set of 2,000 members
with both loaders (each member a complete one-tensor file written by ``reference.save``; the
manifest measured here).  ``bench/bench_sets.py`` times the same at 5,000 and 60,000 members.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import reference
from conformance import run
from reference.format.index import Index
from reference.ground.errors import FormatError
from reference.sets.fileset import FileSet
from spec.constants import SET_MANIFEST

ROOT = Path(__file__).resolve().parent.parent


def _split_set(folder: Path, members: list[dict[str, np.ndarray]]) -> Path:
    """A split set by hand: each member written by ``reference.save``, the manifest measured
    here (length, bytes 124..127, SHA-256)."""
    folder.mkdir(parents=True)
    files = []
    for i, tensors in enumerate(members):
        path = folder / f"model-{i + 1:05d}-of-{len(members):05d}.awq2"
        reference.save(path, tensors)
        data = path.read_bytes()
        files.append({"name": path.name, "size": len(data),
                      "header_crc": f"{struct.unpack_from('<I', data, 124)[0]:08x}",
                      "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    document = {"awq2_set": 1, "kind": "split", "files": files}
    (folder / SET_MANIFEST).write_text(json.dumps(document), encoding="utf-8")
    return folder


@pytest.fixture
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """Throwaway members: the writer's fsync would cost ten times the rest."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


def _tiny(count: int, per_member: int = 2) -> list[dict[str, np.ndarray]]:
    w = np.arange(4, dtype=np.float16)
    return [{f"layers.{i}.t{j}": w for j in range(per_member)} for i in range(count)]


def _lookups(folder: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Name lookups (in any member's hash index) that full validation of the set makes."""
    calls = 0
    real = Index.lookup

    def counted(self: Index, name: str) -> object:
        nonlocal calls
        calls += 1
        return real(self, name)

    with FileSet(folder) as s:
        monkeypatch.setattr(Index, "lookup", counted)
        s.validate()
        monkeypatch.undo()
    return calls


def test_validation_lookups_grow_linearly_with_members(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_fsync: None
) -> None:
    """[SET-6]: looking each member's names up in every earlier member costs
    names * members / 2 lookups (2 names x 120 members: 14,280); full validation must stay
    within the names it holds, whatever the member count."""
    small = _split_set(tmp_path / "small", _tiny(30))
    large = _split_set(tmp_path / "large", _tiny(120))
    few, many = _lookups(small, monkeypatch), _lookups(large, monkeypatch)
    assert many <= 2 * 120, f"{many} lookups for 240 names in 120 members"
    assert many <= 4 * max(few, 1) + 8, f"{few} lookups at 30 members, {many} at 120"


def test_the_duplicate_reported_is_the_first_member_to_repeat_a_name(
    tmp_path: Path, no_fsync: None
) -> None:
    """[SET-6, SET-8]: the first member in manifest order that repeats a name, at its first
    such name in slab order, against the first earlier member that holds it."""
    w = np.ones(2, np.float16)
    folder = _split_set(tmp_path / "s", [{"a": w, "x": w}, {"b": w, "y": w},
                                         {"c": w, "y": w, "x": w}, {"x": w}])  # fmt: skip
    with FileSet(folder) as s, pytest.raises(FormatError) as caught:
        s.validate()
    err = caught.value
    assert err.code == "SET_DUPLICATE_NAME" and "'y'" in err.message
    assert err.expected == "one of model-00002-of-00004.awq2, model-00003-of-00004.awq2"
    assert err.path == str(folder / "model-00003-of-00004.awq2")


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_set_keeps_at_most_max_open_members_open(tmp_path: Path, no_fsync: None) -> None:
    """Members are opened on demand, at most ``max_open`` at once (two descriptors each),
    through opening, validation, verification and a read of every tensor."""
    folder = _split_set(tmp_path / "s", _tiny(40))
    before = _open_descriptors()
    with FileSet(folder, max_open=4) as s:
        assert _open_descriptors() - before <= 2 * 4
        s.verify()
        names = s.names()
        assert len(names) == 80 and len(s) == 80
        for name in names:
            assert s.tensor(name).tolist() == [0, 1, 2, 3]
        assert [r.path.name for r in s.members] == sorted(p.name for p in folder.glob("*.awq2"))
        assert _open_descriptors() - before <= 2 * 4
    assert _open_descriptors() == before


_CHILD = """
import resource, sys
import reference
folder, limit, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
with reference.open(folder, validate=True) as s:
    s.verify()
    assert len(s) == count, len(s)
    assert s.tensor(f"layers.{count - 1}.t0").tolist() == [0, 1, 2, 3]
print("ok")
"""

_LIMITED = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]),) * 2); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def test_more_members_than_descriptors_with_both_loaders(tmp_path: Path, no_fsync: None) -> None:
    """2,000 members under a limit of 128 descriptors: the reference opens, validates and
    verifies the set (it kept a descriptor per member and failed with EMFILE), and so does
    the C loader (it maps one member at a time), in a reasonable time on two cores."""
    folder = _split_set(tmp_path / "s", _tiny(2000, per_member=1))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(folder), "128", "2000"],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    binary = run.build_c_loader(tmp_path / "awq2c")
    proc = subprocess.run([sys.executable, "-c", _LIMITED, "128", str(binary), str(folder)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert len(doc["tensors"]) == 2000 and doc["set"] == {"kind": "split"}
