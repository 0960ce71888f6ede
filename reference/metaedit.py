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

This module parses the arguments, says what the edit is (:class:`Changes`) and prints what
comes back; the work is :mod:`reference.write.reindex` (one file written again) and
:mod:`reference.sets.edit` (a file or a set edited and published whole).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reference.format.metadata import encode_metadata, lexical_depth
from reference.ground.cli import (
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    JsonUsageParser,
)
from reference.ground.errors import FormatError, error
from reference.ground.files import NotRegularFileError, open_regular
from reference.ground.text import escape
from reference.sets.edit import (
    EditRefused,
    Outcome,
    check_not_member,
    check_replaceable,
    member_of,
    rewrite_file,
    rewrite_set,
)
from reference.sets.folder import MODEL_FILE
from reference.write.publish import Interrupted, exit_status, interruptible, signal_name
from reference.write.reindex import Edited, check_edited, write_edited
from spec.constants import MAX_METADATA_DEPTH, MAX_METADATA_LENGTH, SET_MANIFEST, SET_RANK_KEY

#: Top-level keys the spec gives a meaning of its own: never set or deleted by hand.
RESERVED_KEYS = (SET_RANK_KEY,)  # [SET-15]


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

    def encoded(self, metadata: Mapping[str, Any], where: str) -> bytes:
        """The canonical bytes of ``metadata`` with the changes made (:func:`encode`)."""
        return encode(self.apply(metadata, where), where)


def encode(metadata: Mapping[str, Any], where: str) -> bytes:
    """The canonical bytes of ``metadata`` [WR-1], or :class:`EditRefused` for metadata a
    reader would refuse [META-5, LIM-5]."""
    try:
        return encode_metadata(metadata)
    except ValueError as exc:
        raise EditRefused(f"{where}: the edited metadata would be refused by a reader: {exc}") \
            from exc  # fmt: skip


# ------------------------------------------------------------------ the Python API


def edit_file(path: str | os.PathLike[str], changes: Changes, *, verify: bool = True,
              dry_run: bool = False) -> dict[str, Any]:  # fmt: skip
    """Edit one file's metadata and publish it whole (:func:`reference.sets.edit.rewrite_file`);
    the summary ``--json`` prints.  A set's member is refused (:class:`EditRefused`) before
    anything is written: see :func:`reference.sets.edit.check_not_member`."""
    path = Path(path)
    outcome = rewrite_file(path, changes.encoded, verify=verify, dry_run=dry_run, say=_say)
    return _said(path, changes, outcome, dry_run=dry_run, verify=verify)


def edit_set(folder: str | os.PathLike[str], changes: Changes, *, verify: bool = True,
             dry_run: bool = False) -> dict[str, Any]:  # fmt: skip
    """Edit every member of the set in ``folder`` and its manifest: the edited set is built
    whole in a partial folder beside it, then the two folders are exchanged in one step
    (:func:`reference.sets.edit.rewrite_set`, and the module's docstring); the summary
    ``--json`` prints."""
    folder = Path(folder)
    outcome = rewrite_set(folder, changes.encoded, verify=verify, dry_run=dry_run, say=_say)
    return _said(folder, changes, outcome, dry_run=dry_run, verify=verify)


def _said(path: Path, changes: Changes, outcome: Outcome, *, dry_run: bool,
          verify: bool) -> dict[str, Any]:  # fmt: skip
    """The summary of ``outcome``, once what of the old owner and group the new version could
    not keep (a user may give a file only a group it belongs to) is said on stderr."""
    if outcome.not_kept:
        _say(f"awq2-meta: {path}: could not keep the {' and '.join(outcome.not_kept)} of "
             "the old version (this user may not give them); the mode was kept")  # fmt: skip
    return _summary(outcome.kind, path, changes, outcome.done, dry_run=dry_run, verify=verify)


def _say(text: str) -> None:
    print(escape(text), file=sys.stderr)


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


__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_IO",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "RESERVED_KEYS",
    "Changes",
    "EditRefused",
    "Edited",
    "build_parser",
    "changes_of",
    "check_edited",
    "check_not_member",
    "check_replaceable",
    "edit_file",
    "edit_set",
    "encode",
    "main",
    "member_of",
    "target",
    "write_edited",
]


if __name__ == "__main__":
    sys.exit(_entry_point())
