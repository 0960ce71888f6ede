"""Writing sets: split by size (:class:`SetWriter`), or one file per tensor-parallel rank
(:class:`RankSetWriter`, fed by the converter with each rank's cut from
:mod:`reference.sets.tpsplit`) [SET-11], each rank's part itself split by size when a limit
is given (``model-tp{T}-rank{r}-0000i-of-0000n.awq2``).

A split set's members are filled in order, each at most ``max_size`` bytes.

:class:`SetWriter` writes into a folder it is given (the converter's temporary folder, which
:func:`reference.sets.folder.publishing` renames into place whole [SET-9]); :func:`save_set`
publishes one on its own.  A step (one quantised layer, or one tensor) is never split: before
adding one, the writer asks the open member how long it would be with the step added
(:meth:`Writer.size_with`, exact: the slab, the index and the trailer) and starts the next
member if that is over the limit and the member already holds something [SET-10].  No
member is finished before :meth:`SetWriter.close`, so that metadata finished late (the
converter's source hashes) reaches all of them; a full member is parked meanwhile
(:meth:`Writer.park`: its payloads flushed, its file closed), so a set of any number of
members needs one descriptor, not one per member.  Then each member is finished, renamed to
``model-0000i-of-0000n.awq2``, and hashed, and the manifest is written last [SET-2].  A set of
one member is written as ``model.awq2`` alone, without a manifest (as Hugging Face writes an
unsharded ``model.safetensors``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TypeVar

from reference.format.layers import StoredTensor
from reference.format.reader import Reader
from reference.sets import folder
from reference.sets.setmanifest import Manifest, Member, manifest_text, rank_record
from reference.write.writer import Writer
from spec.constants import SET_MANIFEST

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]i?B|B)?\s*", re.IGNORECASE)
_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}  # fmt: skip
_HASH_CHUNK = 8 << 20


def parse_size(text: str) -> int:
    """Bytes in ``text``: a whole number of bytes, or a number with a unit; ``KB``, ``MB``,
    ``GB``, ``TB`` are powers of 1000 (as ``huggingface_hub``'s ``parse_size_to_int`` reads
    them), ``KiB``... ``TiB`` powers of 1024; case does not matter.  ``ValueError`` for
    anything else, or for less than one byte."""
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 5GB, 500MB, 2GiB, 1048576)")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only decimals
        raise ValueError(f"not a size: {text!r}") from exc
    size = int(number * _UNITS[(match.group(2) or "B").upper()])
    if size < 1:
        raise ValueError(f"a size of at least one byte, got {text!r}")
    return size


def member_name(i: int, count: int) -> str:
    """The name of member ``i`` (from 1) of ``count``, in Hugging Face's pattern."""
    return f"model-{i:05d}-of-{count:05d}.awq2"


_W = TypeVar("_W", bound="_Members")


class _Members:
    """What both set writers share: members open until ``close`` (which the subclass
    defines), dropped by ``abort``, and the manifest written last, after hashing them."""

    out: Path
    members: list[Path]
    _writers: list[Writer]
    _jobs: int

    def close(self) -> list[Path]:
        raise NotImplementedError

    def _write_manifest(
        self, kind: str, *, tp_size: int | None = None, ranks: Sequence[int] = ()
    ) -> None:
        """Hash the closed members and write the manifest listing them [SET-2, SET-9]; in a
        rank set, ``ranks[i]`` is member ``i``'s rank."""
        with ThreadPoolExecutor(self._jobs, thread_name_prefix="set-sha256") as pool:
            described = list(pool.map(_describe, self.members))
        if kind == "rank":
            described = [dataclasses.replace(m, rank=r)
                         for r, m in zip(ranks, described, strict=True)]  # fmt: skip
        text = manifest_text(Manifest(kind, tuple(described), tp_size=tp_size))
        folder.write_text(self.out / SET_MANIFEST, text)

    def abort(self) -> None:
        """Drop every member still open (the caller removes the folder it gave)."""
        while self._writers:
            self._writers.pop().abort()

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


