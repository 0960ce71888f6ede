"""SET-17: a set member that is there but cannot be read, and a set folder that cannot be
listed, are no format errors: the reader refuses the set as an input it cannot read (no code
of the registry, never ``SET_MISSING_FILE``) and never accepts it.

No conformance vector can show this: the suite ships files, and permission bits do not travel
with them.  The tests below take away read permission where they can; run as root, permission
bits do not stop reads, so those tests skip (that reason only), and the same failures are made
by making the system calls fail (``os.open``, ``os.scandir``) for the reference, or by
running the C loader as an unprivileged user through ``setpriv`` where it is installed.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import reference
from conformance import run
from reference.sets.fileset import FileSet

ROOT = Path(__file__).resolve().parent.parent
SPLIT = ROOT / "conformance" / "vectors" / "y_set_split"
MEMBER = "model-00002-of-00003.awq2"
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
ROOT_REASON = "run as root: permission bits do not stop root's reads"
CC = shlex.split(os.environ.get("CC") or "cc")
NOBODY = 65534


@pytest.fixture
def world() -> Iterator[Path]:
    """A folder every user may enter (so that an unprivileged user can reach what it holds),
    removed afterwards whatever the permissions left in it."""
    folder = Path(tempfile.mkdtemp(prefix="awq2-unreadable-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            if path.is_dir():
                path.chmod(0o755)
        for path in (folder, *folder.rglob("*")):
            os.chmod(path, os.stat(path).st_mode | stat.S_IRUSR | stat.S_IWUSR | stat.S_IXUSR)
        shutil.rmtree(folder)


def copy_set(world: Path) -> Path:
    folder = world / "set"
    shutil.copytree(SPLIT, folder)
    for path in (folder, *folder.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def read_set(folder: Path) -> None:
    """Open, fully validate and verify the set [SET-8], as the reference adapter does."""
    with FileSet(folder, validate=True) as s:
        s.verify()


# ------------------------------------------------------------------ a member that cannot be read


@pytest.mark.skipif(AS_ROOT, reason=ROOT_REASON)
def test_an_unreadable_member_is_no_missing_file(world):
    """SET-17: a member without read permission is a PermissionError, not SET_MISSING_FILE."""
    folder = copy_set(world)
    (folder / MEMBER).chmod(0)
    with pytest.raises(PermissionError):
        read_set(folder)


def test_a_member_that_cannot_be_opened_is_no_missing_file(world, monkeypatch):
    """SET-17, whoever runs it: opening the member fails with EACCES (the call made to fail)."""
    folder = copy_set(world)
    real_open = os.open

    def refusing_open(path, *args, **kwargs):
        if os.fspath(path).endswith(MEMBER):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    with pytest.raises(OSError) as info:
        read_set(folder)
    assert not isinstance(info.value, reference.FormatError)
    assert info.value.errno == errno.EACCES


# ------------------------------------------------------------------ a folder that cannot be listed


@pytest.mark.skipif(AS_ROOT, reason=ROOT_REASON)
def test_a_folder_that_cannot_be_listed_is_refused(world):
    """SET-17: search permission without read permission: members open, the folder does not
    list, so no stray file can be ruled out and the set is refused."""
    folder = copy_set(world)
    folder.chmod(0o311)
    with pytest.raises(PermissionError):
        read_set(folder)


def test_a_folder_whose_listing_fails_is_refused(world, monkeypatch):
    """SET-17, whoever runs it: listing the folder fails with EACCES (the call made to fail)."""
    folder = copy_set(world)
    real_scandir = os.scandir

    def refusing_scandir(path="."):
        if Path(os.fspath(path)).resolve() == folder.resolve():
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", refusing_scandir)
    with pytest.raises(OSError):
        read_set(folder)


# ------------------------------------------------------------------ the C loader


def _unprivileged() -> list[str]:
    """The prefix that runs a command without root's override of permission bits."""
    if not AS_ROOT:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip(f"{ROOT_REASON}, and no setpriv to run the loader as another user")
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


@pytest.mark.parametrize("what", ["member", "folder"])
def test_the_c_loader_refuses_what_it_cannot_read(world, what):
    """SET-17 on the C loader: exit 3 (an input it cannot read), no reject line, for a member
    without read permission and for a folder it cannot list."""
    if shutil.which(CC[0]) is None:
        pytest.skip(f"no C compiler ({CC[0]})")
    prefix = _unprivileged()
    binary = run.build_c_loader(world / "awq2c", extra_flags=("-Werror",))
    binary.chmod(0o755)
    folder = copy_set(world)
    if what == "member":
        (folder / MEMBER).chmod(0)
    else:
        folder.chmod(0o311)
    proc = subprocess.run([*prefix, str(binary), str(folder)], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert proc.stdout == "" and "cannot read" in proc.stderr
    assert os.strerror(errno.EACCES) in proc.stderr
