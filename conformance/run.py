"""``awq2-conformance [--loader "CMD {file}"]...``: check loaders against the vectors.

The adapter protocol (language-neutral; published in the docs with its JSON Schemas):

* the runner invokes the loader command once per vector, ``{file}`` replaced by the
  vector's path, with a timeout;
* **accept**: exit status 0 and, on stdout, one JSON document describing what the
  loader read (``schema/adapter-output.schema.json``), compared with the manifest's content
  number by number as written (:mod:`conformance.exactjson`): metadata numbers exactly as the
  file writes them, integers in plain decimal [ADP-1, ADP-2]; tensors and layers in any order
  [ADP-3];
* **reject**: exit status 1; stdout MAY hold ``{"error": {"code": "BAD_MAGIC", ...}}``
  (``schema/adapter-error.schema.json``, ``offset`` an integer [ADP-4]) or a line starting
  with the error code;
* anything else (another status, a signal, a timeout, status 0 without a valid
  document) is a **crash**.

Verdicts: a ``y_`` vector passes when accepted with the expected content; an ``n_``
vector when rejected with the expected code (a reject without a code passes with a
note); an ``i_`` vector when accepted with the expected content or rejected with one
of its listed codes.  Without ``--loader`` the reference implementation is checked.
The runner judges by the manifest and the vectors alone: from the reference implementation it
imports only ``reference.ground.text``, the project's one escaping function, through which
everything it prints that comes from a loader or a file passes (loader output, error codes and
details, vector names), and, through :mod:`conformance.exactjson`,
``reference.format.metadata.lexical_depth``, which measures how deeply a manifest or a loader's
document nests before it is parsed.

Each loader invocation runs in a session (process group) of its own, with stdin closed, on a
private read-only copy of the vector in a temporary folder of its loader.  The verdict comes
from the loader's own exit: its stdout is read up to :data:`STDOUT_LIMIT` (more is a crash),
then for at most :data:`EXIT_GRACE` seconds after it exits (a background child may hold the
pipe), and the whole group is killed on a timeout and after every exit, so that nothing a
loader started outlives it.  A loader that changes the copy it was given fails on that vector,
and the loaders after it still read the committed bytes.

Two loaders are built in: ``--loader reference`` (the Python reference, run as a
subprocess) and ``--loader c`` (the independent C loader of ``adapters/c``, compiled with
``${CC:-cc}`` into ``adapters/c/build/`` when the binary is missing or older than a source, or,
when the package folder is read-only, into ``${XDG_CACHE_HOME:-~/.cache}/awq-v2/c-loader/``).
Loaders run in the runner's working folder, so ``--loader "./my_loader {file}"`` names a file
there.

The suite (``--suite``: the installed one by default, a folder, or the published ``.tar.xz``,
unpacked safely by :mod:`conformance.archive`) is checked before anything runs: every file
the manifest lists must be there with its size and sha256, and ``vectors/`` must hold nothing
else (:mod:`conformance.suite`).  The header names the suite's version and the spec version,
and so does ``--report-json``.

Exit status: 0 when every verdict passes, 1 when any fails, 2 usage, suite (a tampered or
incomplete suite, a manifest nested too deeply, an unsafe archive or one that cannot be unpacked
here: a name too long, a file where a folder was, no space left in ``$TMPDIR``), build error, or
no room for the temporary folders, 130 interrupted (Ctrl-C: the running loader's process group
is killed and the temporary folders removed, then one line, ``interrupted``, on stderr), 143 and
129 the same for SIGTERM and SIGHUP (128 + the signal; the line says which, ``interrupted
(SIGTERM)``).  ``awq2-conformance`` is the installed console script;
``python -m conformance.run`` is the same command.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any
from xml.sax.saxutils import escape as xml_escape
from xml.sax.saxutils import quoteattr

from conformance import archive, exactjson
from conformance import suite as suite_module
from conformance.archive import ArchiveError
from conformance.suite import Suite, SuiteError
from reference.ground.text import escape

HERE = Path(__file__).resolve().parent
REFERENCE_LOADER = f"{shlex.quote(sys.executable)} -m conformance.adapters.reference {{file}}"
C_ADAPTER = HERE / "adapters" / "c"
C_BINARY = C_ADAPTER / "build" / "awq2c"
C_FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Wpedantic")
BUILTIN_LOADERS = ("reference", "c")
CLASSES = (("accept", "y_ must accept"), ("reject", "n_ must reject"), ("either", "i_ either"))
_CODE = re.compile(r"^[A-Z][A-Z0-9_]+$")
#: At most this much of a loader's stdout is read; more is a crash.  The largest accept
#: document of the suite, y_many_tensors', is under 0.5 MiB (``tests/test_runner_hardening.py``
#: keeps the margin).
STDOUT_LIMIT = 8 << 20
#: The end of a loader's stderr that is kept: its last line is the detail of a reject or crash.
STDERR_TAIL = 64 << 10
#: Seconds for which output still in the pipes is read after the loader exits, before its
#: process group is killed (a background child may hold the pipes open).
EXIT_GRACE = 0.2
#: Longest detail taken from a loader's stderr, in characters.
DETAIL_LENGTH = 300
_POSIX = os.name == "posix"


@dataclass
class Outcome:
    """What one loader did with one vector, and the verdict."""

    vector: str
    loader: str
    kind: str  # "accept", "reject", "crash"
    passed: bool
    detail: str = ""
    code: str | None = None
    seconds: float = 0.0
    requirements: list[str] = field(default_factory=list)


@dataclass
class Loader:
    label: str
    argv: list[str]

    @classmethod
    def parse(cls, spec: str) -> Loader:
        """``"label=CMD {file}"`` or ``"CMD {file}"``."""
        label, sep, command = spec.partition("=")
        if not sep or " " in label or "{file}" in label:
            label, command = "", spec
        argv = shlex.split(command)
        if "{file}" not in command:
            argv.append("{file}")
        return cls(label or Path(argv[0]).name + (f" {argv[1]}" if len(argv) > 2 else ""), argv)


class BuildError(RuntimeError):
    """The C loader did not compile; the message holds the command and the compiler's output."""


