"""The independent C loader (conformance/adapters/c) builds warning-free and passes every vector.

It was written from the spec text alone; passing the suite is the evidence that the spec is
implementable without the reference.  Skipped only when no C compiler is on PATH.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import run

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = json.loads((ROOT / "conformance" / "manifest.json").read_text(encoding="utf-8"))

CC = shlex.split(os.environ.get("CC") or "cc")
pytestmark = pytest.mark.skipif(shutil.which(CC[0]) is None, reason=f"no C compiler ({CC[0]})")


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The loader, compiled with -Werror so that a new warning fails the suite."""
    out = tmp_path_factory.mktemp("c-loader") / "awq2c"
    return run.build_c_loader(out, extra_flags=("-Werror",))


def test_every_vector_passes(binary: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    loader = f"c={shlex.quote(str(binary))} {{file}}"
    status = run.main(["--quiet", "--loader", loader, "--report-json", str(report)])
    outcomes = json.loads(report.read_text(encoding="utf-8"))["outcomes"]
    failed = [f"{o['vector']}: {o['detail']}" for o in outcomes if not o["passed"]]
    assert not failed
    assert status == 0
    assert {o["vector"] for o in outcomes} == {v["id"] for v in MANIFEST["vectors"]}


def test_reject_prints_the_code_first(binary: Path) -> None:
    vector = next(v for v in MANIFEST["vectors"] if v["id"] == "n_bad_magic")
    proc = subprocess.run(
        [str(binary), str(ROOT / "conformance" / vector["file"])], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert proc.stdout.split()[0] == "BAD_MAGIC"


def test_usage_is_exit_2(binary: Path) -> None:
    assert subprocess.run([str(binary)], capture_output=True).returncode == 2


def test_builtin_name_builds_and_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """``--loader c`` compiles into conformance/adapters/c/build when needed."""
    status = run.main(["--quiet", "--loader", "c", "--only", "^(y_sample|n_bad_magic)$"])
    assert status == 0, capsys.readouterr()
    assert run.C_BINARY.exists()


def test_build_failure_is_status_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = f"{shlex.quote(sys.executable)} -c 'import sys; sys.exit(\"no compiler here\")'"
    monkeypatch.setenv("CC", failing)
    monkeypatch.setattr(run, "C_BINARY", tmp_path / "awq2c")
    assert run.main(["--loader", "c"]) == 2
    err = capsys.readouterr().err
    assert "did not build" in err and "no compiler here" in err


# ------------------------------------------------------------ issue 12, findings 6 and 9


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The loader under AddressSanitizer and UndefinedBehaviorSanitizer, as `make sanitize`
    and CI build it; a report aborts the run."""
    out = tmp_path_factory.mktemp("c-loader-asan") / "awq2c-asan"
    flags = ("-Werror", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all")
    return run.build_c_loader(out, extra_flags=flags)


def test_duplicate_empty_keys_are_rejected_under_the_sanitizers(
    sanitized: Path, binary: Path, tmp_path: Path
) -> None:
    """Metadata {"":1,"":2}: both builds reject it with the reference's code, and the
    sanitizers report nothing (the duplicate-key check never passes a null pointer to memcmp,
    even for length 0)."""
    from tools.vectors import generate
    from tools.vectors.mutations import MUTATION_BY_ID

    mutation = MUTATION_BY_ID["metadata_duplicate_empty_key"]
    path = tmp_path / "dup.awq2"
    path.write_bytes(generate.mutated(mutation, generate.base_bytes(mutation.base)))
    env = {**os.environ, "ASAN_OPTIONS": "exitcode=86", "UBSAN_OPTIONS": "exitcode=86"}
    for loader in (sanitized, binary):
        proc = subprocess.run([str(loader), str(path)], capture_output=True, text=True, env=env)
        assert proc.returncode == 1, (loader.name, proc)
        assert proc.stdout.split()[0] == mutation.code == "BAD_METADATA", proc
        assert "runtime error" not in proc.stderr and "Sanitizer" not in proc.stderr, proc


def _not_regular(tmp_path: Path, kind: str) -> str:
    if kind == "a FIFO":
        os.mkfifo(tmp_path / "fifo.awq2")
        return str(tmp_path / "fifo.awq2")
    return {"a character device": "/dev/zero", "a folder": str(tmp_path)}[kind]


@pytest.mark.parametrize("kind", ["a character device", "a folder", "a FIFO"])
@pytest.mark.parametrize("adapter", ["c", "reference"])
def test_devices_folders_and_fifos_are_refused_at_once(
    adapter: str, kind: str, binary: Path, tmp_path: Path
) -> None:
    """Findings 6 and 9: anything that is not a regular file is refused as an unreadable
    input, exit status 3, with the reason in one line on stderr (never "Success", never a
    traceback), by the C loader and the reference adapter alike; a FIFO without a writer is
    refused at once, not waited on (the timeout turns a hang into a failure)."""
    path = _not_regular(tmp_path, kind)
    if adapter == "c":
        command, prefix = [str(binary)], "awq2c"
    else:
        command, prefix = [sys.executable, "-m", "conformance.adapters.reference"], "error"
    proc = subprocess.run([*command, path], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert proc.returncode == 3, proc
    assert proc.stdout == "", proc
    reason = f"{prefix}: cannot read {path}: not a regular file ({kind})"
    assert proc.stderr.strip().splitlines() == [reason], proc