class SetWriter(_Members):
    """Fills members of at most ``max_size`` bytes in ``out`` (an existing, empty folder)."""

    def __init__(
        self,
        out: Path,
        *,
        max_size: int,
        metadata: Mapping[str, Any] | None = None,
        check: Callable[[Path], None] | None = None,
        writeback: bool = False,
        jobs: int = 1,
    ) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        self.out, self.max_size = Path(out), max_size
        self._metadata = metadata
        self._check, self._writeback, self._jobs = check, writeback, max(1, jobs)
        self._writers: list[Writer] = []
        self._steps: list[int] = []  # steps in each member
        self.members: list[Path] = []

    def add_step(self, tensors: list[StoredTensor]) -> None:
        """Add one step (a whole layer, or one tensor) to the open member, or to a new one
        when it would take the open member over the limit [SET-10]."""
        wanted = [(t.name, t.array.nbytes, t.array.ndim) for t in tensors]
        if not self._writers or (
            self._steps[-1] and self._writers[-1].size_with(wanted) > self.max_size
        ):
            self._new_member()
        writer = self._writers[-1]
        for t in tensors:
            writer.add(t.name, t.array, **t.fields)
        self._steps[-1] += 1

    def add(self, name: str, array: Any, **fields: Any) -> None:
        """One tensor as a step of its own."""
        self.add_step([StoredTensor(name, array, fields)])

    def _new_member(self) -> None:
        if self._writers:  # the full member keeps no descriptor until close [SET-10]
            self._writers[-1].park()
        path = self.out / f"part-{len(self._writers) + 1:05d}.awq2"
        self._writers.append(Writer(path, metadata=self._metadata, check=self._check,
                                    writeback=self._writeback))  # fmt: skip
        self._steps.append(0)

    def set_metadata(self, metadata: Mapping[str, Any] | None) -> None:
        """Metadata for every member [SET-10]; the same length keeps the sizes planned."""
        self._metadata = metadata
        for writer in self._writers:
            writer.set_metadata(metadata)

    def close(self) -> list[Path]:
        """Close every member, name them, hash them and write the manifest; the members'
        paths.  A member over the limit holding more than one step fails it (metadata that
        grew after the split was planned)."""
        if not self._writers:
            self._new_member()  # an empty model is one empty member
        for writer, steps in zip(self._writers, self._steps, strict=True):
            if steps > 1 and writer.size_with() > self.max_size:
                raise ValueError(f"{writer.path.name} would be {writer.size_with()} bytes, over "
                                 f"the limit of {self.max_size} [SET-10]")  # fmt: skip
        closed = []
        while self._writers:
            closed.append(self._writers.pop(0).close())
        if len(closed) == 1:
            final = self.out / folder.MODEL_FILE
            os.rename(closed[0], final)
            self.members = [final]
            return self.members
        self.members = []
        for i, path in enumerate(closed, start=1):
            final = self.out / member_name(i, len(closed))
            os.rename(path, final)
            self.members.append(final)
        self._write_manifest("split")
        return self.members


def rank_member_name(rank: int, tp_size: int, i: int = 1, count: int = 1) -> str:
    """The name of member ``i`` (from 1) of ``count`` holding rank ``rank`` of a rank set cut
    for ``tp_size`` ranks: ``model-tp{T}-rank{r}.awq2`` when the rank is one file, else
    ``model-tp{T}-rank{r}-0000i-of-0000n.awq2`` (the rank's own split set)."""
    if count == 1:
        return f"model-tp{tp_size}-rank{rank}.awq2"
    return f"model-tp{tp_size}-rank{rank}-{i:05d}-of-{count:05d}.awq2"