def c_binary() -> Path:
    """Where ``--loader c`` keeps its binary: :data:`C_BINARY` (``adapters/c/build/``) when
    that folder, or ``adapters/c`` before it exists, is writable; otherwise (an installed,
    read-only package) ``${XDG_CACHE_HOME:-~/.cache}/awq-v2/c-loader/<digest>/awq2c``, the
    digest of the sources, the compiler command and the flags, so that a cached binary is never
    stale."""
    build = C_BINARY.parent
    if _writable(build if build.exists() else build.parent):
        return C_BINARY
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "awq-v2" / "c-loader" / _build_digest() / C_BINARY.name


def _writable(folder: Path) -> bool:
    """The user may write into ``folder``, and its mode lets someone write there: root passes
    os.access everywhere, yet a folder made read-only on purpose (``chmod a-w``) is taken as
    such."""
    try:
        mode = folder.stat().st_mode
    except OSError:
        return False
    return os.access(folder, os.W_OK) and bool(stat.S_IMODE(mode) & 0o222)


def _c_sources() -> list[Path]:
    return sorted([*C_ADAPTER.glob("*.c"), *C_ADAPTER.glob("*.h")])


def _compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or "cc")


def _build_digest() -> str:
    digest = hashlib.sha256()
    for path in _c_sources():
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    digest.update(json.dumps([_compiler(), C_FLAGS]).encode())
    return digest.hexdigest()[:16]


