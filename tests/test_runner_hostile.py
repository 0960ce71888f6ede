"""``awq2-conformance --suite ARCHIVE`` against a hostile suite, and stopped by a signal (issue 29).

* one file listed under 10,000 vector ids is hashed once, not once per id (finding 1: a 43 KB
  archive listing one 64 MiB file under 100,000 ids kept the runner hashing for days);
* an archive member the file system cannot hold (a name too long, a file where an earlier
  member made a folder, more data than ``$TMPDIR`` has room for, unpacking or copying a
  vector for a loader) is a suite error, exit 2, naming the member and what is wrong, with no
  temporary folder left behind (finding 3: a traceback, exit 1);
* a manifest of 100,000 nested ``[`` is refused, exit 2, before it is parsed, and a loader
  printing such a document is judged, not a ``RecursionError`` (finding 4);
* SIGTERM and SIGHUP stop a run as Ctrl-C does: the running loader is killed, the temporary
  folders removed, one line on stderr, exit 128 + the signal (finding 9: the loader was
  orphaned and up to 512 MiB left in ``$TMPDIR``).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import lzma
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import pytest

from conformance import archive, exactjson, run
from conformance import suite as suite_module

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conformance"
MANIFEST = json.loads((CONF / "manifest.json").read_text(encoding="utf-8"))
BAD_MAGIC = next(v for v in MANIFEST["vectors"] if v["id"] == "n_bad_magic")

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups, tmpfs, sh loaders")


# ------------------------------------------------------------------------------ helpers


def _tar_xz(path: Path, members: Sequence[tuple[str, bytes | None]]) -> Path:
    """A .tar.xz of ``members``: (name, bytes) a file, (name, None) a folder."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    path.write_bytes(lzma.compress(raw.getvalue(), preset=1))
    return path


