"""Run the Kaitai Struct compiler (npm ``kaitai-struct-compiler``, pinned) with node.

The compiler ships as a JavaScript library without a command line; ``compile.js`` beside
this module parses the ``.ksy`` with js-yaml (as the Web IDE does) and calls it once per
language.  Install both with ``npm ci --prefix tools/kaitai`` (``package-lock.json`` pins
them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "compile.js"
NODE_MODULES = HERE / "node_modules"
INSTALL = "npm ci --prefix tools/kaitai"

#: Languages the description must compile for; the Python output is also run.
LANGUAGES = ("python", "cpp_stl", "java", "go", "javascript")


class CompilerMissing(RuntimeError):
    """node, or the pinned npm packages, are not installed."""


class CompileFailed(RuntimeError):
    """The compiler refused the description; the message is its own."""


@dataclass(frozen=True)
class Compiled:
    version: str  #: the compiler's version
    document: dict[str, Any]  #: the .ksy as js-yaml parsed it
    files: dict[str, dict[str, str]]  #: language -> generated file name -> text


def compiler_available() -> str | None:
    """``None`` when the compiler can run, else what is missing and how to install it."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    for package in ("kaitai-struct-compiler", "js-yaml"):
        if not (NODE_MODULES / package / "package.json").is_file():
            return f"{package} is not installed: run {INSTALL}"
    return None


def compile_ksy(path: Path, languages: tuple[str, ...] = LANGUAGES) -> Compiled:
    """Compile ``path`` for every language; :class:`CompileFailed` names each that failed."""
    missing = compiler_available()
    if missing:
        raise CompilerMissing(missing)
    node = shutil.which("node") or "node"
    done = subprocess.run(
        [node, str(DRIVER), str(path), *languages], capture_output=True, text=True, check=False
    )
    if done.returncode not in (0, 1):
        raise CompileFailed(f"{path}: node exited {done.returncode}: {done.stderr.strip()}")
    result = json.loads(done.stdout)
    errors = result["errors"]
    if errors:
        raise CompileFailed(
            "\n".join(f"{path}: {language}: {message}" for language, message in errors.items())
        )
    return Compiled(result["version"], result["document"], result["files"])
