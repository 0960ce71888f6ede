"""Issue 29: a rank set's members record their own rank [SET-15], and the points the spec 2.1
text left to guess (issue 29 B), checked in both loaders where the suite cannot show them: a
symbolic link as a member or as a stray file, dot-files and sub-folders named ``*.awq2``
[SET-5, SET-8], and where each error points [RD-7]."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference
from conformance import run
from reference.format.layers import StoredTensor
from reference.ground.errors import FormatError
from reference.sets.fileset import FileSet
from reference.sets.setmanifest import rank_record
from reference.sets.setwriter import RankSetWriter
from spec.constants import SET_MANIFEST, SET_RANK_KEY
from tools.vectors.surgery import FileEditor

ROOT = Path(__file__).resolve().parent.parent
CC = shlex.split(os.environ.get("CC") or "cc")
needs_cc = pytest.mark.skipif(shutil.which(CC[0]) is None, reason=f"no C compiler ({CC[0]})")


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("c-loader") / "awq2c"
    return run.build_c_loader(out, extra_flags=("-Werror",))


def _rank_set(folder: Path, tp_size: int, metadata: dict[str, Any] | None = None) -> Path:
    """A rank set written by the reference writer: the same tensor names in every rank."""
    folder.mkdir(parents=True)
    with RankSetWriter(folder, tp_size=tp_size, metadata=metadata) as writer:
        writer.add_ranks([[_stored(r)] for r in range(tp_size)])
    return folder


def _stored(rank: int) -> StoredTensor:
    return StoredTensor("w", np.full((4, 8), rank, np.float16), {})


def _manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / SET_MANIFEST).read_text(encoding="utf-8"))


def _write_manifest(folder: Path, doc: dict[str, Any]) -> None:
    (folder / SET_MANIFEST).write_text(json.dumps(doc), encoding="utf-8")


def _reference_code(folder: Path) -> str:
    try:
        with FileSet(folder) as s:
            s.verify()
    except FormatError as exc:
        return exc.code
    return "accept"


def _c_code(binary: Path, folder: Path) -> tuple[str, str]:
    proc = subprocess.run([str(binary), str(folder)], capture_output=True, text=True)
    if proc.returncode == 0:
        return "accept", ""
    return proc.stdout.split()[0] if proc.stdout else f"exit {proc.returncode}", proc.stdout


# ------------------------------------------------------------------ SET-15, SET-14


def test_rank_set_writer_records_each_members_rank(tmp_path: Path) -> None:
    """[SET-15] each member records its rank and the degree; [SET-14] the rest of the metadata
    is the same, and the set's metadata (the first member's) is given without a mismatch."""
    folder = _rank_set(tmp_path / "set", 2, {"note": "x"})
    for item in _manifest(folder)["files"]:
        with reference.open(folder / item["name"]) as member:
            assert member.metadata == {"note": "x", **rank_record(item["rank"], 2)}
    with FileSet(folder, validate=True) as s:
        s.verify()
        assert s.metadata == {"note": "x", SET_RANK_KEY: {"rank": 0, "tp_size": 2}}


def test_tp_size_lie_and_swapped_ranks_are_refused(tmp_path: Path) -> None:
    """Finding 16: ranks 0 and 1 of a conversion for 4 listed as a set for 2, and two files'
    rank numbers swapped, passed full validation; both are SET_WRONG_RANK [SET-15]."""
    four = _rank_set(tmp_path / "four", 4)
    lie = tmp_path / "lie"
    lie.mkdir()
    doc = _manifest(four)
    doc["tp_size"], doc["files"] = 2, doc["files"][:2]
    for item in doc["files"]:
        shutil.copy(four / item["name"], lie / item["name"])
    _write_manifest(lie, doc)
    swapped = _rank_set(tmp_path / "swapped", 2)
    doc = _manifest(swapped)
    doc["files"][0]["rank"], doc["files"][1]["rank"] = 1, 0
    _write_manifest(swapped, doc)
    for folder, named in ((lie, "model-tp4-rank0.awq2"), (swapped, "model-tp2-rank0.awq2")):
        with FileSet(folder) as s, pytest.raises(FormatError) as info:
            s.validate()
        assert info.value.code == "SET_WRONG_RANK" and named in str(info.value)


@needs_cc
def test_c_loader_refuses_the_same(binary: Path, tmp_path: Path) -> None:
    four = _rank_set(tmp_path / "four", 4)
    doc = _manifest(four)
    doc["tp_size"], doc["files"] = 2, doc["files"][:2]
    (four / "model-tp4-rank2.awq2").unlink()
    (four / "model-tp4-rank3.awq2").unlink()
    _write_manifest(four, doc)
    code, line = _c_code(binary, four)
    assert code == "SET_WRONG_RANK" and "model-tp4-rank0.awq2" in line


# ------------------------------------------------------------------ links and stray files


def _split(folder: Path) -> Path:
    folder.mkdir(parents=True)
    files = []
    for i in range(2):
        path = folder / f"m{i}.awq2"
        reference.save(path, {f"t{i}": np.ones((2, 3), np.float16)})
        data = path.read_bytes()
        files.append({"name": path.name, "size": len(data),
                      "header_crc": f"{int.from_bytes(data[124:128], 'little'):08x}",
                      "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    _write_manifest(folder, {"awq2_set": 1, "kind": "split", "files": files})
    return folder


def _cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Folders, and the code both loaders give: [SET-5] a member that is a link (followed), a
    dangling link, a loop of links; [SET-8] a stray link, dot-file, sub-folder named *.awq2,
    and a name in another case (not a stray)."""
    cases: dict[str, tuple[Path, str]] = {}

    def case(name: str, code: str) -> Path:
        folder = _split(tmp_path / name)
        cases[name] = (folder, code)
        return folder

    linked = case("member_link", "accept")
    blob = tmp_path / "blob.awq2"
    (linked / "m1.awq2").rename(blob)
    (linked / "m1.awq2").symlink_to(blob)
    dangling = case("member_dangling", "SET_MISSING_FILE")
    (dangling / "m1.awq2").unlink()
    (dangling / "m1.awq2").symlink_to(tmp_path / "nowhere.awq2")
    loop = case("member_loop", "SET_MISSING_FILE")
    (loop / "m1.awq2").unlink()
    (loop / "m1.awq2").symlink_to("m1.awq2")
    (case("stray_link", "SET_EXTRA_FILE") / "x.awq2").symlink_to(tmp_path / "nowhere")
    (case("stray_dot_file", "SET_EXTRA_FILE") / ".x.awq2").write_bytes(b"")
    (case("stray_folder", "SET_EXTRA_FILE") / "x.awq2").mkdir()
    (case("other_case", "accept") / "X.AWQ2").write_bytes(b"")
    return cases


