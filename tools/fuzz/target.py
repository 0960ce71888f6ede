"""The reader path under test, for one input, and what it did (:class:`Result`).

``reference.open``, ``validate()``, ``entry()``, ``tensor()`` and ``in`` for every name (plus
absent names), ``linear()`` and ``dequantize()`` of every layer, ``metadata``, ``entries()``,
``tensors()``, ``read_into()``, ``verify()``.  An input passes when it is accepted or only
``reference.FormatError`` (or ``KeyError`` for a name that is not there) escapes; anything
else is an unexpected exception, located at the innermost frame outside the fuzzer.  Peak
memory is measured per input (peak RSS growth, and the tracemalloc peak when traced).
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import shutil
import tempfile
import time
import traceback
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import reference
import reference.convert
from reference.ground.errors import FormatError, TensorNotFoundError
from reference.sources.compressed import CompressedReader
from reference.sources.v1 import V1Reader
from tools import ROOT

#: The fuzzer's own folder: its frames are not where an exception comes from.
HERE = Path(__file__).resolve().parent


@dataclass
class Result:
    number: int
    size: int
    outcome: str  # "accepted", "rejected" or "unexpected"
    code: str | None = None  # first FormatError code (open, validate or verify level)
    stage: str = ""
    exc_type: str = ""
    site: str = ""
    message: str = ""
    trace: str = ""
    traced: bool = False  # run under tracemalloc
    peak: int = 0  # tracemalloc peak during the input, bytes
    rss_growth: int = 0  # peak RSS during the input minus RSS before it, bytes
    seconds: float = 0.0
    lazy_after_valid: list[tuple[str, str]] = field(default_factory=list)  # (call, code)
    json_size: int = 0  # bytes of JSON in the input (AWQ v1 configs, index, headers)


class State:
    """How far the reader path got: the stage, the first error code, later lazy rejections."""

    def __init__(self) -> None:
        self.stage = "open"
        self.target = ""  # the file or folder (".") of the input being read
        self.code: str | None = None
        self.validated = False
        self.lazy: list[tuple[str, str]] = []


def _call(st: State, stage: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one reader call; FormatError and TensorNotFoundError are expected outcomes."""
    st.stage = stage
    try:
        return fn(*args)
    except FormatError as exc:
        if st.validated:
            st.lazy.append((stage.split("(")[0], exc.code))
        return None
    except TensorNotFoundError:
        return None


def _touch(array: Any) -> None:
    """Read the first and last element of a view (faults its pages in)."""
    if isinstance(array, np.ndarray) and array.size:
        flat = array.reshape(-1)
        _ = flat[0], flat[-1]


def _names_in(reader: Any, hints: Sequence[str]) -> list[str]:
    """Hinted names, plus every name the entries hold (read entry by entry, checks and all)."""
    names = dict.fromkeys(hints)
    record = getattr(reader, "_record", None)
    if record is not None:
        for i in range(min(len(reader), 4096)):
            try:
                raw = record(i).name
            except FormatError:
                continue
            with contextlib.suppress(UnicodeDecodeError):
                names[bytes(raw).decode("utf-8")] = None
    else:
        with contextlib.suppress(FormatError):
            names.update(dict.fromkeys(reader.names()))
    return list(names)


def exercise(path: Path, hints: Sequence[str], st: State) -> None:
    """The whole reader path over one file."""
    st.stage = "open"
    try:
        reader = reference.open(path)
    except FormatError as exc:
        st.code = exc.code
        return
    try:
        st.stage = "validate"
        try:
            reader.validate()
            st.validated = True
        except FormatError as exc:
            st.code = exc.code
        st.stage = "names"
        names = _names_in(reader, hints)
        for name in names:
            _call(st, f"entry({name!r})", reader.entry, name)
            _touch(_call(st, f"tensor({name!r})", reader.tensor, name))
            _call(st, f"contains({name!r})", reader.__contains__, name)
        for absent in ("", "\ud800", "absent.tensor", *(n + "x" for n in names[:2])):
            st.stage = f"absent({absent!r})"
            if absent not in names:
                _call(st, f"entry({absent!r})", reader.entry, absent)
                _call(st, f"tensor({absent!r})", reader.tensor, absent)
        prefixes = {n[: -len(".qweight")] for n in names if n.endswith(".qweight")}
        prefixes.update(_call(st, "layers", reader.layers) or ())
        for prefix in sorted(prefixes):
            layer = _call(st, f"linear({prefix!r})", reader.linear, prefix)
            if layer is not None:
                _touch(layer.qweight)
            _call(st, f"dequantize({prefix!r})", reader.dequantize, prefix)
        _call(st, "metadata", lambda: reader.metadata)
        if isinstance(reader, reference.Reader):
            infos = _call(st, "entries", reader.entries) or []
            for _info, view in _call(st, "tensors", lambda: list(reader.tensors())) or []:
                _touch(view)
            for info in infos[:8]:
                _call(
                    st, f"read_into({info.name!r})", reader.read_into, info, bytearray(info.length)
                )
        st.stage = "verify"
        try:
            reader.verify()
        except FormatError as exc:
            if st.code is None:
                st.code = exc.code
        if isinstance(reader, V1Reader | CompressedReader):  # the converter's planning path
            plan = _call(st, "make_plan", lambda: reference.convert.make_plan(reader,
                         hash_sources=False))  # fmt: skip
            if plan is not None:
                _call(st, "plan.sizes", plan.sizes)
    finally:
        stage, st.stage = st.stage, "close"
        reader.close()
        st.stage = stage