def build_c_loader(out: Path | None = None, extra_flags: Sequence[str] = ()) -> Path:
    """Compile ``conformance/adapters/c`` with ``${CC:-cc}`` into ``out`` (default
    :func:`c_binary`) when it is missing or older than a source, or always when
    ``extra_flags`` are given; return it.  Writes a temporary file and renames it, so
    concurrent runners never execute a half-written binary."""
    out = out or c_binary()
    sources = [p for p in _c_sources() if p.suffix == ".c"]
    newest = max(p.stat().st_mtime for p in _c_sources())
    if out.exists() and out.stat().st_mtime >= newest and not extra_flags:
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot make the folder {out.parent}: {exc.strerror}") from exc
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    argv = [*_compiler(), *C_FLAGS, *extra_flags, "-o", str(tmp), *map(str, sources)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True)
    except OSError as exc:
        raise BuildError(f"{shlex.join(argv)}: could not start the compiler: {exc}") from exc
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"{shlex.join(argv)}\n{proc.stdout}{proc.stderr}".rstrip())
    os.replace(tmp, out)
    return out


def builtin_loader(name: str) -> Loader:
    """``reference`` (the Python reference, run as a subprocess) or ``c`` (the C loader,
    built on demand)."""
    if name == "c":
        return Loader("c", [str(build_c_loader()), "{file}"])
    return Loader("reference", shlex.split(REFERENCE_LOADER))


def run_loader(loader: Loader, file: Path, timeout: float) -> tuple[str, Any, str, float]:
    """Run one loader on one file: (kind, parsed document or code, raw detail, seconds)."""
    argv = [a.replace("{file}", str(file)) for a in loader.argv]
    started = time.perf_counter()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=_POSIX,  # its own process group, killed as a whole
        )
    except OSError as exc:
        return "crash", None, f"could not start: {exc}", 0.0
    try:
        out, err, status = _collect(proc, started + timeout)
    finally:
        _kill_group(proc)
        for pipe in (proc.stdout, proc.stderr):
            if pipe:
                pipe.close()
        proc.wait()
    seconds = time.perf_counter() - started
    tail = _last_line(err)
    if status == "timeout":
        return "crash", None, f"timed out after {timeout:g} s", timeout
    if status == "flood":
        return "crash", None, f"printed more than {STDOUT_LIMIT >> 20} MiB on stdout", seconds
    returncode = proc.returncode
    if returncode == 0:
        try:  # numbers kept as written, compared exactly [ADP-1]
            doc = exactjson.loads(out.decode("utf-8", "replace"))
        except ValueError as exc:
            return "crash", None, f"exit 0 without a JSON document on stdout: {exc}", seconds
        if not isinstance(doc, dict) or not isinstance(doc.get("tensors"), list):
            return "crash", None, "exit 0 with a document that is not adapter output", seconds
        return "accept", doc, "", seconds
    if returncode == 1:
        return "reject", _reported_code(out.decode("utf-8", "replace")), tail, seconds
    return "crash", None, f"{_exit_status(returncode)}: {tail}", seconds


