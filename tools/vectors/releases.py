"""The suite's released versions: ``tools/vectors/releases.json``, version -> digest.

The digest of a suite is the sha256 of the text ``"<sha256>  <path>\\n"`` over its files (the
manifest, the vectors, the schemas: :func:`tools.vectors.generate.suite_files`) sorted by path,
the ``sha256sum`` format.  ``python -m tools.regen --check`` compares the suite's files with the
digest recorded for ``SUITE_VERSION`` (:func:`check`), so that a changed suite cannot keep the
version of the one published before it; ``python -m tools.vectors.generate --record-release``
records the digest (:func:`record`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

RELEASES = Path(__file__).resolve().parent / "releases.json"
RECORD_COMMAND = "python -m tools.vectors.generate --record-release"


def digest(files: dict[str, bytes]) -> str:
    """The sha256 over the sorted (sha256, path) lines of the suite's files."""
    lines = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {path}\n" for path, data in sorted(files.items())
    )
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def recorded() -> dict[str, str]:
    if not RELEASES.exists():
        return {}
    return dict(json.loads(RELEASES.read_text(encoding="utf-8")))


def check(version: str, files: dict[str, bytes]) -> str:
    """Why the suite's files do not match the record for ``version``, or ``""``."""
    want = recorded().get(version)
    if want is None:
        return (
            f"suite version {version} is not recorded in {RELEASES.name}: record it with "
            f"{RECORD_COMMAND}"
        )
    if want != digest(files):
        return (
            f"the suite's files changed: bump SUITE_VERSION in tools/vectors/generate.py "
            f"(now {version}, recorded with digest {want[:12]}...) and record it with "
            f"{RECORD_COMMAND}"
        )
    return ""


def record(version: str, files: dict[str, bytes], amend: bool = False) -> int:
    """Record the digest of ``files`` for ``version``; refuse to change a recorded one unless
    ``amend``.  Exit status: 0 recorded or already so, 1 refused."""
    releases = recorded()
    new = digest(files)
    old = releases.get(version)
    if old == new:
        print(f"suite {version}: already recorded ({new})")
        return 0
    if old is not None and not amend:
        print(
            f"error: suite {version} is recorded with another digest ({old}); bump "
            "SUITE_VERSION in tools/vectors/generate.py, or pass --amend if this version "
            "was never published",
            file=sys.stderr,
        )
        return 1
    releases[version] = new
    RELEASES.write_text(json.dumps(releases, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"suite {version}: recorded {new} in {RELEASES.name}")
    return 0
