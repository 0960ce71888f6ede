"""``awq2-meta PATH --set KEY=JSON --delete KEY ...`` (also ``python -m reference.metaedit``):
set or remove top-level metadata keys of an AWQ-v2 file or of a file set, without rewriting
the payloads.

The metadata is the last section of the index, after the slab [IDX-2], so no payload moves
when it changes: the new file is the old slab copied byte for byte, by ``copy_file_range``
(:mod:`reference.write.rangecopy`: a reflink where the file system shares extents, an
in-kernel copy elsewhere, a plain copy where neither is allowed), then the old index with
the new metadata, a new trailer and a new header with their checksums.  It is written into a
hidden partial file beside the original (:mod:`reference.write.partial`), validated and
verified in full (RD-2, ENT-10), and renamed over the original by the publishing transaction
every writing tool shares (:mod:`reference.write.publish`): a reader sees the old file or the
new one, never a mixture [WR-2]; the new one keeps the old one's mode, owner and group (as
far as this user may set them: it is said otherwise); and an edit that another writer
overtook (the file or the set replaced after this run read it) is refused, never silently
lost.  The metadata is written in the writer's canonical
encoding (sorted keys, no spaces) [WR-1], so the edited file is byte for byte what
:class:`~reference.write.writer.Writer` writes with the same tensors and the new metadata.

PATH is a file, a model folder holding ``model.awq2``, or a set (its folder or its manifest).
Every member of a set gets the same edit; each member's own record of its rank
(``awq2_rank``) stays as it is [SET-14, SET-15].  A set is replaced whole, never file by
file: it is fully validated first, then a new folder is built beside it (a partial folder,
:func:`reference.write.partial.create_folder`, named and locked so that the next run can tell
one left by a killed run and removes it, saying so) holding every edited member, written,
verified and hashed, the new manifest with their sizes, header checksums and SHA-256, and
every other entry of the set's folder (a file hard-linked, or copied where the file system
refuses a link; a symbolic link made again with the same target).  The new set is validated
whole, then the two folders are exchanged in one step, ``renameat2(RENAME_EXCHANGE)``, and the
old set, now under the partial name, is removed, with SIGINT, SIGTERM and SIGHUP held off.  A
crash at any moment leaves the old set or the new one at PATH, never a mixture; what is left
beside it is a partial folder the next run removes.  Where the kernel or the file system
cannot exchange two folders (not Linux, ENOSYS, EINVAL), the old set is renamed aside and the
new one into its place, as ``awq2-convert --overwrite`` does: between those two renames no
folder has the name, and a crash there leaves the old set in a replaced folder beside it
(named as a partial, ``.awq2-replaced``), which the next run removes.  Refused before
anything is written: a set's folder that holds a sub-folder or a special file (not carried
over: move it out), a mount point, and a folder or parent this process may not write.

Refused (exit 1, nothing written): a key the spec reserves (``awq2_rank``), deleting a key
the metadata does not hold, metadata a reader would refuse (a number over 100 bytes or out
of binary64's range, nesting over 64 levels, over 16 MiB) [META-5, LIM-5], and an input that
fails validation or verification; a ``--set`` value past those limits, measured before it is
parsed (``LIMIT_METADATA``); one member of a set named as a file (its manifest records its
size and SHA-256: the message gives the command that edits the set) [SET-5].  ``KEY=@FILE``
reads a regular file (a link to one included), at most 16 MiB and one byte of it; a FIFO, a
device or a folder is an I/O error.  An edit that changes nothing writes nothing (exit 0,
``unchanged``).

Exit status: 0 done (or unchanged, or planned with ``--dry-run``), 1 refused, 2 usage
error, 3 I/O error (an edit overtaken by another writer included), 130, 143 or 129
interrupted by SIGINT, SIGTERM or SIGHUP (before the exchange: nothing changed, the partial
removed).  With ``--json``
every outcome is one JSON document on stdout, as ``awq2-convert`` prints it.
"""