def _collect(proc: subprocess.Popen[bytes], deadline: float) -> tuple[bytes, bytes, str]:
    """Read the loader's stdout (bounded) and stderr (its tail) until it has exited and its
    pipes are closed, or :data:`EXIT_GRACE` after its exit, or the deadline: (stdout, stderr,
    status), status ``"exit"``, ``"timeout"`` or ``"flood"``.  The loader is not reaped here,
    so that its group id stays reserved until :func:`_kill_group` has run."""
    out, err = bytearray(), bytearray()
    pipes = {proc.stdout, proc.stderr}
    pidfd = _pidfd(proc.pid)
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        for pipe in pipes:
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        try:
            while True:
                now = time.perf_counter()
                if exited_at is None and pidfd is None and _exited(proc):
                    exited_at = now
                if exited_at is not None:
                    if not pipes or now >= exited_at + EXIT_GRACE:
                        return bytes(out), bytes(err), "exit"
                    wait = exited_at + EXIT_GRACE - now
                elif now >= deadline:
                    return bytes(out), bytes(err), "timeout"
                else:  # without a pidfd the exit is polled for
                    wait = deadline - now if pidfd is not None else min(deadline - now, 0.01)
                for key, _ in sel.select(wait):
                    if key.fd == pidfd:
                        exited_at = time.perf_counter()
                        sel.unregister(pidfd)
                        continue
                    try:
                        chunk = os.read(key.fd, 1 << 16)
                    except BlockingIOError:  # readiness without data: wait again
                        continue
                    if not chunk:
                        sel.unregister(key.fileobj)
                        pipes.discard(key.fileobj)  # type: ignore[arg-type]
                    elif key.fileobj is proc.stdout:
                        out += chunk
                        if len(out) > STDOUT_LIMIT:
                            return bytes(out), bytes(err), "flood"
                    else:
                        err += chunk
                        del err[:-STDERR_TAIL]
        finally:
            if pidfd is not None:
                os.close(pidfd)


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when the process exits (Linux), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """The loader has exited; not reaped where the platform can tell without reaping."""
    if not hasattr(os, "waitid"):
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the loader's process group: the loader and whatever it left behind."""
    if not _POSIX:
        with suppress(OSError):
            proc.kill()
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _last_line(err: bytes) -> str:
    lines = err.decode("utf-8", "replace").strip().split("\n")
    return lines[-1].strip()[:DETAIL_LENGTH]


def _exit_status(returncode: int) -> str:
    if returncode < 0:
        with suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def _reported_code(out: str) -> str | None:
    text = out.strip()
    if not text:
        return None
    try:
        exactjson.check_depth(text)  # before parsing: deep nesting exhausts the recursion
        doc = json.loads(text)
        code = doc.get("error", {}).get("code") if isinstance(doc, dict) else None
        return code if isinstance(code, str) else None
    except ValueError:
        first = text.split()[0]
        return first if _CODE.match(first) else None


def _key(item: dict[str, Any], name: str) -> tuple[Any, Any]:
    """How a tensor or layer is matched: by name (prefix) and, in a rank set, rank [ADP-3]."""
    return item.get("rank"), item.get(name)


def _show_key(key: tuple[Any, Any]) -> str:
    rank, name = key
    return repr(name) if rank is None else f"{name!r} of rank {rank!r}"


def compare(expected: dict[str, Any], got: dict[str, Any]) -> str:
    """The first difference between the expected content and a loader's document, or ''."""
    if expected.get("set") != got.get("set"):  # a file set's kind and TP degree, or no set
        return f"set expected {expected.get('set')!r}, found {got.get('set')!r}"
    want_t = {_key(t, "name"): t for t in expected["tensors"]}
    got_t = {_key(t, "name"): t for t in got.get("tensors", []) if isinstance(t, dict)}
    if set(want_t) != set(got_t):
        missing = [_show_key(k) for k in sorted(set(want_t) - set(got_t), key=str)[:3]]
        extra = [_show_key(k) for k in sorted(set(got_t) - set(want_t), key=str)[:3]]
        return f"tensor names differ: missing {missing}, unexpected {extra}"
    for key in sorted(want_t, key=str):
        for field_name in ("dtype", "shape", "layout", "sha256"):
            want, found = want_t[key][field_name], got_t[key].get(field_name)
            if found != want:
                return f"tensor {_show_key(key)}: {field_name} expected {want!r}, found {found!r}"
    want_l = {_key(layer, "prefix"): layer for layer in expected.get("layers", [])}
    got_l = {
        _key(layer, "prefix"): layer
        for layer in got.get("layers", []) or []
        if isinstance(layer, dict)
    }
    if set(want_l) != set(got_l):
        want_names = [_show_key(k) for k in sorted(want_l, key=str)[:3]]
        got_names = [_show_key(k) for k in sorted(got_l, key=str)[:3]]
        return f"quantised layers differ: expected {want_names}, found {got_names}"
    for key in sorted(want_l, key=str):
        for field_name, value in want_l[key].items():
            if got_l[key].get(field_name) != value:
                found_value = got_l[key].get(field_name)
                return (
                    f"layer {_show_key(key)}: {field_name} expected {value!r}, "
                    f"found {found_value!r}"
                )
    found = exactjson.difference(expected.get("metadata", {}), got.get("metadata", {}), "metadata")
    return f"metadata differs: {found}" if found else ""  # numbers by lexeme [ADP-1]


