"""A metadata edit of a file or of a whole set, published whole.

A file is rewritten by :mod:`reference.write.reindex`.  A set is replaced whole, never file by
file: it is fully validated first, then a new folder is built beside it (the partial folder
of a publishing transaction, :mod:`reference.write.publish`) holding every edited member,
written, verified and hashed, the new manifest with their sizes, header checksums and
SHA-256, and every other entry of the set's folder (a file hard-linked, or copied where the
file system refuses a link; a symbolic link made again with the same target).  The new set
is validated whole, then the two folders are exchanged in one step [SET-8].  One member of a
set is never edited alone: its manifest records its size and SHA-256 [SET-2, SET-5]."""

from __future__ import annotations

import errno
import json
import os
import shlex
import shutil
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from reference.format.metadata import parse_metadata
from reference.ground.errors import FormatError
from reference.ground.files import fsync_dir, open_regular
from reference.ground.hashing import sha256_of
from reference.sets.fileset import FileSet
from reference.sets.setmanifest import Manifest, parse_manifest
from reference.write.publish import Transaction, keep_owner, remove_stale, watch
from reference.write.reindex import Edited, NewMetadata, prepare
from spec.constants import MAX_METADATA_LENGTH, SET_MANIFEST

#: A hard link refused by the file system (or by protected_hardlinks): the file is copied.
_NO_LINK = (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK)


class EditRefused(ValueError):
    """An edit that will not be made: the message says why; nothing was written."""


@dataclass
class Outcome:
    """What an edit did: the manifest's kind (``"file"`` for a lone file), each file read and
    its new version (None: unchanged), and what of the old owner and group the new version
    could not keep (a user may give a file only a group it belongs to)."""

    kind: str
    done: list[tuple[Path, Edited | None]]
    not_kept: list[str] = field(default_factory=list)


def rewrite_file(path: Path, new_metadata: NewMetadata, *, verify: bool, dry_run: bool,
                 say: Callable[[str], object]) -> Outcome:  # fmt: skip
    """One file's metadata replaced by ``new_metadata``'s and the file published whole; a
    set's member is refused before anything is written (:func:`check_not_member`).  ``say``
    tells of a stale partial removed."""
    check_not_member(path)
    remove_stale(path, say)
    watched = watch(path)  # what the run starts from: a concurrent edit is refused at the end
    edited = prepare(path, new_metadata, verify=verify, write=not dry_run, watched=watched)
    not_kept: list[str] = []
    if edited is not None and not dry_run:
        edited.publish()
        not_kept = [] if edited.transaction is None else edited.transaction.not_kept
    return Outcome("file", [(path, edited)], not_kept)


def rewrite_set(folder: Path, new_metadata: NewMetadata, *, verify: bool, dry_run: bool,
                say: Callable[[str], object]) -> Outcome:  # fmt: skip
    """Every member of the set in ``folder`` given ``new_metadata``'s metadata, and its
    manifest rewritten: the edited set is built whole in a partial folder beside it, then
    the two folders are exchanged in one step [SET-8].  ``say`` tells of stale partials."""
    real = folder.resolve()
    if not dry_run:  # what a killed run left, whatever this run then finds to do
        remove_stale(real, say)
    watched = watch(real, real / SET_MANIFEST)  # what the run starts from [SET-2]
    with FileSet(folder, validate=True, max_open=1) as opened:  # [SET-8]
        manifest = opened.manifest
    planned = [(folder / m.name, prepare(folder / m.name, new_metadata, verify=False,
                                         write=False)) for m in manifest.members]  # fmt: skip
    if all(edited is None for _, edited in planned):
        return Outcome(manifest.kind, planned)
    check_replaceable(real, folder)
    if dry_run:
        return Outcome(manifest.kind, planned)
    for name in (*(m.name for m in manifest.members), SET_MANIFEST):
        remove_stale(folder / name, say)
    # the new set in a partial folder, exchanged with the old in one step [SET-8]
    with Transaction(real, folder=True, watched=watched, say=say) as publishing:
        assert publishing.tmp is not None
        done = _build_set(folder, publishing.tmp, manifest, new_metadata, verify=verify)
    return Outcome(manifest.kind, done, publishing.not_kept)


def member_of(path: Path) -> Path | None:
    """The manifest beside ``path`` that lists it among its files, or None [SET-2].  Read as
    far as a set's manifest is (a regular file, at most ``max_metadata_length`` bytes, its
    depth measured before parsing), of any version or kind; a manifest that is absent,
    unreadable or not JSON lists nothing: no set opens with it."""
    manifest = (path.parent if str(path.parent) else Path(".")) / SET_MANIFEST
    try:
        with open_regular(manifest) as f:
            raw = f.read(MAX_METADATA_LENGTH + 1)
        document = parse_metadata(raw, offset=0)
    except (OSError, FormatError):
        return None
    files = document.get("files")
    listed = files if isinstance(files, list) else []
    names = {item.get("name") for item in listed if isinstance(item, dict)}
    return manifest if path.name in names else None


