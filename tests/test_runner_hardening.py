"""The runner survives hostile loaders (issue 12, finding 8).

Each test runs a small fake loader, written into ``tmp_path``, over a private copy of a few
vectors (a trimmed manifest), so that a loader misbehaving before a fix cannot damage the
committed vectors:

* a loader whose child outlives it: the whole process group is killed, on a timeout and after a
  normal exit;
* a loader that answers and exits while a background child still holds stdout: judged by its
  own exit, at once, not reported as a timeout;
* a loader that floods stdout: read up to a bound, then a crash that names the bound;
* a loader that changes the vector it is given: it fails, naming the file, and the loaders
  after it still see the committed bytes;
* a loader (and a manifest) whose text holds terminal controls: printed escaped, and the JUnit
  XML stays well formed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance import run, suite

CONF = Path(__file__).resolve().parent.parent / "conformance"
MANIFEST = json.loads((CONF / "manifest.json").read_text(encoding="utf-8"))

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")


def _suite(tmp_path: Path, ids: list[str], rename: dict[str, str] | None = None) -> Path:
    """A manifest with only the vectors ``ids`` (optionally renamed), beside copies of them
    and of the schemas."""
    root = tmp_path / "suite"
    (root / "vectors").mkdir(parents=True)
    shutil.copytree(CONF / "schema", root / "schema")
    vectors = []
    for v in MANIFEST["vectors"]:
        if v["id"] in ids:
            if "folder" in v:
                shutil.copytree(CONF / v["folder"], root / v["folder"])
            else:
                shutil.copyfile(CONF / v["file"], root / v["file"])
            vectors.append({**v, "id": (rename or {}).get(v["id"], v["id"])})
    manifest = root / "manifest.json"
    manifest.write_text(json.dumps({**MANIFEST, "vectors": vectors}), encoding="utf-8")
    return manifest


def _loader(tmp_path: Path, name: str, body: str) -> str:
    """A loader script ``name`` (sh), run as ``name {file}``."""
    script = tmp_path / name
    script.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    script.chmod(0o755)
    return f"{name}={script} {{file}}"


def _runner(manifest: Path, tmp_path: Path, *loaders: str, timeout: float = 30) -> tuple[int, list]:
    report = tmp_path / "report.json"
    argv = ["--suite", str(manifest.parent), "--report-json", str(report)]
    argv += ["--timeout", str(timeout)]
    for loader in loaders:
        argv += ["--loader", loader]
    status = run.main([*argv, "--junit-xml", str(tmp_path / "junit.xml")])
    return status, json.loads(report.read_text(encoding="utf-8"))["outcomes"]


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's parent may reap it late)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] != "Z"
    return True


def _gone_soon(pid: int) -> bool:
    deadline = time.monotonic() + 3
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.fixture
def pids(tmp_path: Path) -> Iterator[Path]:
    """A file the loaders append their children's pids to; any still alive are killed after."""
    path = tmp_path / "pids"
    yield path
    for line in path.read_text().split() if path.exists() else []:
        with contextlib.suppress(OSError):
            os.kill(int(line), signal.SIGKILL)


def _pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()]


