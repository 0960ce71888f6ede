"""A file set's manifest (``model.awq2.set.json``): what it says, read strictly, and written.

The manifest names the members of a set, their lengths, header checksums and SHA-256, the
set's kind and, for a rank set, the tensor-parallel degree and each member's rank [SET-2].
:func:`parse_manifest` checks it in the order the spec gives: the version and the kind
first [SET-3], then every member of the schema [SET-2] and every file name [SET-4].  Unknown
members are ignored [SET-2].  Every failure is a ``SetError`` (``SET_BAD_MANIFEST`` or
``SET_UNSUPPORTED``), with no offset: a set's error names no byte [RD-7].

Each member of a rank set also records its own rank and degree in its metadata, under
``awq2_rank`` [SET-15]: :func:`rank_record` is what the writer stores, and
:func:`check_rank_records` what full validation checks against the manifest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from reference.format.metadata import parse_metadata
from reference.ground.errors import FormatError, error
from reference.ground.files import open_regular
from spec.constants import (
    MAX_METADATA_LENGTH,
    MAX_SET_FILES,
    SET_MANIFEST,
    SET_RANK_KEY,
    SET_VERSION,
)

KINDS = ("split", "rank")
_HEX8 = re.compile(r"[0-9a-f]{8}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SUFFIX = ".awq2"


@dataclass(frozen=True)
class Member:
    """One file of a set, as the manifest describes it."""

    name: str
    size: int
    header_crc: int
    sha256: str
    rank: int | None = None  # rank sets only


@dataclass(frozen=True)
class Manifest:
    """A parsed, checked manifest: the set's kind, its members in order, and its TP degree."""

    kind: str
    members: tuple[Member, ...]
    tp_size: int | None = None  # rank sets only

    def ranks(self) -> list[list[Member]]:
        """The members of each rank, rank 0 first, each in manifest order; a split set is one
        group of every member."""
        if self.kind != "rank":
            return [list(self.members)]
        assert self.tp_size is not None
        groups: dict[int | None, list[Member]] = {}
        for m in self.members:
            groups.setdefault(m.rank, []).append(m)
        # a tp_size above the file count leaves a rank without a file among the first
        # count + 1: the groups stop there, so a huge tp_size costs nothing [SET-5]
        return [groups.get(r, []) for r in range(min(self.tp_size, len(self.members) + 1))]


def _bad(message: str, *, expected: Any = None, found: Any = None) -> FormatError:
    return error("SET_BAD_MANIFEST", message, expected=expected, found=found)


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def read_manifest(path: Path) -> Manifest:
    """Read and check the manifest at ``path`` (a regular file of at most
    ``max_metadata_length`` bytes) [SET-2]."""
    with open_regular(path) as f:
        raw = f.read(MAX_METADATA_LENGTH + 1)
    if len(raw) > MAX_METADATA_LENGTH:
        raise _bad(f"{path.name}: manifest longer than the limit",
                   expected=f"<= {MAX_METADATA_LENGTH} bytes", found="more")  # fmt: skip
    return parse_manifest(raw, name=path.name)


def parse_manifest(raw: bytes, *, name: str = SET_MANIFEST) -> Manifest:
    """The manifest ``raw`` (its file is ``name``, for messages), checked [SET-2..SET-4]."""
    try:
        document = parse_metadata(raw, offset=0)  # META-1, META-2, META-5, META-6
    except FormatError as exc:
        where = "" if exc.offset is None else f" (at its byte {exc.offset})"
        raise error("SET_BAD_MANIFEST", f"{name}: {exc.message}{where}", expected=exc.expected,
                    found=exc.found) from exc  # fmt: skip
    version, kind = document.get("awq2_set"), document.get("kind")
    if not _integer(version) or version != SET_VERSION:  # [SET-3]
        raise error("SET_UNSUPPORTED", f"{name}: awq2_set is not a version this reader knows",
                    expected=SET_VERSION, found=version)  # fmt: skip
    if kind not in KINDS:
        raise error("SET_UNSUPPORTED", f"{name}: unknown set kind",
                    expected=" or ".join(map(repr, KINDS)), found=kind)  # fmt: skip
    tp_size: int | None = None
    if kind == "rank":
        given = document.get("tp_size")
        if not _integer(given) or given < 1:
            raise _bad(f"{name}: tp_size of a rank set", expected="an integer >= 1",
                       found=given)  # fmt: skip
        tp_size = given
    files = document.get("files")
    if not isinstance(files, list) or not 1 <= len(files) <= MAX_SET_FILES:
        found = len(files) if isinstance(files, list) else type(files).__name__
        raise _bad(f"{name}: files", expected=f"an array of 1 to {MAX_SET_FILES} objects",
                   found=found)  # fmt: skip
    members = tuple(_member(item, i, kind, tp_size, name) for i, item in enumerate(files))
    seen: set[str] = set()
    for m in members:  # [SET-4]
        if m.name in seen:
            raise _bad(f"{name}: file {m.name!r} listed twice", expected="distinct names",
                       found=m.name)  # fmt: skip
        seen.add(m.name)
    return Manifest(kind, members, tp_size)


