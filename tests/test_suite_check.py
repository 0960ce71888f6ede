"""``conformance.run --suite``: a suite from a folder or an archive, checked before anything runs.

* a suite whose files are not the listed ones (a byte changed, a vector missing, an extra
  file in ``vectors/``, a link instead of a file, a schema changed) exits 2 naming the files and
  what was expected, and no loader is started (the loader would leave a marker file);
* a manifest of another version, or whose paths leave the suite, is refused;
* the published ``.tar.xz`` runs directly; an archive with an absolute name, ``..``, a link, a
  device, a name twice, too many members or too many bytes, or a truncated one, is refused
  with exit 2 before any loader runs;
* ``--loader c`` builds into a user cache folder when the package folder is read-only.
"""

from __future__ import annotations

import io
import json
import lzma
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from conformance import archive, run
from conformance import suite as suite_module

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conformance"
ARCHIVE = next((ROOT / "docs" / "assets").glob("awq2-conformance-*.tar.xz"))
MANIFEST = json.loads((CONF / "manifest.json").read_text(encoding="utf-8"))
SIZE = {v["file"]: v["size"] for v in MANIFEST["vectors"] if "file" in v}

pytestmark = pytest.mark.skipif(os.name != "posix", reason="sh loaders")


def _copy(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    for name in ("vectors", "schema"):
        shutil.copytree(CONF / name, suite / name)
    shutil.copyfile(CONF / "manifest.json", suite / "manifest.json")
    return suite


def _marker_loader(tmp_path: Path) -> tuple[str, Path]:
    """A loader that leaves a marker file when it is started at all."""
    marker = tmp_path / "ran"
    script = tmp_path / "marker.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n", encoding="utf-8")
    script.chmod(0o755)
    return f"marker={script} {{file}}", marker


def _refused(tmp_path: Path, suite: Path, capsys: pytest.CaptureFixture[str]) -> str:
    loader, marker = _marker_loader(tmp_path)
    status = run.main(["--quiet", "--suite", str(suite), "--loader", loader])
    assert status == 2
    assert not marker.exists(), "a loader ran on a refused suite"
    return capsys.readouterr().err


# ------------------------------------------------------------------------------ folders


def test_a_copy_of_the_suite_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _copy(tmp_path)
    report = tmp_path / "report.json"
    argv = ["--quiet", "--suite", str(suite), "--only", "^(y_sample|n_bad_magic)$"]
    assert run.main([*argv, "--report-json", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("AWQ-v2 conformance suite 3.2.0 (spec 2.1): ")
    doc = json.loads(report.read_text(encoding="utf-8"))
    assert (doc["suite_version"], doc["spec_version"]) == ("3.2.0", "2.1")
    assert sorted(o["vector"] for o in doc["outcomes"]) == ["n_bad_magic", "y_sample"]


def test_one_changed_byte_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _copy(tmp_path)
    path = suite / "vectors" / "y_sample.awq2"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    err = _refused(tmp_path, suite, capsys)
    assert "(1 file); nothing was run" in err
    want = next(v["sha256"] for v in MANIFEST["vectors"] if v["id"] == "y_sample")
    assert f"vectors/y_sample.awq2: sha256 expected {want}, found " in err


def test_missing_extra_and_linked_files_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = _copy(tmp_path)
    (suite / "vectors" / "n_bad_magic.awq2").unlink()
    (suite / "vectors" / "x_extra.awq2").write_bytes(b"extra")
    (suite / "vectors" / "y_sample.awq2").unlink()
    (suite / "vectors" / "y_sample.awq2").symlink_to(CONF / "vectors" / "y_sample.awq2")
    (suite / "schema" / "manifest.schema.json").write_text("{}", encoding="utf-8")
    err = _refused(tmp_path, suite, capsys)
    assert "(4 files)" in err
    assert "vectors/n_bad_magic.awq2: missing" in err
    assert "vectors/x_extra.awq2: not listed in the manifest" in err
    assert "vectors/y_sample.awq2: cannot be opened as a regular file" in err
    size = next(f["size"] for f in MANIFEST["files"] if f["path"] == "schema/manifest.schema.json")
    assert f"schema/manifest.schema.json: size expected {size} bytes, found 2" in err


def test_many_problems_name_five_and_count_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = _copy(tmp_path)
    shutil.rmtree(suite / "vectors")
    err = _refused(tmp_path, suite, capsys)
    count = sum(len(suite_module.vector_files(v)) for v in MANIFEST["vectors"])
    assert f"({count} files)" in err and f"... and {count - 5} more" in err
    assert err.count(": missing") == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"manifest_version": 1}, "manifest_version expected 3, found 1"),
        ({"suite_version": 1}, "suite_version expected a string"),
        ({"files": [{"path": "../x", "size": 0, "sha256": "0" * 64}]}, "files[0] expected path"),
        ({"files": [{"path": "/etc/passwd", "size": 0, "sha256": "0" * 64}]}, "files[0]"),
        ({"vectors": [{**MANIFEST["vectors"][0], "file": "vectors/../../x"}]}, "vectors[0]"),
        ({"vectors": [{**MANIFEST["vectors"][0], "size": -1}]}, "vectors[0]"),
        ({"vectors": MANIFEST["vectors"][:1] * 2}, "vector ids expected unique"),
        ({"vectors": [{**MANIFEST["vectors"][0], "expect": "maybe"}]}, "expected expect"),
        ({"vectors": [{**MANIFEST["vectors"][0], "content": None}]}, "and content"),
    ],
)
def test_malformed_manifests_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, message: str
) -> None:
    suite = _copy(tmp_path)
    (suite / "manifest.json").write_text(json.dumps({**MANIFEST, **change}), encoding="utf-8")
    assert message in _refused(tmp_path, suite, capsys)