def test_links_and_stray_files_in_the_reference(tmp_path: Path) -> None:
    for name, (folder, code) in _cases(tmp_path).items():
        assert _reference_code(folder) == code, name


@needs_cc
def test_links_and_stray_files_in_the_c_loader(binary: Path, tmp_path: Path) -> None:
    for name, (folder, code) in _cases(tmp_path).items():
        assert _c_code(binary, folder)[0] == code, name


# ------------------------------------------------------------------ offsets [RD-7]


def _vector(vid: str) -> Path:
    manifest = json.loads((ROOT / "conformance" / "manifest.json").read_text(encoding="utf-8"))
    v = next(v for v in manifest["vectors"] if v["id"] == vid)
    return ROOT / "conformance" / (v.get("folder") or v["file"])


def _reference_error(path: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "conformance.adapters.reference", str(path)],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    return dict(json.loads(proc.stdout)["error"])


def _metadata_start(path: Path) -> int:
    return FileEditor(path.read_bytes()).metadata_offset


def test_reference_offsets(tmp_path: Path) -> None:
    """[RD-7] a metadata checksum names the metadata's first byte, as the index and payload
    checksums name theirs; a manifest's error names no byte (null)."""
    path = _vector("n_metadata_checksum")
    assert _reference_error(path)["offset"] == _metadata_start(path)
    for vid in ("n_set_manifest_not_json", "n_set_manifest_too_deep", "n_set_version_2"):
        error = _reference_error(_vector(vid))
        assert error["offset"] is None, vid


@needs_cc
def test_c_offsets(binary: Path) -> None:
    """[RD-7] BAD_METADATA and LIMIT_METADATA name the metadata's first byte (the byte at
    fault is in the message); a manifest's error names the manifest and no byte."""
    for vid in ("n_metadata_duplicate_key", "n_metadata_nan", "n_metadata_deep_and_malformed"):
        path = _vector(vid)
        _, line = _c_code(binary, path)
        found = re.search(r" at offset (\d+)", line)
        assert found and int(found.group(1)) == _metadata_start(path), (vid, line)
    for vid in ("n_set_manifest_not_json", "n_set_size_negative", "n_set_version_2"):
        _, line = _c_code(binary, _vector(vid))
        assert f" in {SET_MANIFEST}:" in line and " at offset " not in line, (vid, line)


def _accept_document(command: list[str]) -> dict[str, Any]:
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout))


@needs_cc
def test_format_version_and_layer_layout(binary: Path) -> None:
    """[ADP-6] format_version is the header's major.minor; a layer's layout its family."""
    reference_adapter = [sys.executable, "-m", "conformance.adapters.reference"]
    for vid, version, family in (("y_unknown_minor_version", "2.7", "MARLIN"),
                                 ("y_awq_layout_n_not_64", "2.0", "AWQ")):  # fmt: skip
        for command in (reference_adapter, [str(binary)]):
            doc = _accept_document([*command, str(_vector(vid))])
            assert doc["format_version"] == version
            assert {layer["layout"] for layer in doc["layers"]} == {family}
