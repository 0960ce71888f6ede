"""The suite as an outside implementer gets it: the built wheel in a fresh virtual environment.

``pip wheel . --no-deps``, a new venv in a temporary folder outside the checkout, the wheel
installed there (its dependencies from the package index or pip's cache), the installed
``conformance`` package folder made read-only and ``XDG_CACHE_HOME`` pointed at a temporary
folder; then, from another temporary folder, with the installed console script:

* ``awq2-conformance --loader reference --loader c`` passes every vector, and the C binary
  lands in the cache, not in the package; the same with ``--suite`` on the archive of
  ``docs/assets/`` unpacked, and on the ``.tar.xz`` (the three runs side by side);
* the shell adapter of the conformance page, word for word (``test_site.write_page_adapter``),
  passes, run as ``./adapter.sh`` from its folder;
* a copy of the suite with one vector changed by one byte, one missing, or an extra file makes
  ``--suite`` exit 2 before any loader runs;
* the wheel holds neither ``tools/`` nor the vector makers nor ``adapters/c/build``.

Skipped only when no wheel can be built for a reason outside the project (no network and no
cached setuptools), and never in CI (``CI`` set).  The timings are printed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_site import write_page_adapter

from conformance.suite import vector_files

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = json.loads((ROOT / "conformance" / "manifest.json").read_text(encoding="utf-8"))
ARCHIVE = ROOT / "docs" / "assets" / f"awq2-conformance-{MANIFEST['suite_version']}.tar.xz"
COUNT = len(MANIFEST["vectors"])
#: pip's words when the build backend cannot be fetched: a machine without network or cache.
OFFLINE = ("No matching distribution found for setuptools", "Could not find a version that")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.name != "posix", reason="venv layout and sh loaders are POSIX"),
]


class Installed:
    """The fresh venv with the wheel installed, and a clean environment to run it in."""

    def __init__(self, top: Path, wheel: Path, timings: dict[str, float]) -> None:
        self.top, self.wheel, self.timings = top, wheel, timings
        self.bin = top / "venv" / "bin"
        self.cache = top / "cache"
        self.work = top / "work"
        self.work.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL"))}
        self.env = {
            **env,
            "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', '')}",
            "XDG_CACHE_HOME": str(self.cache),
        }
        self.package = Path(self.python("-c", "import conformance; print(conformance.__file__)"))
        self.package = self.package.parent

    def python(self, *argv: str) -> str:
        proc = subprocess.run(
            [str(self.bin / "python"), *argv], cwd=self.work, env=self.env, **_TEXT
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout.strip()

    def argv(self, *argv: str) -> list[str]:
        return [str(self.bin / "awq2-conformance"), *argv]

    def conformance(
        self, *argv: str, cwd: Path | None = None, path: Path | None = None
    ) -> subprocess.CompletedProcess:
        """``awq2-conformance ARGV`` in ``cwd`` (default: an empty folder), with ``path``
        first on PATH."""
        env = {**self.env, "PATH": f"{path}{os.pathsep}{self.env['PATH']}"} if path else self.env
        started = time.perf_counter()
        proc = subprocess.run(self.argv(*argv), cwd=cwd or self.work, env=env, **_TEXT)
        self.timings[" ".join(argv)[:70]] = time.perf_counter() - started
        return proc


_TEXT: dict = {"capture_output": True, "text": True, "timeout": 900}


def _timed(
    timings: dict[str, float], what: str, argv: list[str], **kw
) -> subprocess.CompletedProcess:
    started = time.perf_counter()
    proc = subprocess.run(argv, **_TEXT, **kw)
    timings[what] = time.perf_counter() - started
    return proc


def _build_wheel(out: Path, timings: dict[str, float]) -> Path:
    argv = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-w", str(out)]
    proc = _timed(timings, "pip wheel . --no-deps", argv, cwd=out)
    if proc.returncode != 0 and any(w in proc.stderr for w in OFFLINE) and not os.environ.get("CI"):
        pytest.skip(
            "cannot build a wheel: pip found no setuptools to build with (no network and no "
            f"cached copy); pip said: {proc.stderr.strip().splitlines()[-1]}"
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("awq_v2-*.whl")
    return wheel


def _read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode):
            path.chmod(stat.S_IMODE(mode) & ~0o222)


def _writable(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(stat.S_IMODE(path.stat().st_mode) | 0o200)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    top = tmp_path_factory.mktemp("install")
    assert ROOT not in top.parents
    timings: dict[str, float] = {}
    (top / "wheel").mkdir()
    wheel = _build_wheel(top / "wheel", timings)
    proc = _timed(timings, "python -m venv", [sys.executable, "-m", "venv", str(top / "venv")])
    assert proc.returncode == 0, proc.stderr
    pip = [str(top / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)]
    proc = _timed(timings, "pip install the wheel (and its dependencies)", pip, cwd=top)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = Installed(top, wheel, timings)
    assert ROOT not in env.package.parents, env.package
    _read_only(env.package)
    try:
        yield env
    finally:
        _writable(env.package)
        wheel_mb = wheel.stat().st_size / 1e6
        lines = [f"  {seconds:6.1f} s  {what}" for what, seconds in timings.items()]
        print(f"\ntest_install timings (wheel {wheel_mb:.2f} MB):\n" + "\n".join(lines))


def _passed_everything(proc: subprocess.CompletedProcess, *labels: str) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    for label in labels:
        assert f"  {label}: " in proc.stdout and f"; {COUNT} passed, 0 failed" in proc.stdout
    summary = proc.stdout[proc.stdout.index("\nsummary") :]
    assert summary.count(f"; {COUNT} passed, 0 failed") == len(labels), summary


def test_wheel_holds_the_suite_and_nothing_of_the_tools(installed: Installed) -> None:
    names = zipfile.ZipFile(installed.wheel).namelist()
    suite = {f"conformance/{f.path}" for v in MANIFEST["vectors"] for f in vector_files(v)}
    suite |= {f"conformance/{f['path']}" for f in MANIFEST["files"]}
    assert suite | {"conformance/manifest.json", "conformance/adapters/c/Makefile"} <= set(names)
    assert "conformance/adapters/reference.py" in names
    for name in names:
        assert not name.startswith("tools/"), name
        assert "/build/" not in name, name
        assert Path(name).stem not in ("generate", "mutations", "surgery", "fuzz_findings"), name
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(installed.wheel).read(entry_points).decode()
    for script in ("awq2-conformance = conformance.run:main", "awq2-convert = ", "awq2-dump = "):
        assert script in scripts


def test_installed_and_published_suites_pass_with_both_loaders(
    installed: Installed, tmp_path: Path
) -> None:
    """The installed suite, the archive unpacked, and the .tar.xz itself, each with the
    reference and the C loader: the three runs side by side, to keep the test short."""
    with tarfile.open(ARCHIVE, "r:xz") as tar:  # the committed archive: trusted here
        tar.extractall(tmp_path)
    (unpacked,) = tmp_path.iterdir()
    both = ["--quiet", "--loader", "reference", "--loader", "c"]
    runs = {
        "installed suite": both,
        "--suite the unpacked archive": [*both, "--suite", str(unpacked)],
        "--suite the .tar.xz": [*both, "--suite", str(ARCHIVE)],
    }
    installed.conformance("--only", "^y_sample$", "--loader", "c")  # build the C loader once
    started = time.perf_counter()
    procs = {
        what: subprocess.Popen(
            installed.argv(*argv),
            cwd=installed.work,
            env=installed.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for what, argv in runs.items()
    }
    for what, proc in procs.items():
        out, err = proc.communicate(timeout=900)
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        _passed_everything(done, "reference", "c")
        assert out.startswith(f"AWQ-v2 conformance suite {MANIFEST['suite_version']} "), what
    installed.timings["the three suites, reference and c, side by side"] = (
        time.perf_counter() - started
    )
    assert list(installed.cache.glob("awq-v2/c-loader/*/awq2c")), "no C binary in the cache"
    assert not (installed.package / "adapters" / "c" / "build").exists()


def test_shell_adapter_of_the_page_passes(installed: Installed, tmp_path: Path) -> None:
    write_page_adapter(tmp_path, python=str(installed.bin / "python"))
    loader = "mine=./adapter.sh {file}"
    proc = installed.conformance("--quiet", "--loader", loader, cwd=tmp_path, path=tmp_path)
    _passed_everything(proc, "mine")


def _suite_copy(tmp_path: Path) -> Path:
    with tarfile.open(ARCHIVE, "r:xz") as tar:
        tar.extractall(tmp_path / "copy")
    (suite,) = (tmp_path / "copy").iterdir()
    return suite


def _flip_a_byte(suite: Path) -> None:
    path = suite / "vectors" / "y_sample.awq2"
    data = bytearray(path.read_bytes())
    data[0] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (_flip_a_byte, "vectors/y_sample.awq2: sha256 expected"),
        (lambda s: (s / "vectors" / "n_bad_magic.awq2").unlink(), "n_bad_magic.awq2: missing"),
        (lambda s: (s / "vectors" / "extra.awq2").write_bytes(b""), "extra.awq2: not listed"),
    ],
    ids=["one-byte", "missing", "extra"],
)
def test_a_damaged_suite_is_refused_before_anything_runs(
    installed: Installed, tmp_path: Path, damage, named: str
) -> None:
    suite = _suite_copy(tmp_path)
    damage(suite)
    marker = tmp_path / "loader-ran"
    loader = f"marker=sh -c 'touch {marker}; exit 1' {{file}}"
    proc = installed.conformance("--suite", str(suite), "--loader", loader, "--loader", "c")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert named in proc.stderr and "nothing was run" in proc.stderr
    assert not marker.exists()
    shutil.rmtree(tmp_path / "copy")
