"""Repository tools: the generators of the site and the vectors, and the fuzzer.

Not installed (``pyproject.toml`` lists ``spec``, ``reference`` and ``conformance`` only):
these modules write into the repository, so they run from its root with ``python -m``.
They stand at the end of the dependency chain, ``spec`` <- ``reference`` <- ``conformance``
<- ``tools``, and may import all three; nothing imports them.

``python -m tools.regen``
    rewrite every generated file (the docs' generated regions, the codec tables, the site
    parts, the traceability page, the conformance vectors and manifest); ``--check`` writes
    nothing and exits 1 naming each stale file.
``python -m tools.fuzz``
    fuzz the reference reader with mutated vectors.
``python -m tools.fuzz.libfuzzer``, ``python -m tools.fuzz.atheris_reader``
    coverage-guided fuzzing of the C loader (libFuzzer, ASan, UBSan) and of the reference
    reader (atheris), seeded with every vector.
``python -m tools.c_coverage``
    line coverage of the C loader by the vectors alone and with fuzz corpora (gcov).
``python -m tools.kaitai``
    compile ``spec/awq2.ksy`` (the Kaitai Struct description, which ``tools.regen`` writes)
    with the pinned npm compiler and compare its Python parser with the reference on every
    must-accept vector.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root (this folder's parent): generated files are written under it.
ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