class ConvertStatus(Exception):
    """``reference.convert.main`` returned a status it does not document, or exited."""


def convert(src: Path, scratch: Path, st: State) -> None:
    """``python -m reference.convert SRC DST --quiet`` into a new folder in ``scratch``: it
    must return 0, 1, 2 or 3 (its documented statuses) and never raise."""
    st.stage = "convert"
    out = Path(tempfile.mkdtemp(prefix="convert-", dir=scratch))
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            status = reference.convert.main([str(src), str(out / "out.awq2"), "--quiet"])
    except SystemExit as exc:
        raise ConvertStatus(f"reference.convert.main exited with {exc.code!r}") from exc
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if status not in (0, 1, 2, 3):
        raise ConvertStatus(f"reference.convert.main returned {status!r}")


def write_folder(folder: Path, files: dict[str, bytes]) -> None:
    """Make ``folder`` hold exactly ``files`` (what an earlier input left is removed)."""
    for p in folder.iterdir():
        if p.name not in files:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def _site(exc: BaseException) -> str:
    """file:line (function) of the innermost frame of this project, else the innermost one."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if str(ROOT) in f.filename and str(HERE) not in f.filename]
    if not (ours or frames):
        return "?"
    f = (ours or frames)[-1]
    return f"{os.path.relpath(f.filename, ROOT)}:{f.lineno} ({f.name})"


def _rss_status() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in bytes, from /proc (0, 0 where there is none)."""
    rss = hwm = 0
    with contextlib.suppress(OSError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
    return rss, hwm


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux clear_refs 5)."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        return False
    return True


def json_size(files: dict[str, bytes]) -> int:
    """Bytes of JSON an input holds: its .json files and its safetensors headers (as long as
    each says, within the file).  A reader holds that JSON parsed, as Python objects."""
    total = 0
    for name, data in files.items():
        if name.endswith(".json"):
            total += len(data)
        elif name.endswith(".safetensors") and len(data) >= 8:
            total += min(int.from_bytes(data[:8], "little"), len(data) - 8)
    return total


def run_one(
    folder: Path,
    number: int,
    files: dict[str, bytes],
    targets: Sequence[str],
    hints: Sequence[str],
    trace: bool,
    with_convert: bool = False,
) -> Result:
    """One input: ``files`` written to ``folder``, the reader path over each of ``targets``
    (file names in it, or ``"."`` for the folder; a file an edit removed is skipped), then the
    converter when ``with_convert``.
    Its code is the first target's.  Peak memory is the growth of the peak RSS during it
    (VmHWM reset before it, else ru_maxrss growth) and, when ``trace``, the tracemalloc peak."""
    write_folder(folder, files)
    st = State()
    states = [st]
    exact = _reset_peak_rss()
    rss0 = _rss_status()[0] if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if trace:
        tracemalloc.start(1)
    started = time.perf_counter()
    result = Result(number, sum(map(len, files.values())), "rejected")
    result.json_size = json_size(files)
    try:
        for i, target in enumerate(t for t in targets if t == "." or t in files):
            if i:
                states.append(st := State())
            st.target = target
            exercise(folder / target, hints, st)
        if with_convert:
            states.append(st := State())
            st.target = targets[0]
            convert(folder / targets[0], folder.parent, st)
    except Exception as exc:  # the finding: anything but FormatError / TensorNotFoundError
        result.outcome = "unexpected"
        result.exc_type = type(exc).__name__
        result.site = _site(exc)
        result.message = str(exc)[:300]
        result.trace = traceback.format_exc(limit=12)[-4000:]
    result.seconds = time.perf_counter() - started
    if trace:
        result.traced = True
        result.peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    peak_rss = (
        _rss_status()[1] if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    result.rss_growth = max(0, peak_rss - rss0)
    result.stage = st.stage if len(targets) == 1 else f"{st.target}: {st.stage}"
    result.code = states[0].code
    result.lazy_after_valid = [x for s in states for x in s.lazy][:4]
    if result.outcome != "unexpected":
        result.outcome = "accepted" if states[0].code is None else "rejected"
    return result
