"""Regenerate every generated file: ``python -m tools.regen [--check]``.

One command for everything the repository generates, in dependency order:

1. the conformance vectors and ``conformance/manifest.json`` (:mod:`tools.vectors.generate`);
   a ``conformance/vectors/*.awq2`` file the generator no longer makes is stale too;
2. every page under ``docs/``: the spec regions (:mod:`tools.docgen`), the codec tables of
   ``docs/spec/codec.md`` (:mod:`tools.codec_tables`) and the site regions
   (:mod:`tools.sitegen`), applied one after the other to the same text;
3. ``docs/assets/file-map.svg`` (:mod:`tools.sitegen`) and ``docs/conformance/traceability.md``
   (:mod:`tools.traceability`);
4. the downloadable suite, ``docs/assets/awq2-conformance-<suite_version>.tar.xz`` and its
   ``.sha256`` (:mod:`tools.suite_archive`); another version's archive is stale;
5. the Kaitai Struct description ``spec/awq2.ksy`` and its copy for the site,
   ``docs/assets/awq2.ksy`` (:mod:`tools.kaitai.ksy`).

Then the suite's files are compared with the digest recorded for ``SUITE_VERSION``
(:mod:`tools.vectors.releases`): a suite that changed without a new version fails ``--check``
with the command that records it.

The pages are rendered from the manifest and vectors on disk, so the vectors come first.
Without ``--check`` the files whose bytes differ are rewritten in place (nothing else is
touched, no temporary file is made) and named.  With ``--check`` nothing is written: every
stale file is named on stderr and the exit status is 1 (the pages are then compared with
what the committed manifest gives; a stale manifest is reported itself).

Exit status: 0 fresh or rewritten, 1 stale (``--check``), 2 a malformed generated region.
The output depends only on the repository, so it is the same on every machine.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tools import ROOT, codec_tables, docgen, sitegen, suite_archive, traceability
from tools.docgen import DocgenError
from tools.kaitai import ksy
from tools.sitegen import SitegenError
from tools.vectors import generate, releases

CONFORMANCE = ROOT / "conformance"
VECTORS = CONFORMANCE / "vectors"
MANIFEST = CONFORMANCE / "manifest.json"


class RegenError(ValueError):
    """A page the generators cannot fill (a missing region): the message names it."""


@functools.lru_cache(maxsize=1)
def _vectors() -> list[generate.Vector]:
    return generate.all_vectors()


def suite_files() -> dict[str, bytes]:
    """Every file of the suite as generated, by its path under the suite."""
    return generate.suite_files(_vectors())


def vector_files() -> dict[Path, bytes | None]:
    """The suite's files with their bytes; ``None`` for a vector file to delete."""
    files: dict[Path, bytes | None] = {
        CONFORMANCE / name: data for name, data in generate.files(_vectors()).items()
    }
    for path in sorted(VECTORS.glob("*.awq2")):
        files.setdefault(path, None)
    return files


def render_page(path: Path) -> str:
    """A page with the regions of every generator filled in."""
    text = docgen.render_text(path.read_text(encoding="utf-8"), path)
    if path.resolve() == codec_tables.CHAPTER.resolve():
        text = codec_tables.render(text)
        found = codec_tables.regions_in(text)
        missing = [name for name in codec_tables.REGIONS if name not in found]
        if missing:
            raise RegenError(f"{path}: no markers for the regions {', '.join(missing)}")
    return sitegen.render_text(text, path)


def doc_files() -> dict[Path, bytes | None]:
    """Every generated page and picture under ``docs/`` with its bytes."""
    files: dict[Path, bytes | None] = {
        path: render_page(path).encode("utf-8") for path in docgen.doc_files()
    }
    files.update({path: draw().encode("utf-8") for path, draw in sitegen.PICTURES.items()})
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    files[traceability.OUTPUT] = traceability.render(manifest).encode("utf-8")
    return files


def archive_files() -> dict[Path, bytes | None]:
    """The downloadable suite and its .sha256; ``None`` for another version's."""
    return suite_archive.archive_files(generate.SUITE_VERSION, suite_files())


#: The steps, in order: each is rendered from what the steps before it wrote.
STEPS: tuple[Callable[[], dict[Path, bytes | None]], ...] = (
    vector_files,
    doc_files,
    archive_files,
    ksy.files,
)


def is_stale(path: Path, data: bytes | None) -> bool:
    if data is None:
        return path.exists()
    return not path.is_file() or path.read_bytes() != data


def _display(path: Path) -> str:
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.regen",
        description="Regenerate every generated file: the conformance vectors and manifest, "
        "the generated regions of docs/ (spec tables, codec tables, vector catalogue, CLI "
        "reference, walkthrough), docs/assets/file-map.svg, the traceability page and the "
        "downloadable suite (docs/assets/awq2-conformance-<version>.tar.xz and .sha256) and the "
        "Kaitai Struct description (spec/awq2.ksy, docs/assets/awq2.ksy); then "
        "check that the suite's files match the digest recorded for its version.",
        epilog="exit status: 0 fresh or rewritten, 1 stale or a changed suite without a new "
        "version (with --check), 2 malformed region",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 naming every stale file"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stale: list[Path] = []
    checked = 0
    try:
        for step in STEPS:
            for path, data in step().items():
                checked += 1
                if not is_stale(path, data):
                    continue
                stale.append(path)
                if args.check:
                    print(f"{_display(path)}: stale; run python -m tools.regen", file=sys.stderr)
                elif data is None:
                    path.unlink()
                    print(f"removed {_display(path)}")
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data)
                    print(f"wrote {_display(path)}")
    except (DocgenError, SitegenError, RegenError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    verb = "stale" if args.check else "rewritten"
    print(f"regen: {checked} files, {len(stale)} {verb}")
    unreleased = releases.check(generate.SUITE_VERSION, suite_files())
    if unreleased:
        print(f"{'error' if args.check else 'note'}: {unreleased}", file=sys.stderr)
    return 1 if args.check and (stale or unreleased) else 0


if __name__ == "__main__":
    raise SystemExit(main())
