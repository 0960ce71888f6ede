"""Coverage-guided fuzzing of the reference reader with atheris: ``python -m
tools.fuzz.atheris_reader``.

Usage::

    python -m tools.fuzz.atheris_reader [--seconds S | --runs N] [--corpus DIR]
                                        [--artifacts DIR] [--log FILE] [--seed K]

atheris (``pip install -e ".[fuzz]"``) is libFuzzer for Python: it traces the branches of the
``reference`` and ``spec`` modules and keeps the inputs that reach new ones.  The seeds are
every vector of ``conformance/manifest.json``; the flags, the figures printed and the exit
status are those of ``python -m tools.fuzz.libfuzzer`` (the C loader's target), whose driver
this reuses.

Each input is written to a file and goes through :func:`tools.fuzz.target.exercise`, the
reader path of ``python -m tools.fuzz`` (``reference.open``, ``validate()``, every lookup,
tensor and layer, ``verify()``), with its judgement: ``FormatError`` (or ``KeyError`` for a
name that is not there) is an expected outcome, anything else escapes and is a finding.

The mutator: libFuzzer's own mutation of the whole file or of one of its regions (the
header, the index sections, the trailer: :meth:`tools.fuzz.view.FileView.regions`), then,
seven times in eight, the checksums rewritten (:func:`tools.fuzz.awq2.refresh`), so that the
mutations get past the CRCs into the deep checks.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tools.fuzz.libfuzzer import DICTIONARY, add_run_options, budget_flags, finish, run


def _child(flags: list[str]) -> None:
    """Run inside atheris: the reference instrumented, then libFuzzer's loop (never returns)."""
    import atheris

    with atheris.instrument_imports(include=["reference", "spec"]):
        import reference
        import reference.format.validate  # noqa: F401
    from tools.fuzz.awq2 import refresh
    from tools.fuzz.mutant import Mutant
    from tools.fuzz.target import State, exercise
    from tools.fuzz.view import FileView
    from tools.vectors.surgery import FileEditor

    scratch = Path(tempfile.mkdtemp(prefix="awq2-atheris-"))
    path = scratch / "input.awq2"

    def test_one(data: bytes) -> None:
        path.write_bytes(data)
        exercise(path, (), State())  # only FormatError / KeyError are caught there

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        regions = FileView.of(bytearray(data)).regions() if rng.random() < 0.7 else []
        if regions:
            a, b = rng.choice(regions)
            a, b = max(0, min(a, len(data))), max(0, min(b, len(data)))
            part = atheris.Mutate(data[a:b], max(b - a, 1))
            data = data[:a] + part + data[b:]
        else:
            data = atheris.Mutate(data, max_size)
        if rng.random() < 7 / 8:
            m = Mutant(FileEditor(data), rng, ())
            refresh(m)
            data = bytes(m.data)
        return data[:max_size]

    atheris.Setup([sys.argv[0], *flags], test_one, custom_mutator=mutate)
    atheris.Fuzz()


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--child"]:
        _child(args_in[1:])
        return 0
    p = argparse.ArgumentParser(
        prog="python -m tools.fuzz.atheris_reader",
        description="Fuzz the reference reader with atheris (coverage-guided), seeded with "
        "every conformance vector; print executions, exec/s, corpus, coverage and findings.",
    )
    add_run_options(p)
    args = p.parse_args(args_in)
    try:
        import atheris  # noqa: F401
    except ImportError:
        print('atheris is not installed: pip install -e ".[fuzz]"')
        return 2
    with tempfile.TemporaryDirectory(prefix="awq2-atheris-run-") as scratch:
        corpus = args.corpus or Path(scratch) / "corpus"
        artifacts = args.artifacts or corpus.parent / "artifacts"
        artifacts.mkdir(parents=True, exist_ok=True)
        log = args.log or artifacts / "atheris.log"
        command = [sys.executable, "-m", "tools.fuzz.atheris_reader", "--child"]
        stats = run(command, corpus, artifacts, log, budget_flags(args), [f"-dict={DICTIONARY}"])
        return finish(stats, "atheris (reference reader)", artifacts, log)


if __name__ == "__main__":
    sys.exit(main())
