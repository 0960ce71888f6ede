"""The C loader's Makefile builds every source file of the loader: ``make`` is what an
outside reader of docs/conformance/c-loader.md runs, while CI and the runner compile
``*.c`` directly, so a file missing from ``SRC`` went unnoticed once (``rankrecord.c``: ``make``
failed to link)."""

from __future__ import annotations

import re
from pathlib import Path

C_DIR = Path(__file__).resolve().parents[1] / "conformance" / "adapters" / "c"


def test_the_makefile_lists_every_source_file():
    text = (C_DIR / "Makefile").read_text()
    (src,) = re.findall(r"^SRC = (.*)$", text, re.M)
    assert sorted(src.split()) == sorted(p.name for p in C_DIR.glob("*.c"))


def test_the_docs_table_names_every_source_file():
    docs = (C_DIR.parents[2] / "docs" / "conformance" / "c-loader.md").read_text()
    listed = set(re.findall(r"^\| `(\w+\.c)` \|", docs, re.M))
    assert listed == {p.name for p in C_DIR.glob("*.c")}
