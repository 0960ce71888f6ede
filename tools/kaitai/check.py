"""``python -m tools.kaitai``: compile ``spec/awq2.ksy`` and check it against the reference.

1. The committed description is the generated one (``python -m tools.regen`` writes it), and
   js-yaml reads back from its text exactly the document the generator wrote.
2. The compiler (npm ``kaitai-struct-compiler``, pinned) compiles it without errors for
   Python, C++ (cpp_stl), Java, Go and JavaScript.
3. The generated Python parser, on the ``kaitaistruct`` runtime, reads every must-accept
   vector of the manifest (``expect: accept``, and ``either`` when the reference accepts it
   after full validation) and agrees with the reference reader on every header, trailer,
   index and entry field, every name, the dims and the metadata bytes
   (:mod:`tools.kaitai.compare`).

``--ksy FILE`` checks another description (steps 2 and 3 only), e.g. a deliberately broken
copy; ``--out DIR`` keeps the generated parsers.  Exit status: 0 every check passed, 1 a check
failed, 2 the compiler or the runtime is not installed (with the command that installs it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from reference.format.reader import Reader
from tools import ROOT
from tools.kaitai import ksy
from tools.kaitai.compare import Comparison, compare_file
from tools.kaitai.compiler import CompileFailed, CompilerMissing, compile_ksy

MANIFEST = ROOT / "conformance" / "manifest.json"
RUNTIME_INSTALL = 'pip install -e ".[test]"'


def must_accept(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The vectors a reader must accept, and the optional ones (``either``): files only (the
    description is of one file; a set's folder is a manifest and such files)."""
    return [v for v in manifest["vectors"] if v["expect"] in ("accept", "either") and "file" in v]


def _reference(path: Path) -> Reader | None:
    """The reference reader after full validation, or ``None`` when it rejects the file."""
    try:
        return Reader(path, validate=True, copy=True)
    except Exception:  # an "either" vector the reference does not take
        return None


def load_parser(source: str, folder: Path) -> ModuleType:
    """Import the generated ``awq2.py`` (the ``kaitaistruct`` runtime must be installed)."""
    path = folder / "awq2.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("awq2_kaitai", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_vectors(parser: ModuleType, vectors: list[dict[str, Any]]) -> list[Comparison]:
    """Parse each vector with Kaitai and compare it with the reference."""
    results = []
    for vector in vectors:
        path = MANIFEST.parent / vector["file"]
        reader = _reference(path)
        if reader is None:
            if vector["expect"] == "accept":
                raise RuntimeError(f"{vector['id']}: the reference rejects a must-accept vector")
            continue
        with reader:
            data = path.read_bytes()
            try:
                parsed = parser.Awq2.from_bytes(data)
                result = compare_file(vector["id"], parsed, reader, data)
            except Exception as exc:  # the parser failed: a finding, not a crash of the check
                result = Comparison(vector["id"], [f"{vector['id']}: kaitai: {exc!r}"])
        results.append(result)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.kaitai",
        description="Compile spec/awq2.ksy with the Kaitai Struct compiler (npm, run by node) "
        "for Python, C++, Java, Go and JavaScript, then parse every must-accept vector with "
        "the generated Python parser and compare every field with the reference reader.",
        epilog="exit status: 0 passed, 1 a check failed, 2 the compiler or runtime is missing "
        "(npm ci --prefix tools/kaitai; pip install -e '.[test]')",
    )
    parser.add_argument(
        "--ksy", type=Path, default=ksy.KSY, help="the description to check (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, help="keep the generated parsers in this folder")
    return parser


def _write_outputs(out: Path, files: dict[str, dict[str, str]]) -> None:
    for language, generated in files.items():
        for name, text in generated.items():
            target = out / language / name.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    problems: list[str] = []
    committed = args.ksy.resolve() == ksy.KSY.resolve()
    if committed and ksy.KSY.read_text(encoding="utf-8") != ksy.render():
        problems.append(f"{ksy.KSY}: stale; run python -m tools.regen")
    try:
        compiled = compile_ksy(args.ksy)
    except CompilerMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CompileFailed as exc:
        print(f"FAIL compile\n{exc}", file=sys.stderr)
        return 1
    print(f"kaitai-struct-compiler {compiled.version}: compiled for {', '.join(compiled.files)}")
    if committed and compiled.document != json.loads(json.dumps(ksy.document())):
        problems.append(f"{ksy.KSY}: js-yaml reads a document other than the generator's")
    if args.out:
        _write_outputs(args.out, compiled.files)
    try:
        import kaitaistruct  # noqa: F401
    except ImportError:
        print(
            f"error: the kaitaistruct runtime is not installed: {RUNTIME_INSTALL}", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory() as folder:
        parser = load_parser(compiled.files["python"]["awq2.py"], Path(folder))
        vectors = must_accept(json.loads(MANIFEST.read_text(encoding="utf-8")))
        results = check_vectors(parser, vectors)
    for result in results:
        problems.extend(result.problems)
    shown = problems[:50]
    for line in shown:
        print(f"FAIL {line}", file=sys.stderr)
    if len(problems) > len(shown):
        print(f"... and {len(problems) - len(shown)} more", file=sys.stderr)
    values = sum(r.compared for r in results)
    failed = sum(1 for r in results if r.problems)
    print(
        f"kaitai: {len(results)} vectors parsed and compared with the reference "
        f"({values} values), {failed} disagree; {time.monotonic() - started:.1f} s"
    )
    return 1 if problems else 0