from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import shlex
import shutil
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference.format.metadata import encode_metadata, lexical_depth, parse_metadata
from reference.format.reader import Reader
from reference.ground.cli import JsonUsageParser
from reference.ground.errors import FormatError, error
from reference.ground.files import NotRegularFileError, fsync_dir, open_regular
from reference.ground.text import escape
from reference.sets.fileset import FileSet
from reference.sets.folder import MODEL_FILE
from reference.sets.setmanifest import Manifest, parse_manifest
from reference.write.publish import (
    Interrupted,
    Transaction,
    Watched,
    exit_status,
    interruptible,
    keep_owner,
    named_error,
    remove_stale,
    signal_name,
    watch,
)
from reference.write.rangecopy import Copied, copy_range
from spec.algorithms import crc32c
from spec.constants import (
    MAX_METADATA_DEPTH,
    MAX_METADATA_LENGTH,
    SET_MANIFEST,
    SET_RANK_KEY,
    SLAB_OFFSET,
)
from spec.schema import TRAILER_SIZE, Header, HeaderFields, Trailer

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_IO = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT (SIGTERM 143, SIGHUP 129: publish.exit_status)

#: Top-level keys the spec gives a meaning of its own: never set or deleted by hand.
RESERVED_KEYS = (SET_RANK_KEY,)  # [SET-15]
_HASH_CHUNK = 8 << 20
#: A hard link refused by the file system (or by protected_hardlinks): the file is copied.
_NO_LINK = (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK)


class EditRefused(ValueError):
    """An edit the command will not make: the message says why; nothing was written."""


@dataclass(frozen=True)
class Changes:
    """Top-level keys to set (to JSON values) and to delete, each key at most once."""

    set: Mapping[str, Any] = field(default_factory=dict)
    delete: tuple[str, ...] = ()

    def apply(self, metadata: Mapping[str, Any], where: str) -> dict[str, Any]:
        """``metadata`` with the changes made; ``where`` names the file in a refusal."""
        for key in (*self.set, *self.delete):
            if key in RESERVED_KEYS:
                raise EditRefused(f"{key!r} is reserved by the spec (SET-15: a rank set's "
                                  "member records its own rank there)")  # fmt: skip
        missing = [key for key in self.delete if key not in metadata]
        if missing:
            raise EditRefused(f"{where}: no metadata key {missing[0]!r} to delete (its keys: "
                              f"{', '.join(map(repr, sorted(metadata))) or 'none'})")  # fmt: skip
        edited = {key: value for key, value in metadata.items() if key not in self.delete}
        edited.update(self.set)
        return edited


def encode(metadata: Mapping[str, Any], where: str) -> bytes:
    """The canonical bytes of ``metadata`` [WR-1], or :class:`EditRefused` for metadata a
    reader would refuse [META-5, LIM-5]."""
    try:
        return encode_metadata(metadata)
    except ValueError as exc:
        raise EditRefused(f"{where}: the edited metadata would be refused by a reader: {exc}") \
            from exc  # fmt: skip


# ------------------------------------------------------------------ one file


@dataclass
class Edited:
    """A file's new version, written and checked in its partial, not yet published."""

    dest: Path
    transaction: Transaction | None  # None: planned (--dry-run), never written
    copied: Copied
    size: int
    header_crc: int
    metadata_length: int
    sha256: str | None = None

    @property
    def tmp(self) -> Path | None:
        return None if self.transaction is None else self.transaction.tmp

    def discard(self) -> None:
        if self.transaction is not None:
            self.transaction.abort()

    def publish(self) -> None:
        """The partial takes the destination's name, with the old file's mode, owner and
        group, unless the destination changed since the run started [WR-2]."""
        assert self.transaction is not None
        self.transaction.commit()


