"""The downloadable suite (``docs/assets/awq2-conformance-<version>.tar.xz``) and its version.

* the committed archive holds exactly the committed manifest, vectors and schemas, byte for
  byte, under one top folder, with the fixed member metadata the site promises;
* its ``.sha256`` is the ``sha256sum`` line of the archive;
* no other version's archive is left in ``docs/assets/``;
* the suite's files match the digest recorded for ``SUITE_VERSION`` (``releases.json``), a
  changed file is reported with the command that records a new version, and recording refuses
  to change a recorded version unless ``--amend``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import lzma
import shutil
import tarfile
from pathlib import Path

import pytest

from conformance import suite
from tools.vectors import generate, releases

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conformance"
ASSETS = ROOT / "docs" / "assets"
MANIFEST = json.loads((CONF / "manifest.json").read_text(encoding="utf-8"))
VERSION = MANIFEST["suite_version"]
TOP = f"awq2-conformance-{VERSION}"
ARCHIVE = ASSETS / f"{TOP}.tar.xz"


def _committed_suite() -> dict[str, bytes]:
    """The suite as committed in conformance/: the manifest, every vector (a set vector's
    folder: every file in it), every schema."""
    files = {"manifest.json": (CONF / "manifest.json").read_bytes()}
    for folder, pattern in (("vectors", "*.awq2"), ("vectors", "*/*"), ("schema", "*.json")):
        for path in sorted((CONF / folder).glob(pattern)):
            files[path.relative_to(CONF).as_posix()] = path.read_bytes()
    return files


def _members() -> list[tarfile.TarInfo]:
    with tarfile.open(ARCHIVE, mode="r:xz") as tar:
        return tar.getmembers()


def test_archive_holds_exactly_the_committed_suite() -> None:
    want = _committed_suite()
    vector_files = sum(len(suite.vector_files(v)) for v in MANIFEST["vectors"])
    assert len(want) == vector_files + len(MANIFEST["files"]) + 1
    got: dict[str, bytes] = {}
    with tarfile.open(ARCHIVE, mode="r:xz") as tar:
        for member in tar.getmembers():
            if member.isfile():
                data = tar.extractfile(member)
                assert data is not None
                got[member.name] = data.read()
    assert sorted(got) == sorted(f"{TOP}/{name}" for name in want)
    for name, data in want.items():
        assert got[f"{TOP}/{name}"] == data, name


def test_archive_members_are_sorted_with_fixed_metadata() -> None:
    members = _members()
    names = [m.name for m in members]
    assert names == sorted(names)
    assert {n for n in names if "/" not in n} == {TOP}
    set_folders = {f"{TOP}/{v['folder']}" for v in MANIFEST["vectors"] if "folder" in v}
    assert {m.name for m in members if m.isdir()} == {
        TOP,
        f"{TOP}/schema",
        f"{TOP}/vectors",
        *set_folders,
    }
    for m in members:
        assert m.isdir() or m.isfile(), m.name
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname) == (0, 0, 0, "", ""), m.name
        assert m.mode == (0o755 if m.isdir() else 0o644), m.name


def test_archive_is_xz() -> None:
    data = ARCHIVE.read_bytes()
    assert data.startswith(b"\xfd7zXZ\x00")  # the xz magic
    assert len(lzma.decompress(data)) % 512 == 0  # a tar stream is whole 512-byte records


def test_sha256_file_is_a_sha256sum_line_of_the_archive() -> None:
    line = (ASSETS / f"{TOP}.tar.xz.sha256").read_text(encoding="ascii")
    assert line == f"{hashlib.sha256(ARCHIVE.read_bytes()).hexdigest()}  {TOP}.tar.xz\n"


def test_only_the_current_version_is_in_the_assets() -> None:
    found = sorted(p.name for p in ASSETS.glob("awq2-conformance-*"))
    assert found == [f"{TOP}.tar.xz", f"{TOP}.tar.xz.sha256"]


# ------------------------------------------------------------------------------ versions


def test_manifest_versions() -> None:
    assert MANIFEST["manifest_version"] == 3
    assert MANIFEST["suite_version"] == generate.SUITE_VERSION == "3.2.0"
    assert MANIFEST["spec_version"] == "2.1"  # spec/constants.py: SPEC_VERSION
    assert "format_version" not in MANIFEST


def test_committed_suite_matches_the_recorded_digest() -> None:
    assert releases.check(VERSION, _committed_suite()) == ""


def test_digest_is_sha256sum_of_the_sorted_files() -> None:
    files = {"b": b"2", "a": b"1"}
    lines = "".join(f"{hashlib.sha256(d).hexdigest()}  {p}\n" for p, d in sorted(files.items()))
    assert releases.digest(files) == hashlib.sha256(lines.encode()).hexdigest()


def test_a_changed_suite_asks_for_a_new_version() -> None:
    files = _committed_suite()
    files["vectors/n_bad_magic.awq2"] += b"\0"
    why = releases.check(VERSION, files)
    assert why.startswith("the suite's files changed: bump SUITE_VERSION in ")
    assert "tools/vectors/generate.py" in why
    assert "python -m tools.vectors.generate --record-release" in why
    assert "not recorded" in releases.check("9.9.9", files)


def test_recording_refuses_to_change_a_recorded_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(releases, "RELEASES", tmp_path / "releases.json")
    assert releases.record("1.0.0", {"a": b"1"}) == 0
    assert releases.record("1.0.0", {"a": b"1"}) == 0  # the same digest: nothing to do
    assert releases.record("1.0.0", {"a": b"2"}) == 1
    assert releases.recorded() == {"1.0.0": releases.digest({"a": b"1"})}
    assert releases.record("1.0.0", {"a": b"2"}, amend=True) == 0
    assert releases.record("1.1.0", {"a": b"3"}) == 0
    assert releases.recorded() == {
        "1.0.0": releases.digest({"a": b"2"}),
        "1.1.0": releases.digest({"a": b"3"}),
    }


# ------------------------------------------------------------------------------ the site check


def _check_site():
    spec = importlib.util.spec_from_file_location("check_site", ROOT / ".ci" / "check_site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_site_check_compares_the_built_download_with_the_committed_one(tmp_path: Path) -> None:
    check_site = _check_site()
    assets = tmp_path / "assets"
    assets.mkdir()
    for path in ASSETS.glob("awq2-conformance-*"):
        shutil.copyfile(path, assets / path.name)
    assert check_site.check_download(tmp_path, None) == (2, [])
    data = bytearray((assets / ARCHIVE.name).read_bytes())
    data[100] ^= 1
    (assets / ARCHIVE.name).write_bytes(bytes(data))
    (assets / "awq2-conformance-0.9.0.tar.xz").write_bytes(b"old")
    (assets / f"{ARCHIVE.name}.sha256").unlink()
    _, problems = check_site.check_download(tmp_path, None)
    assert sorted(problems) == [
        "assets/awq2-conformance-0.9.0.tar.xz: on the site, not committed",
        f"assets/{ARCHIVE.name}.sha256: committed, missing from the site",
        f"assets/{ARCHIVE.name}: differs from docs/assets/{ARCHIVE.name}",
    ]
