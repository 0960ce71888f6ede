"""The downloadable suite: ``docs/assets/awq2-conformance-<suite_version>.tar.xz`` and its
``.sha256``, written by ``python -m tools.regen``.

Deterministic, so that ``regen --check`` can compare bytes: Python's ``tarfile`` (ustar format)
compressed by ``lzma`` (xz, preset 9, CRC-64 check), members sorted by name under one top folder
``awq2-conformance-<version>/`` (``manifest.json``, ``schema/``, ``vectors/``), mtime 0,
uid/gid 0 with empty owner names, mode 0755 for folders and 0644 for files.  The ``.sha256``
file is one ``sha256sum`` line, so ``sha256sum -c`` checks a download.  An archive of another
version left in ``docs/assets/`` is stale (deleted by regen).
"""

from __future__ import annotations

import hashlib
import io
import lzma
import tarfile
from pathlib import Path

from tools import ROOT

ASSETS = ROOT / "docs" / "assets"
PREFIX = "awq2-conformance-"
SUFFIX = ".tar.xz"


def archive_name(version: str) -> str:
    return f"{PREFIX}{version}{SUFFIX}"


def _info(name: str, size: int, folder: bool) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if folder else tarfile.REGTYPE
    info.size = 0 if folder else size
    info.mode = 0o755 if folder else 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def archive_bytes(version: str, files: dict[str, bytes]) -> bytes:
    """The .tar.xz of ``files`` (path under the suite -> bytes) for suite ``version``."""
    top = f"{PREFIX}{version}"
    folders = {top} | {f"{top}/{p.rsplit('/', 1)[0]}" for p in files if "/" in p}
    members = {name: None for name in folders} | {f"{top}/{p}": d for p, d in files.items()}
    tar_data = io.BytesIO()
    with tarfile.open(fileobj=tar_data, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(members):
            data = members[name]
            if data is None:
                tar.addfile(_info(name, 0, folder=True))
            else:
                tar.addfile(_info(name, len(data), folder=False), io.BytesIO(data))
    return lzma.compress(
        tar_data.getvalue(), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9
    )


def archive_files(version: str, files: dict[str, bytes]) -> dict[Path, bytes | None]:
    """The archive and its .sha256 for ``version``; ``None`` for another version's files."""
    name = archive_name(version)
    data = archive_bytes(version, files)
    line = f"{hashlib.sha256(data).hexdigest()}  {name}\n"
    out: dict[Path, bytes | None] = {
        ASSETS / name: data,
        ASSETS / f"{name}.sha256": line.encode("ascii"),
    }
    for old in sorted(ASSETS.glob(f"{PREFIX}*")):
        out.setdefault(old, None)
    return out
