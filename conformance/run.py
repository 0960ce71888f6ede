"""``python -m conformance.run [--loader "CMD {file}"]...``: check loaders against the vectors.

The adapter protocol (language-neutral; published in the docs with its JSON Schemas):

* the runner invokes the loader command once per vector, ``{file}`` replaced by the
  vector's path, with a timeout;
* **accept**: exit status 0 and, on stdout, one JSON document describing what the
  loader read (``schema/adapter-output.schema.json``);
* **reject**: exit status 1; stdout MAY hold ``{"error": {"code": "BAD_MAGIC", ...}}``
  or a line starting with the error code;
* anything else (another status, a signal, a timeout, status 0 without a valid
  document) is a **crash**.

Verdicts: a ``y_`` vector passes when accepted with the expected content; an ``n_``
vector when rejected with the expected code (a reject without a code passes with a
note); an ``i_`` vector when accepted with the expected content or rejected with one
of its listed codes.  Without ``--loader`` the reference implementation is checked.
The runner reads only the manifest and the vectors: it never imports the reference.

Two loaders are built in: ``--loader reference`` (the Python reference, run as a
subprocess) and ``--loader c`` (the independent C loader of ``adapters/c``, compiled with
``${CC:-cc}`` into ``adapters/c/build/`` when the binary is missing or older than a source).

Exit status: 0 when every verdict passes, 1 when any fails, 2 usage, manifest or build error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

HERE = Path(__file__).resolve().parent
REFERENCE_LOADER = f"{shlex.quote(sys.executable)} -m conformance.adapters.reference {{file}}"
C_ADAPTER = HERE / "adapters" / "c"
C_BINARY = C_ADAPTER / "build" / "awq2c"
C_FLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Wpedantic")
BUILTIN_LOADERS = ("reference", "c")
CLASSES = (("accept", "y_ must accept"), ("reject", "n_ must reject"), ("either", "i_ either"))
_CODE = re.compile(r"^[A-Z][A-Z0-9_]+$")


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


def build_c_loader(out: Path | None = None, extra_flags: Sequence[str] = ()) -> Path:
    """Compile ``conformance/adapters/c`` with ``${CC:-cc}`` into ``out`` (default
    :data:`C_BINARY`) when it is missing or older than a source, or always when
    ``extra_flags`` are given; return it.  Writes a temporary file and renames it, so
    concurrent runners never execute a half-written binary."""
    out = out or C_BINARY
    sources = sorted(C_ADAPTER.glob("*.c"))
    newest = max(p.stat().st_mtime for p in [*sources, *C_ADAPTER.glob("*.h")])
    if out.exists() and out.stat().st_mtime >= newest and not extra_flags:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    argv = [
        *shlex.split(os.environ.get("CC") or "cc"),
        *C_FLAGS,
        *extra_flags,
        "-o",
        str(tmp),
        *map(str, sources),
    ]
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
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=HERE.parent)
    except subprocess.TimeoutExpired:
        return "crash", None, f"timed out after {timeout:g} s", timeout
    except OSError as exc:
        return "crash", None, f"could not start: {exc}", 0.0
    seconds = time.perf_counter() - started
    out = proc.stdout.decode("utf-8", "replace")
    err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
    tail = err[-1] if err else ""
    if proc.returncode == 0:
        try:
            doc = json.loads(out)
        except ValueError:
            return "crash", None, "exit 0 without a JSON document on stdout", seconds
        if not isinstance(doc, dict) or not isinstance(doc.get("tensors"), list):
            return "crash", None, "exit 0 with a document that is not adapter output", seconds
        return "accept", doc, "", seconds
    if proc.returncode == 1:
        return "reject", _reported_code(out), tail, seconds
    return "crash", None, f"exit status {proc.returncode}: {tail}"[:300], seconds


def _reported_code(out: str) -> str | None:
    text = out.strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
        code = doc.get("error", {}).get("code") if isinstance(doc, dict) else None
        return code if isinstance(code, str) else None
    except ValueError:
        first = text.split()[0]
        return first if _CODE.match(first) else None


def compare(expected: dict[str, Any], got: dict[str, Any]) -> str:
    """The first difference between the expected content and a loader's document, or ''."""
    want_t = {t["name"]: t for t in expected["tensors"]}
    got_t = {t.get("name"): t for t in got.get("tensors", []) if isinstance(t, dict)}
    if set(want_t) != set(got_t):
        missing = sorted(set(want_t) - set(got_t))[:3]
        extra = sorted(set(got_t) - set(want_t), key=str)[:3]
        return f"tensor names differ: missing {missing}, unexpected {extra}"
    for name in sorted(want_t):
        for key in ("dtype", "shape", "layout", "sha256"):
            if got_t[name].get(key) != want_t[name][key]:
                want, found = want_t[name][key], got_t[name].get(key)
                return f"tensor {name!r}: {key} expected {want!r}, found {found!r}"
    want_l = {layer["prefix"]: layer for layer in expected.get("layers", [])}
    got_l = {
        layer.get("prefix"): layer
        for layer in got.get("layers", []) or []
        if isinstance(layer, dict)
    }
    if set(want_l) != set(got_l):
        want_names, got_names = sorted(want_l)[:3], sorted(got_l, key=str)[:3]
        return f"quantised layers differ: expected {want_names}, found {got_names}"
    for prefix in sorted(want_l):
        for key, value in want_l[prefix].items():
            if got_l[prefix].get(key) != value:
                return (
                    f"layer {prefix!r}: {key} expected {value!r}, found {got_l[prefix].get(key)!r}"
                )
    if got.get("metadata", {}) != expected.get("metadata", {}):
        return "metadata differs"
    return ""


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