def _header(header: Mapping[str, Any], index: bytes, metadata: bytes) -> bytes:
    """The header of the edited file: the old one with the new index's lengths and
    checksums [HDR-4, IDX-4, META-4]."""
    fields = {sub.name: header[sub.name] for sub in HeaderFields.subcons}
    fields.update(index_length=len(index), metadata_length=len(metadata),
                  file_size=header["index_offset"] + len(index) + TRAILER_SIZE,
                  index_crc=crc32c(index), metadata_crc=crc32c(metadata))  # fmt: skip
    return bytes(Header.build(dict(fields=dict(value=fields))))


def _trailer(index_offset: int, index_length: int, header_crc: int) -> bytes:
    fields = dict(index_offset=index_offset, index_length=index_length, header_crc=header_crc)
    return bytes(Trailer.build(dict(fields=dict(value=fields))))


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def write_edited(reader: Reader, metadata: bytes, dest: Path, *,
                 watched: Watched | None = None) -> Edited:  # fmt: skip
    """Write the file ``reader`` reads with ``metadata`` instead of its own, in a partial of
    ``dest``, flushed to storage: the slab copied by :func:`copy_range`, then the index
    (every section as it was, the metadata last [IDX-2]), the trailer and the header.  It
    is published (:meth:`Edited.publish`) with the mode, owner and group of the file read,
    against ``watched`` (what the run started from)."""
    h, geometry = reader.header, reader.index.geometry
    index_offset = h["index_offset"]
    index = bytes(reader.index.buf[index_offset : geometry.metadata.offset]) + metadata
    header = _header(h, index, metadata)
    header_crc = int.from_bytes(header[-4:], "little")
    publishing = Transaction(dest, watched=watched, like=reader.path)  # named and locked [WR-3]
    assert publishing.file is not None
    try:
        fd, src = publishing.file.fileno(), reader.fileno()
        _pwrite_all(fd, header + bytes(SLAB_OFFSET - len(header)), 0)  # [PAD-1]
        copied = copy_range(src, fd, SLAB_OFFSET, SLAB_OFFSET, index_offset - SLAB_OFFSET)
        _pwrite_all(fd, index + _trailer(index_offset, len(index), header_crc), index_offset)
        os.fsync(fd)
    except OSError as exc:  # a full disk, a quota: said with the user's path
        publishing.abort()
        raise named_error(exc, reader.path, "cannot write the edited copy beside it") from exc
    except BaseException:
        publishing.abort()
        raise
    size = index_offset + len(index) + TRAILER_SIZE
    return Edited(dest, publishing, copied, size, header_crc, len(metadata))


def check_edited(edited: Edited, *, verify: bool, source: Path | None = None) -> None:
    """Full validation of the partial and, with ``verify``, every payload checksum [RD-2,
    ENT-10]; a failure names the file being edited, ``source`` (by default the destination):
    its payloads are the ones copied."""
    assert edited.tmp is not None
    named = edited.dest if source is None else source
    try:
        with Reader(edited.tmp) as reader:
            reader.validate()
            if verify:
                reader.verify()
    except FormatError as exc:
        exc.path = str(named)
        exc.message = f"{named.name}: {exc.message} (found in its edited copy)"
        raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _prepare(path: Path, changes: Changes, *, verify: bool, write: bool,
             dest: Path | None = None, watched: Watched | None = None,
             ) -> Edited | None:  # fmt: skip
    """The edited version of one file, written (as ``dest``'s partial; ``path``'s by default)
    and checked (None: nothing to change); ``watched``: what the run started from."""
    with Reader(path) as reader:
        reader.validate()  # the original first, so that its own errors name it [RD-2]
        old = reader.metadata
        raw = encode(changes.apply(old, path.name), path.name)
        g = reader.index.geometry
        if bytes(reader.index.buf[g.metadata.offset : g.metadata.offset + g.metadata.length]) \
                == raw:  # fmt: skip
            return None
        if not write:
            return Edited(path, None, Copied(), 0, 0, len(raw))
        edited = write_edited(reader, raw, path if dest is None else dest, watched=watched)
    try:
        check_edited(edited, verify=verify, source=path)
    except BaseException:
        edited.discard()
        raise
    return edited