def judge(vector: dict[str, Any], kind: str, result: Any, detail: str) -> tuple[bool, str]:
    expect = vector["expect"]
    if kind == "crash":
        return False, f"crash: {detail}"
    if kind == "accept":
        if expect == "reject":
            return False, f"accepted; expected reject with {vector['error_code']}"
        diff = compare(vector["content"], result)
        return (not diff), diff
    # reject
    if expect == "accept":
        return False, f"rejected with {result or 'no code'}; expected accept" + (
            f" ({detail})" if detail else ""
        )
    allowed = [vector["error_code"]] if expect == "reject" else vector.get("either_codes", [])
    if result is None:
        return expect == "reject", "rejected without an error code (code not checked)"
    if result not in allowed:
        return False, f"rejected with {result}; expected {' or '.join(allowed)}"
    return True, ""


def run(
    manifest: dict[str, Any],
    root: Path,
    loaders: list[Loader],
    timeout: float,
    only: str | None = None,
) -> list[Outcome]:
    outcomes = []
    with private_folders(len(loaders)) as folders:
        for v in manifest["vectors"]:
            if only and not re.search(only, v["id"]):
                continue
            listed = suite_module.vector_files(v)
            given = Path(suite_module.vector_path(v)).name
            files = {Path(item.path).name: (root / item.path).read_bytes() for item in listed}
            for loader, folder in zip(loaders, folders, strict=True):
                try:
                    if "folder" in v:
                        copy = _private_folder(files, given, folder)
                    else:
                        copy = _private_copy(files[given], given, folder)
                except OSError as exc:
                    raise ScratchError(
                        f"cannot make the loader's copy of {suite_module.vector_path(v)} in "
                        f"{folder} ({exc.strerror or exc})"
                    ) from exc
                kind, result, detail, seconds = run_loader(loader, copy, timeout)
                passed, why = judge(v, kind, result, detail)
                damage = (
                    _folder_damage(copy, listed) if "folder" in v else _damage(copy, v["sha256"])
                )
                _clear(folder)
                if damage:
                    passed = False
                    why = f"the loader {damage} its copy of {suite_module.vector_path(v)}" + (
                        f"; {why}" if why else ""
                    )
                code = result if kind == "reject" else None
                outcomes.append(
                    Outcome(
                        v["id"],
                        loader.label,
                        kind,
                        passed,
                        why,
                        code,
                        seconds,
                        list(v["requirements"]),
                    )
                )
    return outcomes


# ------------------------------------------------------------------- private copies of vectors


@contextmanager
def private_folders(count: int) -> Iterator[list[Path]]:
    """``count`` empty temporary folders (one per loader), removed afterwards with whatever a
    loader left in them."""
    top = _temporary_folder("awq2-conformance-")
    try:
        folders = [top / str(i) for i in range(count)]
        for folder in folders:
            folder.mkdir()
        yield folders
    finally:
        _make_writable(top)
        shutil.rmtree(top, ignore_errors=True)


class ScratchError(RuntimeError):
    """The temporary folders cannot be made or written (no space left in ``$TMPDIR``...)."""


def _temporary_folder(prefix: str) -> Path:
    """A new folder in ``$TMPDIR`` (or the system's), or :class:`ScratchError`."""
    try:
        return Path(tempfile.mkdtemp(prefix=prefix))
    except OSError as exc:
        raise ScratchError(
            f"cannot make a temporary folder in {tempfile.gettempdir()} ({exc.strerror or exc}); "
            "set TMPDIR to a folder with room"
        ) from exc


