"""Reading a file set: several complete AWQ-v2 files and their manifest, through one API.

A set is a folder with ``model.awq2.set.json`` and the members it lists [SET-1]: split by
size (``kind: "split"``), or one group of members per tensor-parallel rank (``kind:
"rank"``).  :class:`FileSet` answers with the same methods as a
:class:`~reference.format.reader.Reader` (``names``, ``entry``, ``tensor``, ``linear``,
``dequantize``, ``read_many_into``, ``validate``, ``verify``):

* opening reads the manifest and each member's header and trailer [SET-5]: the cost grows
  with the number of files, never with the number of tensors;
* a name is looked up in each member of its group in manifest order [SET-6]: one O(1) index
  lookup per member, no map of every name;
* in a rank set, ``linear(prefix, tp_rank=r)`` reads rank ``r``'s members, which hold rank
  ``r``'s shard already cut [SET-7]; the other methods take ``rank=``.  A rank set opened
  with ``rank=r`` reads rank ``r``'s members only and needs no more; opened whole, every
  access whose answer is one rank's shard (``entry``, ``tensor``, ``view``, ``tensors``,
  ``linear``, ``dequantize``, ``read_into``, ``read_many_into``) refuses without a rank
  (``TP_RANK_REQUIRED``) [SET-13], while the listings (``names``, ``layers``, ``entries``,
  ``len``, ``in``), the metadata [SET-14], ``validate`` and ``verify`` answer for the set;

Errors inside a member are that member's own ``FormatError`` with ``path`` set to its file
and the file's name at the front of the message [SET-8].
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from reference.format.layers import LinearLayer, dequantize_layer
from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.ground.errors import FormatError, TensorNotFoundError, error
from reference.sets.setmanifest import Manifest, Member, read_manifest
from spec.constants import SET_MANIFEST

_HASH_CHUNK = 8 << 20


@contextmanager
def _in_member(path: Path) -> Iterator[None]:
    """A ``FormatError`` raised inside the block names the member file [SET-8]."""
    try:
        yield
    except FormatError as exc:
        if exc.path is None:
            exc.path = str(path)
            exc.message = f"{path.name}: {exc.message}"
        raise


class FileSet:
    """An open file set.  Use :func:`reference.open` on its folder or manifest; close it (or use
    ``with``) when done."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        validate: bool = False,
        copy: bool = False,
        rank: int | None = None,
    ) -> None:
        given = Path(path)
        self.manifest_path = given / SET_MANIFEST if given.is_dir() else given
        self.path = self.manifest_path.parent
        self.manifest: Manifest = read_manifest(self.manifest_path)  # [SET-2..SET-4]
        self._readers: list[Reader] = []
        self.only_rank: int | None = None
        try:
            groups = self.manifest.ranks()
            # The one rank whose members are open (an engine's worker), or None: all of them.
            self.only_rank = rank if self.kind == "rank" else None
            if self.only_rank is not None and not 0 <= self.only_rank < (self.tp_size or 1):
                raise ValueError(f"rank {rank} of a set of {self.tp_size} rank(s)")
            self._members = [m for m in self.manifest.members  # [SET-5], in manifest order
                             if self.only_rank is None or m.rank == self.only_rank]  # fmt: skip
            for member in self._members:
                self._readers.append(self._open_member(member, copy=copy))
            by_name = dict(zip((m.name for m in self._members), self._readers, strict=True))
            for index, group in enumerate(groups):
                if not group:
                    raise error("SET_RANK_MISSING", f"rank {index} of {self.tp_size} has no file",
                                expected=f"a file for every rank 0..{self.tp_size - 1}",
                                found="none", path=str(self.manifest_path))  # fmt: skip
            self._ranks = [[by_name[m.name] for m in group] if self._is_open(index) else []
                           for index, group in enumerate(groups)]  # fmt: skip
            if validate:
                self.validate()
        except BaseException:
            self.close()
            raise

    def _is_open(self, rank: int) -> bool:
        return self.only_rank is None or rank == self.only_rank

    def _open_member(self, member: Member, *, copy: bool) -> Reader:
        path = self.path / member.name
        try:
            status = os.stat(path)  # a link is followed: the Hub's cache links to its blobs
            mode, size = status.st_mode, status.st_size
        except FileNotFoundError:
            mode, size = 0, -1
        if not stat.S_ISREG(mode):
            raise error("SET_MISSING_FILE", f"{member.name}: listed in {SET_MANIFEST} but absent"
                        + ("" if size < 0 else " (not a regular file)"), expected="a regular file",
                        found="nothing" if size < 0 else "another kind of file",
                        path=str(path))  # fmt: skip
        if size != member.size:
            raise error("SET_FILE_MISMATCH", f"{member.name}: length is not the manifest's",
                        expected=member.size, found=size, path=str(path))  # fmt: skip
        with _in_member(path):
            reader = Reader(path, copy=copy)  # the opening checks [RD-1]
        crc = reader.header["header_crc"]
        if crc != member.header_crc:
            reader.close()
            raise error("SET_FILE_MISMATCH", f"{member.name}: header_crc is not the manifest's "
                        "(a file of another conversion?)", offset=124,
                        expected=f"{member.header_crc:08x}", found=f"{crc:08x}",
                        path=str(path))  # fmt: skip
        return reader

    # ------------------------------------------------------------------ what the set is

    @property
    def kind(self) -> str:
        """``"split"`` or ``"rank"``."""
        return self.manifest.kind

    @property
    def tp_size(self) -> int:
        """The tensor-parallel degree of a rank set; 1 for a split set."""
        return self.manifest.tp_size or 1

    @property
    def members(self) -> list[Reader]:
        """A reader of each member, in manifest order."""
        return list(self._readers)

    def rank_members(self, rank: int = 0) -> list[Reader]:
        """The members of ``rank`` (of a split set: every member, ``rank`` 0)."""
        if not 0 <= rank < len(self._ranks):
            raise ValueError(f"rank {rank} of a set of {len(self._ranks)} rank(s)")
        if self.only_rank is not None and rank != self.only_rank:
            raise ValueError(f"rank {rank}: only rank {self.only_rank}'s members were opened")
        return list(self._ranks[rank])

    def _find(self, name: str, rank: int) -> Reader | None:
        for reader in self.rank_members(rank):  # [SET-6]
            if name in reader:
                return reader
        return None

    def _holder(self, info: TensorInfo, rank: int) -> Reader:
        """The member whose entry ``info`` is (entries carry no file of their own)."""
        reader = self._find(info.name, rank)
        if reader is None or reader.entry(info.name) != info:
            raise ValueError(f"{info.name!r}: not an entry of rank {rank} of this set")
        return reader

    # ------------------------------------------------------------------ the Reader API

    def __len__(self) -> int:
        return sum(len(r) for r in self._ranks[self.only_rank or 0])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._find(name, self.only_rank or 0) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def _listed(self, rank: int | None) -> int:
        """The rank a listing reads: the one given, else the one open, else 0 (every rank
        holds the same names and fields [SET-7])."""
        if rank is not None:
            return rank
        return self.only_rank or 0

    def _rank(self, rank: int | None, what: str, argument: str = "rank") -> int:
        """The rank whose shard an access reads: the one given, the one the set was opened
        for, or 0 of a split set; a whole rank set refuses without one [SET-13]."""
        if rank is not None:
            return rank
        if self.only_rank is not None:
            return self.only_rank
        if self.kind != "rank":
            return 0
        last = self.tp_size - 1
        raise error("TP_RANK_REQUIRED", f"{what}: a rank set for tensor parallelism "
                    f"{self.tp_size}: open it with rank=0..{last} (reference.open(PATH, "
                    f"rank=R)), or give {argument}=R here; each rank holds its shard, not the "
                    "whole tensor", expected=f"a rank from 0 to {last}", found="no rank",
                    path=str(self.manifest_path))  # fmt: skip

    def names(self, *, rank: int | None = None) -> list[str]:
        """Every tensor name of ``rank`` (default: the open rank, or rank 0's, which every rank
        holds [SET-7]): member by member in manifest order, each in slab order."""
        return [name for r in self.rank_members(self._listed(rank)) for name in r.names()]

    def entries(self, *, rank: int | None = None) -> list[TensorInfo]:
        """Every entry of ``rank``'s members (of a rank set, that rank's shards: opened
        without a rank, it needs one [SET-13]; of a split set, every member's)."""
        rank = self._rank(rank, "every entry")
        return [info for r in self.rank_members(rank) for info in r.entries()]

    def entry(self, name: str, *, rank: int | None = None) -> TensorInfo:
        """The entry of ``name`` in rank ``rank``'s members [SET-13]."""
        rank = self._rank(rank, repr(name))
        reader = self._find(name, rank)
        if reader is None:
            raise TensorNotFoundError(name)
        return reader.entry(name)

    def tensor(self, name: str, *, rank: int | None = None) -> NDArray[Any]:
        """Zero-copy view of the payload of ``name`` in rank ``rank``'s members: in a rank
        set, that rank's shard [SET-13]."""
        rank = self._rank(rank, repr(name))
        reader = self._find(name, rank)
        if reader is None:
            raise TensorNotFoundError(name)
        return reader.tensor(name)

    def view(self, info: TensorInfo, *, rank: int | None = None) -> NDArray[Any]:
        return self._holder(info, self._rank(rank, repr(info.name))).view(info)

    def tensors(self, *, rank: int | None = None) -> Iterator[tuple[TensorInfo, NDArray[Any]]]:
        members = self.rank_members(self._rank(rank, "every tensor"))
        for reader in members:
            yield from reader.tensors()

    def layers(self, *, rank: int | None = None) -> list[str]:
        """Prefixes of every quantised layer, member by member (the same in every rank
        [SET-7])."""
        return [prefix for r in self.rank_members(self._listed(rank)) for prefix in r.layers()]

    def linear(
        self,
        prefix: str,
        *,
        tp_rank: int | None = None,
        tp_size: int | None = None,
        parallel: Literal["column", "row"] | None = None,
    ) -> LinearLayer:
        """A quantised layer's arrays, zero-copy.  In a split set, as
        :meth:`Reader.linear` (``tp_rank`` default 0, ``tp_size`` default 1: the whole layer,
        or a shard cut from it).  In a rank set, rank ``tp_rank``'s shard as its member stores
        it [SET-7] (default: the rank the set was opened for; opened whole, a rank is needed
        [SET-13]); ``tp_size`` must then be the set's (or omitted)."""
        if self.kind == "rank":
            if tp_size not in (None, self.tp_size):
                raise ValueError(f"this rank set was cut for tp_size={self.tp_size}, not {tp_size}")
            rank = self._rank(tp_rank, f"layer {prefix!r}", "tp_rank")
            reader = self._layer_reader(prefix, rank)
            layer = reader.linear(prefix)
            return dataclasses.replace(layer, tp_rank=rank, tp_size=self.tp_size)
        reader = self._layer_reader(prefix, 0)
        return reader.linear(prefix, tp_rank=tp_rank or 0, tp_size=tp_size or 1,
                             parallel=parallel)  # fmt: skip

    def _layer_reader(self, prefix: str, rank: int) -> Reader:
        reader = self._find(f"{prefix}.qweight", rank)
        if reader is None:
            raise TensorNotFoundError(f"{prefix}.qweight")
        return reader

    def dequantize(self, prefix: str, *, rank: int | None = None) -> NDArray[np.float32]:
        """``float32[k, n]`` weights of a quantised layer of a split set; of a rank set, rank
        ``rank``'s shard (as :meth:`linear`: a whole rank set needs the rank [SET-13])."""
        if self.kind == "rank":
            rank = self._rank(rank, f"layer {prefix!r}")
            return dequantize_layer(self.linear(prefix, tp_rank=rank))
        self.rank_members(self._listed(rank))  # a split set has rank 0 only
        return dequantize_layer(self.linear(prefix))

    def read_into(
        self, tensor: str | TensorInfo, out: Any, *, rank: int | None = None
    ) -> NDArray[Any]:
        return self.read_many_into([(tensor, out)], rank=rank)[0]

    def read_many_into(
        self, items: Iterable[tuple[str | TensorInfo, Any]], *, rank: int | None = None
    ) -> list[NDArray[Any]]:
        """:meth:`Reader.read_many_into` across the members: each member reads its own
        tensors in one call (runs of neighbouring payloads), results in the order given (of a
        whole rank set: ``rank``'s members, which it needs [SET-13])."""
        jobs: dict[int, list[tuple[int, TensorInfo, Any]]] = {}
        items = iter(items)
        first = next(items, None)
        if first is None:
            return []
        what = first[0].name if isinstance(first[0], TensorInfo) else first[0]
        rank = self._rank(rank, repr(what))
        readers = self.rank_members(rank)
        count = 0
        for count, (tensor, out) in enumerate(itertools.chain([first], items), start=1):
            if isinstance(tensor, TensorInfo):
                reader = self._holder(tensor, rank)
                info = tensor
            else:
                found = self._find(tensor, rank)
                if found is None:
                    raise TensorNotFoundError(tensor)
                reader, info = found, found.entry(tensor)
            jobs.setdefault(readers.index(reader), []).append((count - 1, info, out))
        results: list[NDArray[Any] | None] = [None] * count
        for member, member_jobs in sorted(jobs.items()):
            arrays = readers[member].read_many_into((info, out) for _, info, out in member_jobs)
            for (position, _, _), array in zip(member_jobs, arrays, strict=True):
                results[position] = array
        return [a for a in results if a is not None]

    @property
    def metadata(self) -> dict[str, Any]:
        """The set's metadata: its first member's [SET-10]; of a rank set, every open member's,
        which must be the same [SET-14]."""
        first = self._readers[0]
        with _in_member(first.path):
            metadata = first.metadata
        if self.kind != "rank":
            return metadata
        for reader in self._readers[1:]:
            with _in_member(reader.path):
                other = reader.metadata
            if other != metadata:
                keys = sorted(k for k in metadata.keys() | other.keys()
                              if metadata.get(k) != other.get(k))  # fmt: skip
                one, two = self._named(first), self._named(reader)
                raise error("TP_METADATA_MISMATCH", f"{two}: metadata differs from {one}'s in "
                            + ", ".join(map(repr, keys[:5])), expected=f"{one}'s metadata",
                            found=f"{two}'s, different in {len(keys)} key(s)",
                            path=str(reader.path))  # fmt: skip
        return metadata

    def _named(self, reader: Reader) -> str:
        """A member's file name and rank, as a message names it."""
        member = self._members[self._readers.index(reader)]
        return f"{member.name} (rank {member.rank})"

    @property
    def version(self) -> tuple[int, int]:
        return self._readers[0].version

    # ------------------------------------------------------------------ validation [SET-8]

    def validate(self) -> None:
        """Every check of SET-8, in its order: members (RD-2), extra files, names, ranks."""
        for reader in self._readers:
            with _in_member(reader.path):
                reader.validate()
        listed = {m.name for m in self.manifest.members}
        extra = sorted(p.name for p in self.path.glob("*.awq2") if p.name not in listed)
        if extra:
            raise error("SET_EXTRA_FILE", f"{extra[0]}: an .awq2 file the manifest does not list",
                        expected=f"only the {len(listed)} listed", found=", ".join(extra[:5]),
                        path=str(self.path / extra[0]))  # fmt: skip
        for rank, group in enumerate(self._ranks):
            self._check_unique(rank, group)
        self._check_ranks()

    def _check_unique(self, rank: int, group: list[Reader]) -> None:
        """No name in two members of one group [SET-6]: each later member's names looked up
        in the earlier ones."""
        for i, reader in enumerate(group):
            for name in reader.names():
                for earlier in group[:i]:
                    if name in earlier:
                        where = f" of rank {rank}" if self.kind == "rank" else ""
                        raise error("SET_DUPLICATE_NAME", f"{name!r} is in two members{where}",
                                    expected=f"one of {earlier.path.name}, {reader.path.name}",
                                    found="both", path=str(reader.path))  # fmt: skip

    def _check_ranks(self) -> None:
        """Every rank holds rank 0's names with the same fields [SET-7] (when every rank is
        open: a set opened for one rank checks that rank's members only)."""
        if self.kind != "rank" or self.only_rank is not None:
            return
        first = {e.name: _fields(e) for e in self.entries(rank=0)}
        for rank in range(1, self.tp_size):
            these = {e.name: _fields(e) for e in self.entries(rank=rank)}
            for name in sorted(first.keys() ^ these.keys()):
                holder = "rank 0" if name in first else f"rank {rank}"
                raise error("SET_RANK_MISMATCH", f"{name!r} is only in {holder}",
                            expected="the same names in every rank", found=holder,
                            path=str(self.manifest_path))  # fmt: skip
            for name, fields in these.items():
                if fields != first[name]:
                    raise error("SET_RANK_MISMATCH", f"{name!r} differs between rank 0 and "
                                f"rank {rank}", expected=_show(first[name]), found=_show(fields),
                                path=str(self.manifest_path))  # fmt: skip

    def verify(self) -> None:
        """``validate()``, then every member's payload checksums and SHA-256 [SET-8]."""
        self.validate()
        for member, reader in zip(self._members, self._readers, strict=True):
            with _in_member(reader.path):
                reader.verify()
            digest = sha256_file(reader)
            if digest != member.sha256:
                # expected: the value computed, found: the one stored (as for every checksum)
                raise error("SET_BAD_SHA256", f"{member.name}: SHA-256 is not the manifest's",
                            expected=digest, found=member.sha256,
                            path=str(reader.path))  # fmt: skip

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        for reader in self._readers:
            reader.close()

    def __enter__(self) -> FileSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fields(info: TensorInfo) -> tuple[Any, ...]:
    return (info.dtype, info.layout, info.shape, info.bits, info.group_size, info.k, info.n)


def _show(fields: tuple[Any, ...]) -> str:
    names = ("dtype", "layout", "shape", "bits", "group_size", "k", "n")
    return ", ".join(f"{n}={v}" for n, v in zip(names, fields, strict=True))


def sha256_file(reader: Reader) -> str:
    """SHA-256 of the bytes of the file ``reader`` opened (the same file even if its path was
    replaced since), read in 8 MiB positioned reads; a snapshot reader hashes its copy."""
    digest = hashlib.sha256()
    try:
        fd = reader.fileno()
    except OSError:
        digest.update(reader.index.buf.tobytes())
        return digest.hexdigest()
    buf = bytearray(_HASH_CHUNK)
    view, at = memoryview(buf), 0
    while True:
        got = os.preadv(fd, [view], at)
        if not got:
            return digest.hexdigest()
        digest.update(view[:got])
        at += got


def is_set_path(path: Path) -> bool:
    """``path`` is a set's folder (it holds the manifest) or a manifest (``*.json``)."""
    if path.is_dir():
        return (path / SET_MANIFEST).exists()
    return path.name.endswith(".json")