def check_not_member(path: Path) -> None:
    """Refuse (:class:`EditRefused`) a set's member named as a file: its manifest records its
    size, header checksum and SHA-256 [SET-2, SET-5], so the member edited alone would leave a
    set that no longer opens.  The message gives the command that edits the whole set."""
    manifest = member_of(path)
    if manifest is not None:
        raise EditRefused(f"{path} is a member of the file set {manifest}: edited alone it "
                          "would no longer match the size and SHA-256 the manifest records, "
                          "and the set would not open; edit the set (every member and the "
                          f"manifest): awq2-meta {shlex.quote(str(manifest))} with the same "
                          "options; nothing was written")  # fmt: skip


def check_replaceable(real: Path, shown: Path) -> None:
    """Refuse (:class:`EditRefused`), before anything is written, a set's folder that cannot be
    rebuilt beside itself and exchanged: a mount point, a folder or parent this process may not
    write, a sub-folder or anything but a file or a link inside it."""
    parent = real.parent
    if real == parent or os.path.ismount(real) or os.stat(real).st_dev != os.stat(parent).st_dev:
        raise EditRefused(f"{shown} is a mount point: a set is edited by building the new one "
                          "in a folder beside it and exchanging the two, which cannot cross "
                          "file systems; nothing was written")  # fmt: skip
    for where in (parent, real):
        if not os.access(where, os.W_OK | os.X_OK):
            raise EditRefused(f"{where} is not writable: a set is edited by building the new "
                              f"one beside {shown} in {parent} and exchanging the two, then "
                              "removing the old; nothing was written")  # fmt: skip
    for entry in sorted(os.scandir(real), key=lambda e: e.name):
        if entry.is_symlink() or entry.is_file(follow_symlinks=False):
            continue
        what = "the sub-folder" if entry.is_dir(follow_symlinks=False) else "the special file"
        raise EditRefused(f"{shown} holds {what} {entry.name!r}: a set is edited by building "
                          "a new folder with every entry of the old one and exchanging the two, "
                          "and awq2-meta copies no sub-folder or special file; move it out of "
                          "the set's folder (or edit a copy of the set) and run again; nothing "
                          "was written")  # fmt: skip


def _build_set(folder: Path, tmp: Path, manifest: Manifest, new_metadata: NewMetadata, *,
               verify: bool) -> list[tuple[Path, Edited | None]]:  # fmt: skip
    """Fill the partial folder ``tmp``: every edited member written, verified and hashed, the
    new manifest, and every other entry of ``folder``; then validate it whole [SET-8]."""
    done: list[tuple[Path, Edited | None]] = []
    for member in manifest.members:
        path = folder / member.name
        edited = prepare(path, new_metadata, verify=verify, write=True, dest=tmp / member.name)
        if edited is not None and edited.tmp is not None:
            edited.sha256 = sha256_of(edited.tmp)
            edited.publish()  # inside the partial folder: nothing is visible yet
        done.append((path, edited))
    manifest_path = folder / SET_MANIFEST
    text = _manifest_with(manifest_path, manifest, [edited for _, edited in done])
    old = os.stat(manifest_path)
    with open(tmp / SET_MANIFEST, "xb") as file:
        os.fchmod(file.fileno(), stat.S_IMODE(old.st_mode))
        file.write(text.encode("utf-8"))
        file.flush()
        os.fsync(file.fileno())
    keep_owner(tmp / SET_MANIFEST, old)
    written = {SET_MANIFEST, *(path.name for path, edited in done if edited is not None)}
    _carry_over(folder, tmp, written)
    os.chmod(tmp, stat.S_IMODE(os.stat(folder).st_mode))  # mkdtemp made it 0700
    fsync_dir(tmp)
    with FileSet(tmp, validate=True, max_open=1):  # the new set, whole, before it is shown
        pass
    return done


def _carry_over(folder: Path, tmp: Path, written: set[str]) -> None:
    """Every entry of ``folder`` not rewritten, into ``tmp``: a regular file hard-linked (copied
    where the file system refuses a link), a symbolic link made again with the same target."""
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name in written:
            continue
        dest = tmp / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry.path), dest)
        elif entry.is_file(follow_symlinks=False):
            try:
                os.link(entry.path, dest, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in _NO_LINK:
                    raise
                _copy_file(Path(entry.path), dest)
        else:  # a sub-folder or special file that came after the check
            raise EditRefused(f"{folder}: {entry.name!r} is neither a file nor a link (it came "
                              "while the set was being edited); nothing changed")  # fmt: skip


def _copy_file(src: Path, dest: Path) -> None:
    shutil.copy2(src, dest, follow_symlinks=False)
    with open(dest, "rb") as f:
        os.fsync(f.fileno())


def _manifest_with(manifest_path: Path, manifest: Manifest,
                   edits: Sequence[Edited | None]) -> str:  # fmt: skip
    """The manifest's text with each edited member's size, header_crc and sha256: the
    document as read (members it does not know included [SET-2]), written as the set
    writer writes it (two-space indent, a final newline)."""
    with open_regular(manifest_path) as f:
        raw = f.read(MAX_METADATA_LENGTH + 1)
    if parse_manifest(raw, name=manifest_path.name) != manifest:
        raise EditRefused(f"{manifest_path}: the manifest changed while the set was being "
                          "edited; nothing was renamed")  # fmt: skip
    document = json.loads(raw.decode("utf-8"))
    for item, edited in zip(document["files"], edits, strict=True):
        if edited is not None:
            item.update(size=edited.size, header_crc=f"{edited.header_crc:08x}",
                        sha256=edited.sha256)  # fmt: skip
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