def edit_file(path: str | os.PathLike[str], changes: Changes, *, verify: bool = True,
              dry_run: bool = False) -> dict[str, Any]:  # fmt: skip
    """Edit one file's metadata and publish it whole; the summary ``--json`` prints.  A set's
    member is refused (:class:`EditRefused`) before anything is written: see
    :func:`check_not_member`."""
    path = Path(path)
    check_not_member(path)
    remove_stale(path, _say)
    watched = watch(path)  # what the run starts from: a concurrent edit is refused at the end
    edited = _prepare(path, changes, verify=verify, write=not dry_run, watched=watched)
    if edited is not None and not dry_run:
        edited.publish()
        _say_not_kept(path, edited.transaction)
    return _summary("file", path, changes, [(path, edited)], dry_run=dry_run, verify=verify)


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


# ------------------------------------------------------------------ a set


def edit_set(folder: str | os.PathLike[str], changes: Changes, *, verify: bool = True,
             dry_run: bool = False) -> dict[str, Any]:  # fmt: skip
    """Edit every member of the set in ``folder`` and its manifest: the edited set is built
    whole in a partial folder beside it, then the two folders are exchanged in one step (see
    the module's docstring); the summary ``--json`` prints."""
    folder = Path(folder)
    real = folder.resolve()
    if not dry_run:  # what a killed run left, whatever this run then finds to do
        remove_stale(real, _say)
    watched = watch(real, real / SET_MANIFEST)  # what the run starts from [SET-2]
    with FileSet(folder, validate=True, max_open=1) as opened:  # [SET-8]
        manifest = opened.manifest
    planned = [(folder / m.name, _prepare(folder / m.name, changes, verify=False, write=False))
               for m in manifest.members]  # fmt: skip
    kind = manifest.kind
    if all(edited is None for _, edited in planned):
        return _summary(kind, folder, changes, planned, dry_run=dry_run, verify=verify)
    check_replaceable(real, folder)
    if dry_run:
        return _summary(kind, folder, changes, planned, dry_run=True, verify=verify)
    for name in (*(m.name for m in manifest.members), SET_MANIFEST):
        remove_stale(folder / name, _say)
    # the new set in a partial folder, exchanged with the old in one step [SET-8]
    with Transaction(real, folder=True, watched=watched, say=_say) as publishing:
        done = _build_set(folder, publishing.tmp, manifest, changes, verify=verify)
    _say_not_kept(folder, publishing)
    return _summary(kind, folder, changes, done, dry_run=False, verify=verify)


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


def _build_set(folder: Path, tmp: Path, manifest: Manifest, changes: Changes, *,
               verify: bool) -> list[tuple[Path, Edited | None]]:  # fmt: skip
    """Fill the partial folder ``tmp``: every edited member written, verified and hashed, the
    new manifest, and every other entry of ``folder``; then validate it whole [SET-8]."""
    done: list[tuple[Path, Edited | None]] = []
    for member in manifest.members:
        path = folder / member.name
        edited = _prepare(path, changes, verify=verify, write=True, dest=tmp / member.name)
        if edited is not None and edited.tmp is not None:
            edited.sha256 = _sha256(edited.tmp)
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


# ------------------------------------------------------------------ helpers


def _say(text: str) -> None:
    print(escape(text), file=sys.stderr)


def _say_not_kept(path: Path, publishing: Transaction | None) -> None:
    """What of the old owner and group the new version could not keep (a user may give a
    file only a group it belongs to)."""
    if publishing is not None and publishing.not_kept:
        _say(f"awq2-meta: {path}: could not keep the {' and '.join(publishing.not_kept)} of "
             "the old version (this user may not give them); the mode was kept")  # fmt: skip


