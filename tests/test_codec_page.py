"""The codec's reference page (``docs/reference/codec.md``, issue 39): its worked example runs
and prints exactly what the page shows, and the page names every public function.

Each ``python`` block of the page is followed by a ``text title="output"`` block; the blocks
run in order, in one namespace, from the repository root (the page's paths are relative to
it), and each block's standard output must equal the output block under it.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from reference.quant import codec

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "codec.md"

_BLOCK = re.compile(r"^```(python|text title=\"output\")\n(.*?)^```\n", re.M | re.S)


def example() -> list[tuple[str, str]]:
    """``(code, printed output)`` of each python block of the page, in order."""
    blocks = _BLOCK.findall(PAGE.read_text(encoding="utf-8"))
    pairs = []
    for (lang, code), (next_lang, output) in zip(blocks, blocks[1:], strict=False):
        if lang == "python" and next_lang != "python":
            pairs.append((code, output))
    return pairs


def test_the_worked_example_prints_what_the_page_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = example()
    assert len(pairs) >= 4, "the worked example lost its blocks"
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for number, (code, shown) in enumerate(pairs, 1):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"docs/reference/codec.md, example block {number}", "exec"),
                 namespace)  # fmt: skip
        assert out.getvalue() == shown, f"block {number} prints:\n{out.getvalue()}"


def test_the_import_block_is_the_module() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "```python\nfrom reference.quant import codec\n```" in text


def test_the_page_names_every_public_function() -> None:
    """Every function and class of ``codec.__all__`` appears on the page as code."""
    text = PAGE.read_text(encoding="utf-8")
    missing = [name for name in codec.__all__
               if callable(getattr(codec, name)) and f"`{name}" not in text
               and f"codec.{name}" not in text]  # fmt: skip
    assert missing == []


def test_the_old_import_path_is_named_and_gone() -> None:
    """The page names the module's old path, which no longer imports."""
    assert "`reference.codec`" in PAGE.read_text(encoding="utf-8")
    with pytest.raises(ModuleNotFoundError):
        __import__("reference.codec")