def load_manifest(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("manifest_version") != 1 or not isinstance(doc.get("vectors"), list):
        raise ValueError(f"{path}: not a version 1 conformance manifest")
    return doc


def check_files(manifest: dict[str, Any], root: Path) -> list[str]:
    """Vectors whose bytes differ from the manifest's sha256 (a damaged checkout)."""
    bad = []
    for v in manifest["vectors"]:
        data = (root / v["file"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != v["sha256"]:
            bad.append(v["id"])
    return bad


def run(
    manifest: dict[str, Any],
    root: Path,
    loaders: list[Loader],
    timeout: float,
    only: str | None = None,
) -> list[Outcome]:
    outcomes = []
    for v in manifest["vectors"]:
        if only and not re.search(only, v["id"]):
            continue
        for loader in loaders:
            kind, result, detail, seconds = run_loader(loader, root / v["file"], timeout)
            passed, why = judge(v, kind, result, detail)
            code = result if kind == "reject" else None
            outcomes.append(
                Outcome(
                    v["id"], loader.label, kind, passed, why, code, seconds, list(v["requirements"])
                )
            )
    return outcomes


# ------------------------------------------------------------------------------ reporting


def print_matrix(manifest: dict[str, Any], loaders: list[Loader], outcomes: list[Outcome]) -> None:
    by = {(o.vector, o.loader): o for o in outcomes}
    width = max([len(v["id"]) for v in manifest["vectors"]] + [10])
    # wide enough for the label and "FAIL " plus the longest error code of the registry
    cols = [max(len(ld.label), 26) for ld in loaders]
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
            + "  ".join(ld.label.ljust(c) for ld, c in zip(loaders, cols, strict=True)).rstrip()
        )
        for v in vectors:
            cells = []
            for ld, c in zip(loaders, cols, strict=True):
                o = by[(v["id"], ld.label)]
                mark = ("ok " if o.passed else "FAIL ") + (
                    o.code or o.kind if o.kind != "accept" else "accept"
                )
                cells.append(mark[:c].ljust(c))
            print(("  " + v["id"].ljust(width) + "  " + "  ".join(cells)).rstrip())


def print_failures(outcomes: list[Outcome]) -> None:
    failures = [o for o in outcomes if not o.passed]
    notes = [o for o in outcomes if o.passed and o.detail]
    if failures:
        print(f"\nfailures ({len(failures)}):")
        for o in failures:
            print(f"  [{o.loader}] {o.vector} ({', '.join(o.requirements)}): {o.detail}")
    if notes:
        print(f"\nnotes ({len(notes)}):")
        for o in notes[:20]:
            print(f"  [{o.loader}] {o.vector}: {o.detail}")


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
        print(f"  {ld.label}: {', '.join(parts)}; {passed} passed, {len(total) - passed} failed")


def write_report_json(path: Path, outcomes: list[Outcome]) -> None:
    path.write_text(json.dumps([o.__dict__ for o in outcomes], indent=1) + "\n", encoding="utf-8")


def write_junit(path: Path, loaders: list[Loader], outcomes: list[Outcome]) -> None:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>"]
    for ld in loaders:
        mine = [o for o in outcomes if o.loader == ld.label]
        failed = sum(not o.passed for o in mine)
        suite = quoteattr("awq2-conformance " + ld.label)
        lines.append(f'  <testsuite name={suite} tests="{len(mine)}" failures="{failed}">')
        for o in mine:
            case = f"classname={quoteattr(ld.label)} name={quoteattr(o.vector)}"
            lines.append(f'    <testcase {case} time="{o.seconds:.3f}">')
            if not o.passed:
                cited = escape(", ".join(o.requirements))
                lines.append(f"      <failure message={quoteattr(o.detail)}>{cited}</failure>")
            lines.append("    </testcase>")
        lines.append("  </testsuite>")
    lines.append("</testsuites>")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.run",
        description="Run AWQ-v2 loaders over the conformance vectors and print the results "
        "matrix. A loader is a command; {file} is replaced by each vector's path. Exit 0 + JSON "
        "document = accept, exit 1 (+ optional error code) = reject, anything else = crash.",
        epilog="built-in loaders: 'reference' (the Python reference) and 'c' (the independent "
        "C loader in conformance/adapters/c, compiled with ${CC:-cc} into its build/ folder when "
        "missing or stale). "
        "exit status: 0 all verdicts pass, 1 a verdict fails, 2 usage, manifest or build error. "
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
        "--manifest",
        type=Path,
        default=HERE / "manifest.json",
        help="the manifest to check against (default: the committed one)",
    )
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per vector (30)")
    parser.add_argument("--only", metavar="REGEX", help="run only vectors whose id matches")
    parser.add_argument("--report-json", type=Path, help="write every verdict as JSON")
    parser.add_argument("--junit-xml", type=Path, help="write a JUnit XML report")
    parser.add_argument("--quiet", action="store_true", help="summary and failures only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        manifest = load_manifest(args.manifest)
        damaged = check_files(manifest, args.manifest.parent)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if damaged:
        print(f"error: vectors differ from the manifest's sha256: {damaged[:5]}", file=sys.stderr)
        return 2
    try:
        loaders = [
            builtin_loader(s) if s in BUILTIN_LOADERS else Loader.parse(s)
            for s in (args.loader or ["reference"])
        ]
    except BuildError as exc:
        print(f"error: the C loader did not build:\n{exc}", file=sys.stderr)
        return 2
    if len({ld.label for ld in loaders}) != len(loaders):
        print("error: two loaders share a label; name them with LABEL=CMD", file=sys.stderr)
        return 2
    outcomes = run(manifest, args.manifest.parent, loaders, args.timeout, args.only)
    if not args.quiet:
        print_matrix(manifest, loaders, outcomes)
    print_failures(outcomes)
    print_summary(manifest, loaders, outcomes)
    if args.report_json:
        write_report_json(args.report_json, outcomes)
    if args.junit_xml:
        write_junit(args.junit_xml, loaders, outcomes)
    return 0 if all(o.passed for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