def _reject(vector_id: str, file: str, data: bytes) -> dict:
    """A must-reject vector of ``file`` holding ``data``."""
    kept = ("expect", "requirements", "description", "error_code", "check_level")
    return {
        **{k: BAD_MAGIC[k] for k in kept},
        "id": vector_id,
        "file": file,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _manifest(vectors: list[dict]) -> bytes:
    doc = {**{k: MANIFEST[k] for k in MANIFEST if k != "vectors"}, "files": [], "vectors": vectors}
    return json.dumps(doc).encode()


@pytest.fixture
def tmpdir_(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``$TMPDIR`` of the runner's own, to see what it leaves there."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _left(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.iterdir())


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the runner; it must exit 2 with one ``error:`` message, no traceback."""
    status = run.main(["--quiet", *argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("error: "), err
    return err


# ------------------------------------------------------------------------------ finding 1


def test_one_file_under_many_ids_is_refused_before_anything_is_hashed(
    tmp_path: Path,
    tmpdir_: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """1 MiB listed under 10,000 ids: before, each listing was hashed again (days for 64 MiB
    under 100,000 ids), then the loader would have run 10,000 times on it.  A vector is now
    its own file or folder: such a manifest is a suite error (exit 2) naming two of the ids,
    and nothing is hashed.  The count stops a run that hashes more than 8 MiB."""
    data = bytes(1 << 20)
    one = _reject("n_same", "vectors/same.awq2", data)
    vectors = [{**one, "id": f"n_same_{i}"} for i in range(10_000)]
    path = _tar_xz(
        tmp_path / "same.tar.xz",
        [("top/manifest.json", _manifest(vectors)), ("top/vectors/same.awq2", data)],
    )
    hashed: list[int] = []
    real = suite_module.sha256_of

    def counted(f: BinaryIO) -> str:
        start = f.tell()
        digest = real(f)
        hashed.append(f.tell() - start)
        assert sum(hashed) <= 8 << 20, f"{len(hashed)} files hashed, {sum(hashed)} bytes"
        return digest

    monkeypatch.setattr(suite_module, "sha256_of", counted)
    err = _refused(["--quiet", "--suite", str(path)], capsys)
    assert "vectors 'n_same_0' and 'n_same_1' are both 'vectors/same.awq2'" in err
    assert hashed == [] and _left(tmpdir_) == []


def test_a_file_listed_twice_is_hashed_once_and_each_listing_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A vector's file also listed under ``files`` (the one way a path may be listed twice):
    it is hashed once, and a listing with another sha256 is still named."""
    data = b"AWQ2 not really"
    suite = tmp_path / "suite"
    (suite / "vectors").mkdir(parents=True)
    (suite / "vectors" / "x.awq2").write_bytes(data)
    doc = json.loads(_manifest([_reject("n_a", "vectors/x.awq2", data)]))
    doc["files"] = [{"path": "vectors/x.awq2", "size": len(data), "sha256": "0" * 64}]
    (suite / "manifest.json").write_text(json.dumps(doc))
    err = _refused(["--suite", str(suite)], capsys)
    found = hashlib.sha256(data).hexdigest()
    assert f"vectors/x.awq2: sha256 expected {'0' * 64}, found {found}" in err


# ------------------------------------------------------------------------------ finding 3


def test_a_member_name_too_long_for_the_file_system(
    tmp_path: Path, tmpdir_: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "top/vectors/" + "a" * 300  # one part longer than NAME_MAX (255)
    path = _tar_xz(tmp_path / "long.tar.xz", [(name, b"x")])
    err = _refused(["--suite", str(path)], capsys)
    assert f"member {name[: archive.NAME_SHOWN]!r}... ({len(name)} characters)" in err
    assert "its name is too long for the file system" in err
    assert _left(tmpdir_) == []


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([("top/s/a/b", b"x"), ("top/s/a", b"y")], "a file where an earlier member made a folder"),
        ([("top/s/a", b"x"), ("top/s/a/", None)], "twice in the archive"),
        ([("top/s/a", b"x"), ("top/s/a/b", b"y")], "a parent is not a folder"),
    ],
)
def test_a_file_where_a_folder_was(
    tmp_path: Path,
    tmpdir_: Path,
    capsys: pytest.CaptureFixture[str],
    members: list,
    message: str,
) -> None:
    path = _tar_xz(tmp_path / "clash.tar.xz", members)
    err = _refused(["--suite", str(path)], capsys)
    assert f"member {members[1][0].rstrip('/')!r}: {message}" in err
    assert _left(tmpdir_) == []


@contextlib.contextmanager
def _tmpfs(folder: Path, options: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A tmpfs mounted on ``folder`` with ``options``, as ``$TMPDIR`` (needs the right to
    mount: root on Linux; skipped elsewhere, where the monkeypatched test below stands in)."""
    folder.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot run mount: {exc}")
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here: {mounted.stderr.decode().strip()}")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True, timeout=10)


@pytest.fixture
def small_tmpfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A 3 MiB ``$TMPDIR``."""
    with _tmpfs(tmp_path / "small", "size=3m", monkeypatch) as folder:
        yield folder


def test_no_room_for_a_temporary_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``$TMPDIR`` with no inode left: not even the folder to unpack into can be made."""
    path = _tar_xz(tmp_path / "any.tar.xz", [("top/manifest.json", b"{}")])
    with _tmpfs(tmp_path / "full", "size=1m,nr_inodes=1", monkeypatch) as full:
        err = _refused(["--suite", str(path)], capsys)
        assert f"cannot make a temporary folder in {full} (No space left on device)" in err
        assert _left(full) == []


def test_no_space_left_in_tmpdir_to_unpack(
    tmp_path: Path, small_tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 4 MiB member into a 3 MiB ``$TMPDIR``: the member is named, nothing is left."""
    path = _tar_xz(tmp_path / "big.tar.xz", [("top/vectors/zeros.awq2", bytes(4 << 20))])
    err = _refused(["--suite", str(path)], capsys)
    assert "member 'top/vectors/zeros.awq2': no space left to unpack it into " in err
    assert "No space left on device" in err and "set TMPDIR" in err
    assert _left(small_tmpfs) == []


def test_no_space_left_in_tmpdir_for_the_loaders_copy(
    tmp_path: Path, small_tmpfs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 2 MiB vector unpacks into a 3 MiB ``$TMPDIR``, its copy for the loader does not."""
    data = b"AWQ" + bytes(2 << 20)
    manifest = _manifest([_reject("n_big", "vectors/big.awq2", data)])
    members = [("top/manifest.json", manifest), ("top/vectors/big.awq2", data)]
    path = _tar_xz(tmp_path / "copy.tar.xz", members)
    err = _refused(["--suite", str(path)], capsys)
    assert "cannot make the loader's copy of vectors/big.awq2 in " in err
    assert "No space left on device" in err
    assert _left(small_tmpfs) == []


def test_no_space_left_while_unpacking_without_a_tmpfs(
    tmp_path: Path,
    tmpdir_: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same refusal where mounting is not permitted: the write of one member fails with
    ENOSPC after its first chunk, as a full file system makes it."""
    real = os.fdopen

    class Full(io.RawIOBase):
        def __init__(self, fd: int) -> None:
            self._file = real(fd, "wb")
            self._written = 0

        def writable(self) -> bool:
            return True

        def write(self, data: bytes) -> int:  # type: ignore[override]
            if self._written:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self._written += len(data)
            return self._file.write(data)

        def close(self) -> None:
            self._file.close()
            super().close()

    def fdopen(fd: int, mode: str = "r", *args: object, **kwargs: object) -> object:
        if mode == "wb" and os.readlink(f"/proc/self/fd/{fd}").endswith("zeros.awq2"):
            return Full(fd)
        return real(fd, mode, *args, **kwargs)  # type: ignore[call-overload]

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("no /proc/self/fd to tell the member's descriptor")
    monkeypatch.setattr(archive.os, "fdopen", fdopen)
    path = _tar_xz(tmp_path / "big.tar.xz", [("top/vectors/zeros.awq2", bytes(1 << 20))])
    err = _refused(["--suite", str(path)], capsys)
    assert "member 'top/vectors/zeros.awq2': no space left to unpack it into " in err
    assert _left(tmpdir_) == []


# ------------------------------------------------------------------------------ finding 4


def test_a_deeply_nested_manifest_is_refused_unparsed(
    tmp_path: Path, tmpdir_: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _tar_xz(tmp_path / "deep.tar.xz", [("top/manifest.json", b"[" * 100_000)])
    err = _refused(["--suite", str(path)], capsys)
    assert "manifest.json: nested 100000 levels deep, more than the " in err
    assert f"{exactjson.MAX_DEPTH} allowed; not a manifest" in err
    assert _left(tmpdir_) == []


@pytest.mark.parametrize(("status", "kind"), [(0, "crash"), (1, "reject")])
def test_a_loader_printing_a_deeply_nested_document_is_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int, kind: str
) -> None:
    suite = tmp_path / "suite"
    (suite / "vectors").mkdir(parents=True)
    data = (CONF / BAD_MAGIC["file"]).read_bytes()
    (suite / BAD_MAGIC["file"]).write_bytes(data)
    (suite / "manifest.json").write_bytes(_manifest([_reject("n_x", BAD_MAGIC["file"], data)]))
    script = tmp_path / "deep.sh"
    script.write_text(
        f"#!/bin/sh\n{sys.executable} -c 'print(\"[\" * 100000)'\nexit {status}\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    report = tmp_path / "report.json"
    argv = ["--suite", str(suite), "--loader", f"deep={script} {{file}}"]
    run.main([*argv, "--report-json", str(report)])
    (outcome,) = json.loads(report.read_text(encoding="utf-8"))["outcomes"]
    assert outcome["kind"] == kind
    if kind == "crash":
        assert "nested 100000 levels deep" in outcome["detail"]
    else:  # a reject without a code: the vector passes with a note
        assert outcome["code"] is None and outcome["passed"]


# ------------------------------------------------------------------------------ finding 9


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] != "Z"
    return True


def _wait_for(condition: Callable[[], object], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


def _default_stops() -> None:
    """In the runner's child, before it starts: SIGTERM and SIGHUP at their defaults (the
    runner keeps a signal ignored from its start ignored, as ``nohup`` asks)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_kills_the_loader_and_removes_the_folders(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """The runner, on an archive, with a loader that sleeps: both temporary folders are
    there while it runs; after the signal the loader is gone, so are the folders, and the
    exit status is 128 + the signal."""
    data = (CONF / BAD_MAGIC["file"]).read_bytes()
    manifest = _manifest([_reject("n_x", BAD_MAGIC["file"], data)])
    members = [("top/manifest.json", manifest), (f"top/{BAD_MAGIC['file']}", data)]
    path = _tar_xz(tmp_path / "suite.tar.xz", members)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    pid_file = tmp_path / "loader.pid"
    loader = tmp_path / "sleeper.py"
    loader.write_text(
        "import os, sys, time\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n",
        encoding="utf-8",
    )
    argv = [sys.executable, "-m", "conformance.run", "--suite", str(path), "--timeout", "60"]
    argv += ["--loader", f"sleeper={sys.executable} {loader} {{file}}"]
    runner = subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_stops,  # a test run under nohup would hand it SIGHUP ignored
    )
    pid = 0
    try:
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text(), 10), "no loader"
        pid = int(pid_file.read_text())
        during = _left(tmpdir)
        assert [name.split("-")[1] for name in during] == ["conformance", "suite"], during
        runner.send_signal(signum)
        _, err = runner.communicate(timeout=10)
        assert runner.returncode == 128 + signum, err
        assert err == f"interrupted ({signum.name})\n"
        assert _wait_for(lambda: not _alive(pid), 3), f"the loader {pid} outlived the runner"
        assert _left(tmpdir) == []
    finally:
        with contextlib.suppress(OSError):
            runner.kill()
        runner.wait()
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