def _private_copy(data: bytes, name: str, folder: Path) -> Path:
    """``data`` as ``folder/name``: the file mode 0444 in a folder of mode 0555, so that a
    loader can change it only by changing the modes first."""
    folder.chmod(0o700)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    folder.chmod(0o555)
    return path


def _private_folder(files: dict[str, bytes], name: str, folder: Path) -> Path:
    """A file set's folder as ``folder/name``: each file of mode 0444, the set's folder and
    ``folder`` of mode 0555."""
    folder.chmod(0o700)
    path = folder / name
    path.mkdir()
    for file_name, data in files.items():
        _private_copy(data, file_name, path)
    folder.chmod(0o555)
    return path


def _folder_damage(path: Path, listed: list[suite_module.Listed]) -> str:
    """What the loader did to its copy of a set's folder, or ``""``."""
    want = {Path(item.path).name: item.sha256 for item in listed}
    try:
        found = sorted(os.listdir(path)) if not path.is_symlink() else None
    except OSError:
        found = None
    if found is None:
        return "replaced or removed"
    extra = [name for name in found if name not in want]
    if extra:
        return f"added {extra[0]!r} to"
    for name, sha256 in want.items():
        damage = _damage(path / name, sha256)
        if damage:
            return f"{damage} {name!r} in"
    return ""


def _damage(path: Path, sha256: str) -> str:
    """What the loader did to its copy (``"changed"``, ``"removed"``...), or ``""`` when the
    copy still holds the vector's bytes."""
    try:
        f = suite_module.open_file(path)
    except FileNotFoundError:
        return "removed"
    except suite_module.NotRegularFile:
        return "replaced by something that is not a regular file"
    except OSError as exc:
        return f"replaced or made unreadable ({exc.strerror})"
    with f:
        return "" if suite_module.sha256_of(f) == sha256 else "changed"


def _clear(folder: Path) -> None:
    """Empty a loader's folder for its next vector."""
    _make_writable(folder)
    for path in folder.iterdir():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()


def _make_writable(top: Path) -> None:
    for folder, _, _ in os.walk(top):
        with suppress(OSError):
            os.chmod(folder, 0o700)


# ------------------------------------------------------------------------------ reporting
# Vector ids, requirement ids, error codes and details come from files and loaders: every one
# is printed through escape() (reference.ground.text), and written to the JUnit XML the same way, so
# that no control character reaches a terminal or makes the XML invalid.


def print_matrix(manifest: dict[str, Any], loaders: list[Loader], outcomes: list[Outcome]) -> None:
    by = {(o.vector, o.loader): o for o in outcomes}
    width = max([len(escape(v["id"])) for v in manifest["vectors"]] + [10])
    labels = [escape(ld.label) for ld in loaders]
    # wide enough for the label and "FAIL " plus the longest error code of the registry
    cols = [max(len(label), 26) for label in labels]
    for expect, title in CLASSES:
        vectors = [
            v
            for v in manifest["vectors"]
            if v["expect"] == expect and (v["id"], loaders[0].label) in by
        ]
        if not vectors:
            continue
        print(f"\n{title} ({len(vectors)})")
        print(
            "  "
            + "vector".ljust(width)
            + "  "
            + "  ".join(label.ljust(c) for label, c in zip(labels, cols, strict=True)).rstrip()
        )
        for v in vectors:
            cells = []
            for ld, c in zip(loaders, cols, strict=True):
                o = by[(v["id"], ld.label)]
                mark = ("ok " if o.passed else "FAIL ") + escape(
                    o.code or o.kind if o.kind != "accept" else "accept"
                )
                cells.append(mark[:c].ljust(c))
            print(("  " + escape(v["id"]).ljust(width) + "  " + "  ".join(cells)).rstrip())


