"""The shape of the code, as issue 11 fixed it: checked so that it stays that way.

* ``spec`` <- ``reference`` <- ``conformance``: the arrows point one way;
* ``reference/`` has no import cycle, and no import inside a function or under
  ``TYPE_CHECKING`` that would hide one;
* no module of ``reference/`` reaches into another's private members;
* the index geometry, the entry-checksum coverage and the Marlin constants live in ``spec/``;
* functions stay short enough to read (under 80 lines), the reader under 400 lines;
* issue 32's rooms: ``reference/`` keeps at most 12 modules at its top (the public interfaces
  and the commands), the rest in subpackages whose imports run one way (:data:`ROOMS`), each
  saying in its ``__init__`` docstring what lives there and what it may import; and
  ``CONTRIBUTING.md``'s map names every module with its one line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("spec", "reference", "conformance")


def _modules(package: str) -> dict[str, ast.Module]:
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts): ast.parse(
            path.read_text(encoding="utf-8")
        )
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def _top_level_imports(tree: ast.Module) -> set[str]:
    return {name for node in tree.body for name in _imported(node)}


@pytest.mark.parametrize("package", PACKAGES)
def test_arrows_point_one_way(package: str) -> None:
    later = PACKAGES[PACKAGES.index(package) + 1 :]
    for module, tree in _modules(package).items():
        for node in ast.walk(tree):
            for name in _imported(node):
                assert name.split(".")[0] not in (*later, "tools"), f"{module} imports {name}"


def test_reference_has_no_import_cycle() -> None:
    modules = _modules("reference")
    graph = {
        module: {name for name in _top_level_imports(tree) if name in modules and name != module}
        for module, tree in modules.items()
    }
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, "import cycle: " + " -> ".join((*path, module))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_reference_imports_nothing_of_its_own_inside_functions_or_type_checking() -> None:
    for module, tree in _modules("reference").items():
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                pytest.fail(f"{module}: an import under TYPE_CHECKING (line {node.lineno})")
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    local = [n for n in _imported(inner) if n.split(".")[0] in PACKAGES]
                    assert not local, f"{module}.{node.name} imports {local} inside a function"


def test_no_module_reaches_into_another_objects_private_members() -> None:
    private = re.compile(r"\b(?!self\b|cls\b)([a-z_][a-z0-9_]*)\.(_[a-z][a-z0-9_]*)\b")
    for path in sorted((ROOT / "reference").rglob("*.py")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for owner, member in private.findall(code):
                if owner == "_metadata":  # importlib.metadata, imported under that name
                    continue
                pytest.fail(f"{path.name}:{lineno}: {owner}.{member}")


@pytest.mark.parametrize(
    "pattern",
    [
        r"INDEX_SECTION_ALIGN",  # the index geometry: spec.geometry
        r"\(1\s*<<\s*[a-z_]*bucket_bits\)\s*\+\s*1",  # the bucket table's slots
        r"ENTRY_CRC_OFFSET\]",  # what the entry checksum covers: spec.geometry.entry_checksum
        r"^\s*(TILE_K|TILE_N|GEMM_MIN_K|MARLIN_GROUP_SIZES|AWQ_ORDER|QUANT_BITS)\s*[:=]",
    ],
)
def test_reference_defines_no_geometry_or_marlin_fact_of_its_own(pattern: str) -> None:
    for path in sorted((ROOT / "reference").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(pattern, text, re.MULTILINE), f"{path.name} matches {pattern}"


def test_functions_are_short_and_the_reader_is_small() -> None:
    longest = []
    for module, tree in _modules("reference").items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                longest.append((length, f"{module}.{node.name}"))
    assert max(longest)[0] < 80, max(longest)
    reader = ROOT / "reference" / "format" / "reader.py"
    reader_lines = reader.read_text(encoding="utf-8").count("\n")
    assert reader_lines < 400, reader_lines


#: Each room of ``reference/`` and the rooms it may import (the top level may import all).
ROOMS = {
    "ground": set(),
    "quant": {"ground"},
    "format": {"ground", "quant"},
    "write": {"ground", "quant", "format"},
    "sources": {"ground", "quant", "format", "write"},
    "sets": {"ground", "quant", "format", "write"},
    "conversion": {"ground", "quant", "format", "write", "sources", "sets"},
    "describe": {"ground", "quant", "format", "write", "sources", "sets"},
}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in ROOMS else "top"


def test_rooms_import_only_the_rooms_below_them() -> None:
    for module, tree in _modules("reference").items():
        room = _room(module)
        if room == "top":
            continue
        for node in ast.walk(tree):
            for name in _imported(node):
                if not name.startswith("reference."):
                    assert name != "reference", f"{module} imports the top level of reference"
                    continue
                target = _room(name)
                assert target == room or target in ROOMS[room], (
                    f"{module} ({room}) imports {name} ({target}); {room} may import "
                    f"{sorted(ROOMS[room]) or 'nothing of reference'}"
                )


def test_the_top_level_holds_at_most_12_modules_and_every_room_says_what_it_is() -> None:
    top = sorted(p.name for p in (ROOT / "reference").glob("*.py"))
    assert len(top) <= 12, top
    rooms = sorted(p.name for p in (ROOT / "reference").iterdir() if (p / "__init__.py").exists())
    assert rooms == sorted(ROOMS), rooms
    for room in rooms:
        doc = ast.get_docstring(ast.parse((ROOT / "reference" / room / "__init__.py").read_text()))
        assert doc and "May import:" in doc, room
        allowed = doc.split("May import:", 1)[1]
        for other in ROOMS:
            said = f"reference.{other}" in allowed
            assert said == (other in ROOMS[room]), (
                f"{room}'s docstring and ROOMS disagree on {other}"
            )


def test_the_map_in_contributing_names_every_module() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    map_rows = {
        m.group(1): m.group(2)
        for m in re.finditer(r"^\| `(reference/[a-z0-9_/]+\.py)` \| (.+?) \|$", text, re.M)
    }
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "reference").rglob("*.py"))
    missing = [m for m in modules if m not in map_rows]
    assert not missing, f"CONTRIBUTING.md's map lacks {missing}"
    stale = [m for m in map_rows if m not in modules]
    assert not stale, f"CONTRIBUTING.md's map names modules that do not exist: {stale}"
    assert all(line.strip() for line in map_rows.values())


def test_the_wheel_lists_every_package() -> None:
    """pyproject.toml names the packages the wheel ships one by one: a room added under
    ``reference/`` and not listed there imports from the checkout and fails once installed
    (it did: ``reference.conversion``, in CI's wheel-installed vLLM environment)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    for top in ("spec", "reference", "conformance"):
        for init in (ROOT / top).rglob("__init__.py"):
            package = ".".join(init.parent.relative_to(ROOT).parts)
            assert package in listed, f"{package} is not in pyproject.toml's packages"