class RankSetWriter(_Members):
    """Every tensor-parallel rank's members in ``out`` (an existing, empty folder): rank
    ``r``'s members receive rank ``r``'s part of every step [SET-7, SET-11].  Every member gets
    the same metadata plus its own record, ``awq2_rank: {"rank": r, "tp_size": T}`` [SET-14,
    SET-15].  Without ``max_size`` each rank is one file; with it, each rank's part is filled
    in order into members of at most ``max_size`` bytes as :class:`SetWriter` fills a split
    set (a step never split, a full member parked) [SET-10], so a rank's members form that
    rank's split set.  As with :class:`SetWriter`, no member is finished before :meth:`close`,
    which names and hashes them and writes the manifest (``kind: "rank"``, rank 0's members
    first, each rank's in order) last."""

    def __init__(
        self,
        out: Path,
        *,
        tp_size: int,
        max_size: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        check: Callable[[Path], None] | None = None,
        writeback: bool = False,
        jobs: int = 1,
    ) -> None:
        if tp_size < 1:
            raise ValueError(f"tp_size must be at least 1, got {tp_size}")
        if max_size is not None and max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        self.out, self.tp_size, self._jobs = Path(out), tp_size, max(1, jobs)
        self.max_size = max_size
        self._check, self._writeback = check, writeback
        self._metadata = metadata
        self._ranks: list[list[Writer]] = [[] for _ in range(tp_size)]  # each rank's members
        self._steps: list[list[int]] = [[] for _ in range(tp_size)]  # steps in each member
        self.members: list[Path] = []
        try:
            for rank in range(tp_size):  # an empty model is one empty member per rank
                self._new_member(rank)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop every member still open (the caller removes the folder it gave)."""
        for writers in self._ranks:
            while writers:
                writers.pop().abort()

    def add_ranks(self, per_rank: Sequence[Iterable[StoredTensor]]) -> None:
        """One step: ``per_rank[r]`` is what rank ``r``'s members store of it, in the open
        member of that rank, or in a new one when it would take that member over
        ``max_size`` [SET-10]."""
        if len(per_rank) != self.tp_size:
            raise ValueError(f"{len(per_rank)} parts for {self.tp_size} ranks")
        for rank, tensors in enumerate(per_rank):
            tensors = list(tensors)
            writer = self._ranks[rank][-1]
            if self.max_size is not None and self._steps[rank][-1]:
                wanted = [(t.name, t.array.nbytes, t.array.ndim) for t in tensors]
                if writer.size_with(wanted) > self.max_size:
                    writer = self._new_member(rank)
            for t in tensors:
                writer.add(t.name, t.array, **t.fields)
            self._steps[rank][-1] += 1

    def _new_member(self, rank: int) -> Writer:
        writers = self._ranks[rank]
        if writers:  # the full member keeps no descriptor until close [SET-10]
            writers[-1].park()
        path = self.out / f"part-rank{rank}-{len(writers) + 1:05d}.awq2"
        writers.append(Writer(path, metadata=self._own(self._metadata, rank),
                              check=self._check, writeback=self._writeback))  # fmt: skip
        self._steps[rank].append(0)
        return writers[-1]

    def _own(self, metadata: Mapping[str, Any] | None, rank: int) -> dict[str, Any]:
        """``metadata`` as rank ``rank``'s member stores it: with its own record [SET-15]."""
        return {**(metadata or {}), **rank_record(rank, self.tp_size)}

    def set_metadata(self, metadata: Mapping[str, Any] | None) -> None:
        """Metadata for every member (the same in each, but for its own record); the same
        length keeps the sizes planned."""
        self._metadata = metadata
        for rank, writers in enumerate(self._ranks):
            for writer in writers:
                writer.set_metadata(self._own(metadata, rank))

    def close(self) -> list[Path]:
        """Close every member, name them, hash them and write the manifest; the members'
        paths, rank by rank.  A member over the limit holding more than one step fails it
        (metadata that grew after the split was planned)."""
        if self.max_size is not None:
            for writers, steps in zip(self._ranks, self._steps, strict=True):
                for writer, count in zip(writers, steps, strict=True):
                    if count > 1 and writer.size_with() > self.max_size:
                        raise ValueError(f"{writer.path.name} would be {writer.size_with()} "
                                         f"bytes, over the limit of {self.max_size} "
                                         "[SET-10]")  # fmt: skip
        members: list[Path] = []
        ranks: list[int] = []
        for rank, writers in enumerate(self._ranks):
            closed = []
            while writers:
                closed.append(Path(writers.pop(0).close()))
            for i, path in enumerate(closed, start=1):
                final = self.out / rank_member_name(rank, self.tp_size, i, len(closed))
                os.rename(path, final)
                members.append(final)
                ranks.append(rank)
        self.members = members
        self._write_manifest("rank", tp_size=self.tp_size, ranks=ranks)
        return self.members


def _describe(path: Path) -> Member:
    """A member's line of the manifest: its length, header checksum and SHA-256."""
    with Reader(path) as reader:
        crc = reader.header["header_crc"]
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return Member(path.name, path.stat().st_size, crc, digest.hexdigest())


def save_set(
    dst: str | os.PathLike[str],
    tensors: Iterable[tuple[str, Any]] | Mapping[str, Any],
    *,
    max_size: int,
    metadata: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``tensors`` (dense, one step each) as a set in the new folder ``dst``, published
    whole [SET-9]; the members' paths."""
    dst = Path(dst)
    items = tensors.items() if isinstance(tensors, Mapping) else tensors
    with folder.publishing(dst) as tmp:
        with SetWriter(tmp, max_size=max_size, metadata=metadata) as writer:
            for name, array in items:
                writer.add(name, array)
        names = [p.name for p in writer.members]
    return [dst / name for name in names]