def _summary(kind: str, path: Path, changes: Changes, done: Sequence[tuple[Path, Edited | None]],
             *, dry_run: bool, verify: bool) -> dict[str, Any]:  # fmt: skip
    files = []
    for member, edited in done:
        item: dict[str, Any] = {"name": member.name, "changed": edited is not None}
        if edited is not None and not dry_run:
            item.update(size=edited.size, header_crc=f"{edited.header_crc:08x}",
                        metadata_length=edited.metadata_length,
                        copied_by_kernel=edited.copied.by_kernel,
                        copied_by_copy=edited.copied.by_copy)  # fmt: skip
            if edited.sha256 is not None:
                item["sha256"] = edited.sha256
        files.append(item)
    changed = any(item["changed"] for item in files)
    status = "planned" if dry_run else "edited" if changed else "unchanged"
    return {"status": status, "exit_status": EXIT_OK, "path": str(path), "kind": kind,
            "set": sorted(changes.set), "deleted": sorted(changes.delete),
            "verified": verify and changed and not dry_run, "files": files}  # fmt: skip


def target(path: Path) -> tuple[str, Path]:
    """``("set", folder)`` or ``("file", path)``: what PATH names.  ``FileNotFoundError``
    for a folder that holds neither a manifest nor ``model.awq2``."""
    if path.is_dir():
        if (path / SET_MANIFEST).exists() or (path / SET_MANIFEST).is_symlink():
            return "set", path
        if (path / MODEL_FILE).exists() or (path / MODEL_FILE).is_symlink():
            return "file", path / MODEL_FILE
        raise FileNotFoundError(f"{escape(str(path))} holds neither {SET_MANIFEST} nor "
                                f"{MODEL_FILE}")  # fmt: skip
    if path.name == SET_MANIFEST:
        return "set", path.parent if str(path.parent) else Path(".")
    return "file", path


# ------------------------------------------------------------------ the command line


def build_parser() -> argparse.ArgumentParser:
    parser = JsonUsageParser(
        prog="awq2-meta",
        description="Set or delete top-level metadata keys of an AWQ-v2 file, or of every "
        "member of a file set, without rewriting the payloads: the new file is the old slab "
        "copied by copy_file_range (a reflink where the file system allows it), the index "
        "with the new metadata, a new trailer and header; it is validated and verified, then "
        "renamed over the old one. A set's manifest is rewritten with the new sizes and "
        "checksums; each member's awq2_rank is kept. (python -m reference.metaedit is the "
        "same command.)",
        epilog="exit status: 0 done (or unchanged), 1 refused (nothing written), 2 usage "
        "error, 3 I/O error, 130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP (nothing changed)",
    )
    parser.add_argument("path", type=Path, metavar="PATH",
                        help="an .awq2 file, a model folder holding model.awq2, or a set "
                        f"(its folder or its {SET_MANIFEST})")  # fmt: skip
    parser.add_argument("--set", dest="set_json", action="append", default=[],
                        metavar="KEY=JSON",
                        help="set the top-level KEY to a JSON value (quote it for the "
                        "shell: --set 'license=\"apache-2.0\"'); KEY=@FILE reads the JSON "
                        "from FILE")  # fmt: skip
    parser.add_argument(
        "--set-string",
        action="append",
        default=[],
        metavar="KEY=TEXT",
        help="set the top-level KEY to the string TEXT, as it is",
    )
    parser.add_argument("--delete", action="append", default=[], metavar="KEY",
                        help="delete the top-level KEY; a KEY the metadata does not hold is "
                        "refused")  # fmt: skip
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="check the edit and say what would change; write nothing",
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="validate the new files but skip their payload checksums",
    )
    parser.add_argument(
        "--json", action="store_true", help="one JSON document on stdout whatever the outcome"
    )
    return parser