def print_failures(outcomes: list[Outcome]) -> None:
    failures = [o for o in outcomes if not o.passed]
    notes = [o for o in outcomes if o.passed and o.detail]
    if failures:
        print(f"\nfailures ({len(failures)}):")
        for o in failures:
            cited = escape(", ".join(o.requirements))
            print(f"  [{escape(o.loader)}] {escape(o.vector)} ({cited}): {escape(o.detail)}")
    if notes:
        print(f"\nnotes ({len(notes)}):")
        for o in notes[:20]:
            print(f"  [{escape(o.loader)}] {escape(o.vector)}: {escape(o.detail)}")


def print_summary(manifest: dict[str, Any], loaders: list[Loader], outcomes: list[Outcome]) -> None:
    expect_of = {v["id"]: v["expect"] for v in manifest["vectors"]}
    print("\nsummary")
    for ld in loaders:
        parts = []
        for expect, title in CLASSES:
            mine = [o for o in outcomes if o.loader == ld.label and expect_of[o.vector] == expect]
            if mine:
                parts.append(f"{title.split()[0]} {sum(o.passed for o in mine)}/{len(mine)}")
        total = [o for o in outcomes if o.loader == ld.label]
        passed = sum(o.passed for o in total)
        failed = len(total) - passed
        print(f"  {escape(ld.label)}: {', '.join(parts)}; {passed} passed, {failed} failed")


def write_report_json(path: Path, suite: Suite, outcomes: list[Outcome]) -> None:
    doc = {**suite.versions, "outcomes": [o.__dict__ for o in outcomes]}
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def write_junit(path: Path, loaders: list[Loader], outcomes: list[Outcome]) -> None:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>"]
    for ld in loaders:
        mine = [o for o in outcomes if o.loader == ld.label]
        failed = sum(not o.passed for o in mine)
        suite = quoteattr("awq2-conformance " + escape(ld.label))
        lines.append(f'  <testsuite name={suite} tests="{len(mine)}" failures="{failed}">')
        for o in mine:
            case = f"classname={quoteattr(escape(ld.label))} name={quoteattr(escape(o.vector))}"
            lines.append(f'    <testcase {case} time="{o.seconds:.3f}">')
            if not o.passed:
                cited = xml_escape(escape(", ".join(o.requirements)))
                message = quoteattr(escape(o.detail))
                lines.append(f"      <failure message={message}>{cited}</failure>")
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="awq2-conformance",
        description="Run AWQ-v2 loaders over the conformance vectors and print the results "
        "matrix. A loader is a command; {file} is replaced by each vector's path. Exit 0 + JSON "
        "document = accept, exit 1 (+ optional error code) = reject, anything else = crash.",
        epilog="built-in loaders: 'reference' (the Python reference) and 'c' (the independent "
        "C loader in conformance/adapters/c, compiled with ${CC:-cc} into its build/ folder when "
        "missing or stale, or into ${XDG_CACHE_HOME:-~/.cache}/awq-v2/c-loader/ when the "
        "package folder is read-only). Loaders run in the current folder. "
        "exit status: 0 all verdicts pass, 1 a verdict fails, 2 usage, build error, a suite "
        "whose files differ from its manifest or that cannot be unpacked or copied into $TMPDIR "
        "(nothing is run), 130 interrupted (Ctrl-C), 143 SIGTERM, 129 SIGHUP (the loader is "
        "killed and the temporary folders removed). "
        "Also run as python -m conformance.run. "
        'Example: --loader "ref=python -m conformance.adapters.reference {file}" '
        '--loader "c=conformance/adapters/c/build/awq2c {file}"; or simply '
        "--loader reference --loader c",
    )
    parser.add_argument(
        "--loader",
        action="append",
        metavar='"[LABEL=]CMD {file}"',
        help="a loader command, or a built-in name: reference, c (repeat for a matrix; "
        "default: the reference)",
    )
    parser.add_argument(
        "--suite",
        type=Path,
        default=HERE,
        metavar="PATH",
        help="the suite to run: a folder holding manifest.json, vectors/ and schema/, or the "
        "published .tar.xz archive (default: the installed suite); every file is checked "
        "against the manifest's size and sha256 first",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per vector (30)")
    parser.add_argument("--only", metavar="REGEX", help="run only vectors whose id matches")
    parser.add_argument("--report-json", type=Path, help="write every verdict as JSON")
    parser.add_argument("--junit-xml", type=Path, help="write a JUnit XML report")
    parser.add_argument("--quiet", action="store_true", help="summary and failures only")
    return parser


#: The exit status of an interrupted run (128 + SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 130
#: The signals that stop a run as Ctrl-C does, with the exit status 128 + the signal (143 for
#: SIGTERM, 129 for SIGHUP).
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)