@pytest.fixture(params=["pidfd", "polled"])
def exit_watch(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner waits for the loader's exit on a pidfd (Linux) or, elsewhere, polls for it:
    both ways are tested."""
    if request.param == "polled":
        monkeypatch.setattr(run, "_pidfd", lambda pid: None)


def test_a_timeout_kills_the_loaders_children(tmp_path: Path, pids: Path, exit_watch: None) -> None:
    """A loader that starts a long-sleeping child and then sleeps past the timeout: the
    child, not only the loader, is gone after the run."""
    manifest = _suite(tmp_path, ["n_bad_magic"])
    loader = _loader(tmp_path, "hang", f"sleep 60 &\necho $! >> {pids}\nsleep 60\n")
    started = time.monotonic()
    status, report = _runner(manifest, tmp_path, loader, timeout=1)
    assert time.monotonic() - started < 20
    assert status == 1 and report[0]["kind"] == "crash" and "timed out" in report[0]["detail"]
    (child,) = _pids(pids)
    assert _gone_soon(child), f"the loader's child {child} outlived the timeout"


def test_a_background_child_holding_stdout_does_not_make_a_timeout(
    tmp_path: Path, pids: Path, exit_watch: None
) -> None:
    """A loader that prints its answer and exits 1 at once, leaving ``sleep 30 &`` with its
    stdout: judged by its answer, quickly, and the child is killed after the loader exits."""
    manifest = _suite(tmp_path, ["n_bad_magic"])
    loader = _loader(tmp_path, "bg", f"echo BAD_MAGIC\nsleep 30 &\necho $! >> {pids}\nexit 1\n")
    started = time.monotonic()
    status, report = _runner(manifest, tmp_path, loader, timeout=10)
    assert time.monotonic() - started < 5, report
    assert status == 0, report
    assert report[0]["kind"] == "reject" and report[0]["code"] == "BAD_MAGIC"
    (child,) = _pids(pids)
    assert _gone_soon(child), f"the loader's background child {child} was left running"


def test_a_flood_on_stdout_is_read_up_to_a_bound(tmp_path: Path) -> None:
    """A loader that prints without end: a crash naming the bound, long before the timeout,
    never unbounded memory."""
    manifest = _suite(tmp_path, ["y_sample"])
    flood = (
        f'exec {sys.executable} -c \'import sys\nb = b"x" * 65536\n'
        "while True: sys.stdout.buffer.write(b)'\n"
    )
    started = time.monotonic()
    status, report = _runner(manifest, tmp_path, _loader(tmp_path, "flood", flood), timeout=20)
    assert time.monotonic() - started < 15, report
    assert status == 1 and report[0]["kind"] == "crash"
    assert f"more than {run.STDOUT_LIMIT >> 20} MiB on stdout" in report[0]["detail"], report


def test_a_loader_that_changes_its_vector_fails_and_the_next_loader_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A loader that truncates the file it is given: reported as that loader's failure,
    naming the file; the reference after it in the same run still passes, and the committed
    vectors are untouched, so the next run does not refuse with "vectors differ"."""
    manifest = _suite(tmp_path, ["n_bad_magic", "y_sample"])
    vandal = _loader(tmp_path, "vandal", 'chmod u+w "$1"; : > "$1"\necho BAD_MAGIC\nexit 1\n')
    reference = f"reference={run.REFERENCE_LOADER}"
    status, report = _runner(manifest, tmp_path, vandal, reference)
    assert status == 1
    by = {(o["loader"], o["vector"]): o for o in report}
    assert all(by["reference", v]["passed"] for v in ("n_bad_magic", "y_sample")), report
    for vector in ("n_bad_magic", "y_sample"):
        changed = by["vandal", vector]
        assert not changed["passed"] and f"{vector}.awq2" in changed["detail"], changed
        assert "changed" in changed["detail"]
    out = capsys.readouterr().out
    assert "[vandal] n_bad_magic" in out and "n_bad_magic.awq2" in out
    assert suite.problems(suite.load(manifest.parent)) == []
    status, _ = _runner(manifest, tmp_path, reference)
    assert status == 0


def test_text_from_loaders_and_files_is_printed_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ESC sequences, BEL, a bidi override and a line separator from a loader's stdout and
    stderr and from a vector's name reach the terminal escaped; the JUnit XML parses."""
    nasty = "\x1b]0;pwned\x07\x1b[2J\u202e\u2028\x01"
    manifest = _suite(tmp_path, ["y_sample", "n_bad_magic"], {"n_bad_magic": "n_bad\x1b[31m"})
    (tmp_path / "nasty").write_text(nasty, encoding="utf-8")
    body = (
        f'printf \'{{"error": {{"code": "\\\\u001b[2JBAD_MAGIC"}}}}\'\n'
        f"cat {tmp_path / 'nasty'} >&2\nexit 1\n"
    )
    status, report = _runner(manifest, tmp_path, _loader(tmp_path, "esc", body))
    assert status == 1
    out = capsys.readouterr().out
    for ch in "\x1b\x07\u202e\u2028\x01":
        assert ch not in out, (ch, out)
    assert "\\x1b]0;pwned\\x07" in out and "\\u202e" in out and "n_bad\\x1b[31m" in out
    # the JSON report keeps the raw text, which json.dumps writes as \u escapes
    assert {o["code"] for o in report} == {"\x1b[2JBAD_MAGIC"}
    assert "\x1b" not in (tmp_path / "report.json").read_text(encoding="utf-8")
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    assert len(junit.findall(".//failure")) == 2


def test_the_stdout_bound_is_far_above_every_accept_document() -> None:
    """No vector's expected document comes near :data:`run.STDOUT_LIMIT` (the bound is for
    floods, not for a loader that prints what it read)."""
    largest = max(len(json.dumps(v.get("content"))) for v in MANIFEST["vectors"])
    assert largest * 8 < run.STDOUT_LIMIT  # room for a loader that indents its output


def test_a_loader_that_changes_a_set_folder_fails(tmp_path: Path) -> None:
    """A set vector is a private, read-only copy of its folder: a loader that adds a file to
    it (or changes one) fails that vector, naming it; the reference passes."""
    manifest = _suite(tmp_path, ["y_set_split", "n_set_missing_file"])
    vandal = _loader(
        tmp_path, "vandal", 'chmod u+w "$1"; echo x > "$1/model-00009-of-00009.awq2"\nexit 1\n'
    )
    reference = f"reference={run.REFERENCE_LOADER}"
    status, report = _runner(manifest, tmp_path, vandal, reference)
    assert status == 1
    by = {(o["loader"], o["vector"]): o for o in report}
    assert all(by["reference", v]["passed"] for v in ("y_set_split", "n_set_missing_file"))
    for vector in ("y_set_split", "n_set_missing_file"):
        added = by["vandal", vector]
        assert not added["passed"], added
        assert (
            f"added 'model-00009-of-00009.awq2' to its copy of vectors/{vector}" in added["detail"]
        ), added
    assert suite.problems(suite.load(manifest.parent)) == []