def _strict_json(text: str) -> Any:
    """A JSON value as the metadata's rules read one: no NaN or Infinity, no duplicate key."""

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({key for key, _ in pairs}) != len(pairs):
            raise ValueError("a duplicate key")
        return dict(pairs)

    def no_constant(token: str) -> Any:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)


def changes_of(args: argparse.Namespace) -> Changes:
    """The edits the arguments ask for; ``ValueError`` (a usage error) otherwise."""
    given: dict[str, Any] = {}
    for option in ("set_json", "set_string"):
        for item in getattr(args, option):
            key, sep, text = item.partition("=")
            if not sep:
                raise ValueError(f"{item!r}: give KEY=VALUE")
            if key in given:
                raise ValueError(f"key {key!r} given twice")
            given[key] = text if option == "set_string" else _json_value(key, text)
    for key in args.delete:
        if key in given or args.delete.count(key) > 1:
            raise ValueError(f"key {key!r} given twice")
    if not given and not args.delete:
        raise ValueError("nothing to do: give --set, --set-string or --delete")
    return Changes(given, tuple(args.delete))


def _json_value(key: str, text: str) -> Any:
    """The value of ``--set KEY=TEXT`` (``@FILE``: the file's text), its length and nesting
    measured before it is parsed [LIM-5, META-6]: past either limit, ``LIMIT_METADATA`` (a
    :class:`FormatError`: refused); not JSON, ``ValueError`` (a usage error); a file that
    cannot be read, ``OSError``."""
    source, path = f"--set {key}", None
    if text.startswith("@"):
        path = text[1:]
        source = f"{path} (--set {key}=@FILE)"
        try:
            raw = _read_value_file(path, source)
        except NotRegularFileError as exc:
            raise NotRegularFileError(exc.errno, f"{exc.strerror}; --set {key}=@FILE reads "
                                      "a regular file", path) from exc  # fmt: skip
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{source}: not UTF-8 text (at its byte {exc.start})") from exc
    else:  # argv's undecodable bytes are lone surrogates: counted, refused later [META-5]
        raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_METADATA_LENGTH:
        raise _over_length(source, path, len(raw))
    depth = lexical_depth(raw)
    if depth > MAX_METADATA_DEPTH:  # json.loads would recurse once per level
        raise error("LIMIT_METADATA", f"{source}: the JSON value nests {depth} levels deep, "
                    f"past the {MAX_METADATA_DEPTH} a reader accepts in metadata (measured "
                    "before parsing)", expected=f"depth <= {MAX_METADATA_DEPTH}", found=depth,
                    path=path)  # fmt: skip
    try:
        return _strict_json(text)
    except ValueError as exc:
        raise ValueError(f"{source}: not a JSON value ({exc}); a string needs its quotes, "
                         "or use --set-string") from exc  # fmt: skip


def _read_value_file(path: str, source: str) -> bytes:
    """The bytes of ``--set KEY=@FILE``: a regular file (a link to one included; a FIFO, a
    device or a folder is ``NotRegularFileError``, an I/O error), read no further than the
    metadata limit and one byte [LIM-5]."""
    with open_regular(path) as f:
        raw = f.read(MAX_METADATA_LENGTH + 1)
        size = os.fstat(f.fileno()).st_size
    if len(raw) > MAX_METADATA_LENGTH:
        raise _over_length(source, path, max(size, len(raw)))
    return raw


def _over_length(source: str, path: str | None, size: int) -> FormatError:
    return error("LIMIT_METADATA", f"{source}: {size:,} bytes, over the "
                 f"{MAX_METADATA_LENGTH:,} bytes a reader accepts as metadata (read no "
                 "further)", expected=f"<= {MAX_METADATA_LENGTH} bytes",
                 found=f"{size} bytes", path=path)  # fmt: skip