class Stopped(BaseException):
    """A stop signal arrived: raised in the main thread, as ``KeyboardInterrupt`` is for
    SIGINT, so that the same ``finally`` clauses kill the loader's group and remove the
    temporary folders."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: FrameType | None) -> None:
    """The handler of :data:`STOP_SIGNALS`: raise :class:`Stopped`, once."""
    for sig in STOP_SIGNALS:  # once: a second signal does not cut the cleanup short
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """:data:`STOP_SIGNALS` raise :class:`Stopped` while inside (the main thread only; a
    signal ignored when the runner started, as under ``nohup``, stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) != signal.SIG_IGN:
            previous[sig] = signal.signal(sig, _stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with _stop_on_signals(), opened_suite(args.suite) as suite:
            return _run_suite(args, suite)
    except (SuiteError, ArchiveError, ScratchError) as exc:
        output = "\n".join(map(escape, str(exc).split("\n")))
        print(f"error: {output}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the loader's group is killed, the folders removed, on the way
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Stopped as exc:  # the same, for SIGTERM and SIGHUP
        print(f"interrupted ({signal.Signals(exc.signum).name})", file=sys.stderr)
        return 128 + exc.signum


@contextmanager
def opened_suite(path: Path) -> Iterator[Suite]:
    """The suite at ``path`` (a folder, or a .tar.xz unpacked into a temporary folder that is
    removed afterwards), its files checked against the manifest (:mod:`conformance.suite`)."""
    if path.is_dir():
        yield _checked(suite_module.load(path))
        return
    if not path.is_file():
        raise SuiteError(f"{path}: no such folder or archive")
    tmp = _temporary_folder("awq2-suite-")
    try:
        archive.extract(path, tmp)
        yield _checked(suite_module.load(archive.suite_root(tmp)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _checked(suite: Suite) -> Suite:
    found = suite_module.problems(suite)
    if found:
        raise SuiteError(f"{suite.root}: {suite_module.refusal(found)}")
    return suite


def _run_suite(args: argparse.Namespace, suite: Suite) -> int:
    manifest = suite.manifest
    versions = suite.versions
    print(
        f"AWQ-v2 conformance suite {versions['suite_version']} "
        f"(spec {versions['spec_version']}): {len(manifest['vectors'])} vectors, "
        f"every file as listed ({escape(str(suite.root))})"
    )
    try:
        loaders = [
            builtin_loader(s) if s in BUILTIN_LOADERS else Loader.parse(s)
            for s in (args.loader or ["reference"])
        ]
    except BuildError as exc:
        output = "\n".join(map(escape, str(exc).split("\n")))
        print(f"error: the C loader did not build:\n{output}", file=sys.stderr)
        return 2
    if len({ld.label for ld in loaders}) != len(loaders):
        print("error: two loaders share a label; name them with LABEL=CMD", file=sys.stderr)
        return 2
    outcomes = run(manifest, suite.root, loaders, args.timeout, args.only)
    if not args.quiet:
        print_matrix(manifest, loaders, outcomes)
    print_failures(outcomes)
    print_summary(manifest, loaders, outcomes)
    if args.report_json:
        write_report_json(args.report_json, suite, outcomes)
    if args.junit_xml:
        write_junit(args.junit_xml, loaders, outcomes)
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