def _member(item: Any, i: int, kind: str, tp_size: int | None, manifest: str) -> Member:
    where = f"{manifest}: files[{i}]"
    if not isinstance(item, dict):
        raise _bad(where, expected="an object", found=type(item).__name__)
    file_name, size = item.get("name"), item.get("size")
    crc, digest = item.get("header_crc"), item.get("sha256")
    if not isinstance(file_name, str) or not plain_member_name(file_name):
        raise _bad(f"{where}.name is not a plain .awq2 file name in the folder",
                   expected="NAME.awq2, no '/', backslash, NUL or leading '.'",
                   found=file_name)  # fmt: skip
    if not _integer(size) or size < 0:
        raise _bad(f"{where}.size", expected="an integer >= 0", found=size)
    if not isinstance(crc, str) or not _HEX8.fullmatch(crc):
        raise _bad(f"{where}.header_crc", expected="8 lowercase hex digits", found=crc)
    if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
        raise _bad(f"{where}.sha256", expected="64 lowercase hex digits", found=digest)
    rank = None
    if kind == "rank":
        assert tp_size is not None
        rank = item.get("rank")
        if not _integer(rank) or not 0 <= rank < tp_size:
            raise _bad(f"{where}.rank", expected=f"an integer from 0 to {tp_size - 1}",
                       found=rank)  # fmt: skip
    return Member(file_name, size, int(crc, 16), digest, rank)


def plain_member_name(name: str) -> bool:
    """A file name a manifest may list [SET-4]: ``*.awq2`` in the folder itself."""
    return (
        len(name) > len(_SUFFIX)
        and name.endswith(_SUFFIX)
        and not name.startswith(".")
        and not any(c in name for c in "/\\\0")
    )


def manifest_text(manifest: Manifest) -> str:
    """The manifest as a writer publishes it: keys in a fixed order, two-space indent, a
    final newline; the same manifest always gives the same text [WR-1]."""
    document: dict[str, Any] = {"awq2_set": SET_VERSION, "kind": manifest.kind}
    if manifest.kind == "rank":
        document["tp_size"] = manifest.tp_size
    files = []
    for m in manifest.members:
        item: dict[str, Any] = {"name": m.name, "size": m.size}
        item.update(header_crc=f"{m.header_crc:08x}", sha256=m.sha256)
        if manifest.kind == "rank":
            item["rank"] = m.rank
        files.append(item)
    document["files"] = files
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------ each member's own record


def rank_record(rank: int, tp_size: int) -> dict[str, Any]:
    """What rank ``rank``'s member of a rank set cut for ``tp_size`` ranks records of itself in
    its metadata [SET-15]: merge it into the metadata the writer gives every member."""
    return {SET_RANK_KEY: {"rank": rank, "tp_size": tp_size}}


def without_rank_record(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` without a member's own record [SET-14]: what every member of a rank set
    holds alike."""
    return {key: value for key, value in metadata.items() if key != SET_RANK_KEY}


def check_rank_record(manifest: Manifest, member: Member, reader: Any) -> None:
    """A member's record of its rank against the manifest [SET-15], once the member has passed
    its own full validation: ``reader`` is its open reader (anything with ``metadata`` and
    ``path``).  A rank set's member records its ``rank`` and the set's ``tp_size``; a split
    set's records nothing.  ``SET_WRONG_RANK`` names the member."""
    metadata = reader.metadata
    record = metadata.get(SET_RANK_KEY, _ABSENT)
    if manifest.kind != "rank":
        if record is not _ABSENT:
            raise _wrong_rank(member, reader, "a member of a split set records a rank (a "
                              "rank's shards, not a whole model?)", expected=f"no {SET_RANK_KEY}",
                              found=record)  # fmt: skip
        return
    want = {"rank": member.rank, "tp_size": manifest.tp_size}
    if record is _ABSENT:
        raise _wrong_rank(member, reader, f"its metadata has no {SET_RANK_KEY} (a file not "
                          "written as a member of a rank set?)", expected=want,
                          found="none")  # fmt: skip
    if not isinstance(record, dict) or any(
        not _integer(record.get(key)) or record.get(key) != value for key, value in want.items()
    ):
        raise _wrong_rank(member, reader, "it was written as another rank, or for another "
                          "tensor-parallel degree, than the manifest says", expected=want,
                          found=record)  # fmt: skip


_ABSENT = object()


def _wrong_rank(member: Member, reader: Any, message: str, *, expected: Any,
                found: Any) -> FormatError:  # fmt: skip
    where = f"{member.name} (rank {member.rank})" if member.rank is not None else member.name
    return error("SET_WRONG_RANK", f"{where}: {message}", expected=expected, found=found,
                 path=str(reader.path))  # fmt: skip
