"""One source guard (issue 38, items 1 and 14): every file a SRC consists of (its folder, its
manifest, its members, links resolved) is checked against DST in every form that names it,
and a DST that would replace, delete or join the source is refused before anything is
written [CONV-2, SET-8]."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

import reference
from reference.convert import convert_folder
from reference.convert import main as convert_main
from reference.examples import LlamaShape, write_checkpoint
from spec.constants import SET_MANIFEST


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("guard")
    src = write_checkpoint(root / "ckpt", LlamaShape())
    out = {"ckpt": src}
    for name, options in {"file": {}, "split": {"max_shard_size": 400_000},
                          "tp2": {"tp_size": 2}}.items():  # fmt: skip
        out[name] = root / name
        convert_folder(src, out[name], jobs=2, **options)
    return out


def _tree(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}  # fmt: skip


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    status = convert_main([*argv, "--quiet", "--jobs", "1"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and err.count("\n") == 1, err
    return err


def _members(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.awq2"))


@pytest.mark.parametrize("layout", ["split", "tp2"])
@pytest.mark.parametrize("form", ["manifest", "folder"])
def test_a_member_of_the_source_set_is_never_overwritten(
    made: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    layout: str,
    form: str,
) -> None:
    """Item 1: ``SET/model.awq2.set.json SET/<member>.awq2 --overwrite`` replaced a member of
    its own source set with the whole model; refused whether SRC names the folder or the
    manifest."""
    src = Path(shutil.copytree(made[layout], tmp_path / "set"))
    before = _tree(src)
    member = _members(src)[-1]
    given = src / SET_MANIFEST if form == "manifest" else src
    err = _refused([str(given), str(member), "--overwrite"], capsys)
    assert str(member) in err and "source" in err, err
    assert _tree(src) == before
    with reference.open(src) as opened:
        opened.verify()


@pytest.mark.parametrize("form", ["manifest", "folder"])
def test_a_new_file_inside_the_source_set_folder_is_refused(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """Item 14: ``SET/ SET/joined.awq2`` exited 0 and left its source invalid
    (SET_EXTRA_FILE): a new .awq2 inside a set folder joins the set."""
    src = Path(shutil.copytree(made["tp2"], tmp_path / "set"))
    before = _tree(src)
    given = src / SET_MANIFEST if form == "manifest" else src
    dst = src / "joined.awq2"
    err = _refused([str(given), str(dst)], capsys)
    assert str(dst) in err and "set" in err, err
    assert _tree(src) == before
    with reference.open(src) as opened:
        opened.verify()


def test_a_new_file_in_the_set_folder_reached_through_a_link_is_refused(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = Path(shutil.copytree(made["split"], tmp_path / "set"))
    (tmp_path / "alias").symlink_to(src)
    _refused([str(src), str(tmp_path / "alias" / "joined.awq2")], capsys)
    assert not (src / "joined.awq2").exists()


def test_a_destination_that_is_a_link_to_a_member_is_refused(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = Path(shutil.copytree(made["tp2"], tmp_path / "set"))
    before = _tree(src)
    link = tmp_path / "out.awq2"
    link.symlink_to(_members(src)[0])
    _refused([str(src / SET_MANIFEST), str(link), "--overwrite"], capsys)
    assert _tree(src) == before and link.is_symlink()


def test_a_member_that_is_a_link_is_guarded_at_its_target(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A member that links elsewhere (a Hub cache's blobs): DST naming the target is
    refused, and so is a folder DST holding it."""
    src = Path(shutil.copytree(made["tp2"], tmp_path / "set"))
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    member = _members(src)[1]
    target = blobs / "blob.awq2"
    shutil.move(member, target)
    member.symlink_to(target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    _refused([str(src), str(target), "--overwrite"], capsys)
    _refused([str(src), str(blobs), "--overwrite"], capsys)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == digest


def test_the_source_file_itself_and_its_model_folder_are_guarded(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = Path(shutil.copytree(made["file"], tmp_path / "served"))
    before = _tree(src)
    _refused([str(src / "model.awq2"), str(src / "model.awq2"), "--overwrite"], capsys)
    _refused([str(src), str(src / "model.awq2"), "--overwrite"], capsys)
    _refused([str(src), str(src), "--overwrite"], capsys)
    assert _tree(src) == before


def test_resharding_beside_the_source_still_works(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the guard lets through: a DST outside the set folder."""
    src = Path(shutil.copytree(made["tp2"], tmp_path / "set"))
    assert convert_main([str(src / SET_MANIFEST), str(tmp_path / "joined.awq2"), "--quiet"]) == 0
    assert convert_main([str(made["ckpt"]), str(tmp_path / "direct.awq2"), "--quiet"]) == 0
    assert (tmp_path / "joined.awq2").read_bytes() == (tmp_path / "direct.awq2").read_bytes()