def test_no_suite_there(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "no such folder or archive" in _refused(tmp_path, tmp_path / "nothing", capsys)
    assert "cannot read the manifest" in _refused(tmp_path, tmp_path, capsys)


# ------------------------------------------------------------------------------ archives


def test_the_published_archive_runs_directly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--quiet", "--suite", str(ARCHIVE), "--only", "^(y_sample|n_bad_magic)$"]
    assert run.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("AWQ-v2 conformance suite 3.2.0 (spec 2.1): ")
    assert "reference: y_ 1/1, n_ 1/1; 2 passed, 0 failed" in out


def _tar_xz(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    path.write_bytes(lzma.compress(raw.getvalue()))
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([_file("/abs/manifest.json")], "expected a relative name"),
        ([_file("top/../../escape")], "expected a relative name"),
        ([_file("top/./x")], "expected a relative name"),
        ([_special("top/link", tarfile.SYMTYPE, "/etc/passwd")], "expected a regular file"),
        ([_special("top/hard", tarfile.LNKTYPE, "top/x")], "expected a regular file"),
        ([_special("top/dev", tarfile.CHRTYPE)], "expected a regular file"),
        ([_special("top/fifo", tarfile.FIFOTYPE)], "expected a regular file"),
        ([_file("top/x"), _file("top/x")], "twice in the archive"),
        ([_file("top/x")], "no manifest.json at the top"),
    ],
)
def test_unsafe_archives_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], members: list, message: str
) -> None:
    path = _tar_xz(tmp_path / "bad.tar.xz", members)
    err = _refused(tmp_path, path, capsys)
    assert message in err
    assert not (tmp_path.parent / "escape").exists()


def test_archive_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archive, "MAX_MEMBERS", 3)
    many = _tar_xz(tmp_path / "many.tar.xz", [_file(f"top/{i}") for i in range(4)])
    assert "more than 3 members" in _refused(tmp_path, many, capsys)
    monkeypatch.setattr(archive, "MAX_BYTES", 1 << 20)
    big = _tar_xz(tmp_path / "big.tar.xz", [_file("top/zeros", bytes(2 << 20))])
    assert "more than 1 MiB" in _refused(tmp_path, big, capsys)


def test_truncated_and_foreign_archives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(ARCHIVE.read_bytes()[: ARCHIVE.stat().st_size // 2])
    assert "the xz stream ends early" in _refused(tmp_path, cut, capsys)
    other = tmp_path / "other.tar.xz"
    other.write_bytes(b"PK\x03\x04 not xz")
    assert "not a readable .tar.xz archive" in _refused(tmp_path, other, capsys)


def test_a_changed_archive_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The archive unpacks, but one vector differs by one byte: refused by the file check."""
    suite = _copy(tmp_path)
    path = suite / "vectors" / "n_bad_magic.awq2"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x80
    path.write_bytes(bytes(data))
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    for p in sorted(suite.rglob("*")):
        if p.is_file():
            members.append(_file(f"top/{p.relative_to(suite).as_posix()}", p.read_bytes()))
    err = _refused(tmp_path, _tar_xz(tmp_path / "changed.tar.xz", members), capsys)
    assert "vectors/n_bad_magic.awq2: sha256 expected" in err


# ------------------------------------------------------------------------------ the C loader


def test_c_loader_builds_into_the_cache_when_the_package_is_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "adapters-c"
    package.mkdir()
    monkeypatch.setattr(run, "C_BINARY", package / "build" / "awq2c")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert run.c_binary() == package / "build" / "awq2c"  # writable: its build/ folder
    package.chmod(0o555)
    try:
        cached = run.c_binary()
        assert cached.parent.parent == tmp_path / "cache" / "awq-v2" / "c-loader"
        assert len(cached.parent.name) == 16 and cached.name == "awq2c"
        monkeypatch.setenv("CC", "cc -DAWQ2_OTHER_COMPILER_COMMAND")
        assert run.c_binary() != cached  # the digest covers the compiler command
    finally:
        package.chmod(0o755)


def test_set_folders_are_checked_file_by_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A set vector's folder must hold exactly its listed files, each as listed, and be a
    folder, not a link to one (nothing outside the suite is opened)."""
    suite = _copy(tmp_path)
    split = suite / "vectors" / "y_set_split"
    (split / "model-00004-of-00003.awq2").write_bytes(b"extra")
    (split / "model.awq2.set.json").write_text("{}", encoding="utf-8")
    rank = suite / "vectors" / "y_set_rank_tp2"
    shutil.rmtree(rank)
    rank.symlink_to(CONF / "vectors" / "y_set_rank_tp2")
    found = suite_module.problems(suite_module.load(suite))
    assert "vectors/y_set_split/model-00004-of-00003.awq2: not listed in the manifest" in found
    assert any(
        p.startswith("vectors/y_set_split/model.awq2.set.json: size expected") for p in found
    )
    assert "vectors/y_set_rank_tp2: not a folder" in found
    assert "vectors/y_set_rank_tp2/model-tp2-rank0.awq2: in a folder that is a link" in found
    assert len(found) == 3 + len(list(rank.iterdir())), found
    assert "nothing was run" in _refused(tmp_path, suite, capsys)


def test_a_folder_vector_must_list_plain_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = _copy(tmp_path)
    doc = json.loads((suite / "manifest.json").read_text(encoding="utf-8"))
    vector = next(v for v in doc["vectors"] if v["id"] == "y_set_split")
    vector["folder_files"][0]["name"] = "../y_sample.awq2"
    (suite / "manifest.json").write_text(json.dumps(doc), encoding="utf-8")
    err = _refused(tmp_path, suite, capsys)
    assert "expected folder (a name under vectors/) and folder_files" in err