def _emit(document: dict[str, Any]) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    assert isinstance(parser, JsonUsageParser)
    parser.json_errors = "--json" in argv
    args = parser.parse_args(argv)
    try:
        changes = changes_of(args)
    except FormatError as exc:  # a value past the metadata's limits, before it was parsed
        return _refused(args, exc, why="", where=False)
    except OSError as exc:
        return _fail(args, EXIT_IO, f"cannot read {escape(str(exc.filename))}: {exc.strerror}")
    except ValueError as exc:
        parser.error(escape(str(exc)))
    try:
        kind, path = target(args.path)
        edit = edit_set if kind == "set" else edit_file
        with interruptible():  # SIGTERM and SIGHUP clean up as Ctrl-C does
            summary = edit(path, changes, verify=not args.no_verify, dry_run=args.dry_run)
    except (KeyboardInterrupt, Interrupted) as exc:
        return _fail(
            args,
            exit_status(exc),
            f"interrupted by {signal_name(exc)}; nothing was changed",
            "interrupted",
        )
    except EditRefused as exc:
        return _fail(args, EXIT_REFUSED, escape(str(exc)), "refused")
    except FormatError as exc:
        return _refused(args, exc)
    except OSError as exc:
        return _fail(args, EXIT_IO, escape(str(exc)))
    if args.json:
        _emit(summary)
    else:
        _print_summary(summary)
    return EXIT_OK


def _fail(args: argparse.Namespace, status: int, message: str, word: str = "error") -> int:
    if args.json:
        _emit({"status": word, "exit_status": status, "error": {"message": message}})
    else:
        print(f"{'' if word == 'interrupted' else word + ': '}{message}", file=sys.stderr)
    return status


def _refused(args: argparse.Namespace, exc: FormatError, *,
             why: str = "the input is not valid: ", where: bool = True) -> int:  # fmt: skip
    """An input that fails its checks: the edit is refused with the check's code; ``where``:
    a second line names ``exc.path`` (not named in the message)."""
    if args.json:
        _emit({"status": "refused", "exit_status": EXIT_REFUSED, "error": exc.to_dict()
               | {"path": exc.path}})  # fmt: skip
        return EXIT_REFUSED
    print(f"refused: {why}{escape(str(exc))}", file=sys.stderr)
    if exc.path and where:
        print(f"  in {escape(exc.path)}", file=sys.stderr)
    return EXIT_REFUSED


def _print_summary(summary: dict[str, Any]) -> None:
    what = ", ".join([f"set {escape(k)}" for k in summary["set"]]
                     + [f"deleted {escape(k)}" for k in summary["deleted"]])  # fmt: skip
    where = escape(summary["path"])
    if summary["status"] == "unchanged":
        print(f"unchanged: {where} already holds this metadata; nothing was written")
        return
    verb = "would edit" if summary["status"] == "planned" else "edited"
    print(f"{verb} {where} ({summary['kind']}): {what}")
    for item in summary["files"]:
        if not item["changed"]:
            print(f"  {escape(item['name'])}: unchanged")
        elif "size" in item:
            print(f"  {escape(item['name'])}: {item['size']:,} bytes, metadata "
                  f"{item['metadata_length']:,} bytes; payloads copied "
                  f"{item['copied_by_kernel']:,} bytes by copy_file_range, "
                  f"{item['copied_by_copy']:,} by read/write")  # fmt: skip
    if summary["kind"] != "file" and summary["status"] == "edited":
        print(f"  {SET_MANIFEST}: rewritten with the new sizes, header checksums and SHA-256")
    if summary["status"] == "edited":
        print(f"  verified: {'yes' if summary['verified'] else 'validated only (--no-verify)'}")


def _entry_point() -> int:
    """Console-script entry (``awq2-meta``): like main(), quiet when stdout closes early."""
    try:
        return main()
    except BrokenPipeError:
        sys.stdout = None  # type: ignore[assignment]  # no flush error at exit
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(_entry_point())
