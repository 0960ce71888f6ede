"""``tools/safetensors_suite.py``: the adapted upstream tests are the adaptation of the pristine
ones, and its lists name tests that exist (issue 39).  Runs without torch; the suite itself runs
in CI's torch environment (``tests/safetensors_upstream/``)."""

from __future__ import annotations

import ast

from tools import safetensors_suite as suite


def _test_ids(name: str) -> set[str]:
    """``file::test`` and ``file::Class::test`` of every test an adapted file defines."""
    tree = ast.parse((suite.HERE / name).read_text(encoding="utf-8"))
    ids = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            ids.add(f"{name}::{node.name}")
        elif isinstance(node, ast.ClassDef):
            ids |= {f"{name}::{node.name}::{item.name}" for item in node.body
                    if isinstance(item, ast.FunctionDef) and item.name.startswith("test")}  # fmt: skip
    return ids


def test_adapted_files_are_the_adaptation_of_the_pristine_ones() -> None:
    assert suite.main(["--check"]) == 0
    for name in suite.FILES:
        text = (suite.HERE / name).read_text(encoding="utf-8")
        assert suite.PIN in text.splitlines()[0]
        imports = [line.split()[1] for line in text.splitlines()
                   if line.lstrip().startswith(("import ", "from "))]  # fmt: skip
        assert not [m for m in imports if m.split(".")[0] == "safetensors"], name


def test_the_adaptation_changes_imports_only() -> None:
    """Every line of a pristine file that is not a ``safetensors`` import is in the adapted one,
    in order."""
    for name in suite.FILES:
        pristine = (suite.PRISTINE / name).read_text(encoding="utf-8")
        tree = ast.parse(pristine)
        dropped: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("safetensors"):
                assert node.end_lineno is not None
                dropped |= set(range(node.lineno, node.end_lineno + 1))
        kept = [line for i, line in enumerate(pristine.splitlines(), 1) if i not in dropped]
        adapted = iter((suite.HERE / name).read_text(encoding="utf-8").splitlines())
        for line in kept:
            assert any(line == other for other in adapted), (name, line)


def test_every_listed_test_exists_and_is_listed_once() -> None:
    ids = set().union(*(_test_ids(name) for name in suite.FILES))
    assert set(suite.NOT_CLAIMED) <= ids, set(suite.NOT_CLAIMED) - ids
    assert set(suite.DIFFERENCES) <= ids, set(suite.DIFFERENCES) - ids
    assert not set(suite.NOT_CLAIMED) & set(suite.DIFFERENCES)
    assert all(
        reason.strip() for reason in (*suite.NOT_CLAIMED.values(), *suite.DIFFERENCES.values())
    )


def test_every_upstream_file_is_taken_or_left_out_with_a_reason() -> None:
    pristine = {path.name for path in suite.PRISTINE.glob("*.py")}
    assert pristine == set(suite.FILES)
    assert not set(suite.FILES) & set(suite.LEFT_OUT)


def test_the_docs_table_lists_what_the_script_lists() -> None:
    """``docs/reference/torch.md``'s table of the upstream tests is the script's two lists,
    each test with its reason, no more."""
    text = (suite.ROOT / "docs" / "reference" / "torch.md").read_text(encoding="utf-8")
    rows = {line for line in text.splitlines() if line.startswith("| `test_")}
    listed = {f"| `{test}` | differs (expected to fail) | {reason} |"
              for test, reason in suite.DIFFERENCES.items()}  # fmt: skip
    listed |= {f"| `{test}` | not claimed (skipped) | {reason} |"
               for test, reason in suite.NOT_CLAIMED.items()}  # fmt: skip
    assert rows == listed
    assert f"`{suite.PIN[:12]}`" in text
