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
* members are opened on demand and at most ``max_open`` at once (the least recently used
  is closed first, and reopened, with the opening checks again, when it is needed): a set
  may hold more members than the process may open files or maps (SET-2 allows 65536);
* threads may share a set: every method reads a member under a lease (:meth:`FileSet.lease`),
  and a leased member is never closed to make room, so no call reads a reader closed under
  it, nor a descriptor number the system has since given to another member;
* a member found shorter than when it was opened (truncated since) is refused with
  ``TRUNCATED``, naming it, before its map is touched (one ``fstat`` per member read; a
  file cut after that check can still fault: :class:`~reference.format.reader.Reader`);
* full validation reads each member once and costs time linear in the members and names:
  SET-6 keeps the member that first holds each name, rather than looking every name up in
  every earlier member.

Errors inside a member are that member's own ``FormatError`` with ``path`` set to its file
and the file's name at the front of the message [SET-8].
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import itertools
import os
import resource
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from reference.format.layers import LinearLayer, dequantize_layer
from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.ground.errors import FormatError, TensorNotFoundError, error
from reference.sets.setmanifest import (  # [SET-14, 15]
    Manifest,
    Member,
    check_rank_record,
    read_manifest,
    without_rank_record,
)
from spec.constants import SET_MANIFEST

_HASH_CHUNK = 8 << 20
#: The most member readers open at once by default (each holds two descriptors and a map),
#: fewer when the descriptor limit is low: an eighth of it.
MAX_OPEN_MEMBERS = 128
#: Why a listed member cannot be opened that makes it absent, not unreadable [SET-5]: no such
#: file, a link to nothing or a loop of links, a name too long for the file system.
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG)


def default_max_open() -> int:
    """How many member readers a set keeps open by default: :data:`MAX_OPEN_MEMBERS`, or an
    eighth of the soft descriptor limit when that is lower (at least 2)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_MEMBERS
    return max(2, min(MAX_OPEN_MEMBERS, soft // 8))


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


@dataclasses.dataclass(eq=False)
class _Slot:
    """One open member reader, and how many leases of it are out (calls using it now)."""

    reader: Reader
    users: int = 0
    retired: bool = False  # dropped by close() while in use: closed when its last lease ends


class _Open:
    """The member readers open at once: at most ``limit`` while no more are in use.  Room is
    made by closing the least recently used reader that no lease holds; a leased reader is
    never closed under its user (its descriptor number could go to the next member opened,
    whose bytes a read would then return).  When every open reader is leased, one more is
    opened anyway, and the surplus is closed as leases end: at most one reader per lease out
    beyond ``limit``.  A closed reader's views stay valid (they hold its map).  Not locked
    itself: its :class:`FileSet` calls it under its lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots: OrderedDict[int, _Slot] = OrderedDict()

    def checkout(self, index: int, opener: Callable[[], Reader]) -> _Slot:
        """Member ``index``'s slot with one more lease, opened by ``opener`` if not open."""
        slot = self._slots.get(index)
        if slot is None:
            self._shrink(self.limit - 1)
            slot = _Slot(opener())
            self._slots[index] = slot
        else:
            self._slots.move_to_end(index)
        slot.users += 1
        return slot

    def release(self, slot: _Slot) -> None:
        """One lease of ``slot`` ended: close it if it was dropped meanwhile, else close
        readers no longer in use beyond the limit."""
        slot.users -= 1
        if slot.users:
            return
        if slot.retired:
            slot.reader.close()
        else:
            self._shrink(self.limit)

    def _shrink(self, most: int) -> None:
        """Close the least recently used readers that no lease holds until at most ``most``
        are open, or every one left is in use."""
        idle = [index for index, slot in self._slots.items() if not slot.users]
        for index in idle[: max(0, len(self._slots) - most)]:
            self._slots.pop(index).reader.close()

    def close(self) -> None:
        """Close every reader; one in use is closed when its last lease ends."""
        for slot in self._slots.values():
            if slot.users:
                slot.retired = True
            else:
                slot.reader.close()
        self._slots.clear()


class Members(Sequence[Reader]):
    """A reader of each member of a group, in manifest order, opened when it is taken: a
    reader stays open until the set needs its descriptors for another member (at most
    ``max_open`` are open), so use it and move on; the views it gave stay valid.  A reader
    taken here holds no lease: threads sharing the set use :meth:`FileSet.lease` instead."""

    def __init__(self, fileset: FileSet, indices: Sequence[int]) -> None:
        self._set, self._indices = fileset, indices

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return Members(self._set, self._indices[i])
        return self._set.member_reader(self._indices[i])


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
        max_open: int | None = None,
    ) -> None:
        given = Path(path)
        self.manifest_path = given / SET_MANIFEST if given.is_dir() else given
        self.path = self.manifest_path.parent
        _refuse_dangling(self.manifest_path)
        self.manifest: Manifest = read_manifest(self.manifest_path)  # [SET-2..SET-4]
        self._open = _Open(default_max_open() if max_open is None else max(1, max_open))
        self._open_lock = threading.Lock()  # around _open: threads read members of one set
        self._closed = False
        self._copy = copy
        self.only_rank: int | None = None
        try:
            groups = self.manifest.ranks()
            # The one rank whose members are open (an engine's worker), or None: all of them.
            self.only_rank = rank if self.kind == "rank" else None
            if self.only_rank is not None and not 0 <= self.only_rank < (self.tp_size or 1):
                raise ValueError(f"rank {rank} of a set of {self.tp_size} rank(s)")
            self._members = [m for m in self.manifest.members  # [SET-5], in manifest order
                             if self.only_rank is None or m.rank == self.only_rank]  # fmt: skip
            for index in range(len(self._members)):
                self.member_reader(index)  # the opening checks; kept open while there is room
            position = {m.name: i for i, m in enumerate(self._members)}
            for index, group in enumerate(groups):
                if not group:
                    raise error("SET_RANK_MISSING", f"rank {index} of {self.tp_size} has no file",
                                expected=f"a file for every rank 0..{self.tp_size - 1}",
                                found="none", path=str(self.manifest_path))  # fmt: skip
            self._ranks = [[position[m.name] for m in group] if self._is_open(index) else []
                           for index, group in enumerate(groups)]  # fmt: skip
            if validate:
                self.validate()
        except BaseException:
            self.close()
            raise

    def member_reader(self, index: int) -> Reader:
        """The reader of member ``index`` (of ``self._members``), opened (again) if closed:
        every opening check again [SET-5], so a member replaced since is refused.  It holds
        no lease: the set may close it to open another member, so another thread's call may
        close it under its user; threads take :meth:`lease`."""
        with self.lease(index, check_length=False) as reader:
            return reader

    @contextmanager
    def lease(self, index: int, *, check_length: bool = True) -> Iterator[Reader]:
        """The reader of member ``index``, opened (again) if closed, as :meth:`member_reader`,
        and kept open until the block ends, whatever other threads open meanwhile.  With
        ``check_length``, a member found shorter than when it was opened raises
        ``TRUNCATED``, naming it, before its map is touched (one ``fstat``; a positioned
        read that finds the end itself needs no check).  After :meth:`close`: ``ValueError``."""
        with self._open_lock:
            if self._closed:
                raise ValueError(f"{self.manifest_path}: the set is closed")
            member = self._members[index]
            slot = self._open.checkout(index, lambda: self._open_member(member, copy=self._copy))
        try:
            if check_length:
                with _in_member(slot.reader.path):
                    slot.reader.check_length()
            yield slot.reader
        finally:
            with self._open_lock:
                self._open.release(slot)

    def _each(self, rank: int) -> Iterator[Reader]:
        """The readers of ``rank``'s members in manifest order, each leased while it is used."""
        for index in self._group(rank):
            with self.lease(index) as reader:
                yield reader

    def _is_open(self, rank: int) -> bool:
        return self.only_rank is None or rank == self.only_rank

    def _open_member(self, member: Member, *, copy: bool) -> Reader:
        path = self.path / member.name
        why = ""
        try:
            status = os.stat(path)  # a link is followed: the Hub's cache links to its blobs
            mode, size = status.st_mode, status.st_size
        except OSError as exc:
            if exc.errno not in _ABSENT:  # it is there but cannot be read (EACCES, EIO)
                raise
            mode, size, why = 0, -1, f" ({exc.strerror})"
        if not stat.S_ISREG(mode):
            raise error("SET_MISSING_FILE", f"{member.name}: listed in {SET_MANIFEST} but absent"
                        + (why if size < 0 else " (not a regular file)"),
                        expected="a regular file",
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
    def members(self) -> Members:
        """A reader of each open member, in manifest order (each opened when taken:
        :class:`Members`)."""
        return Members(self, range(len(self._members)))

    @property
    def member_paths(self) -> list[Path]:
        """The path of each open member, in manifest order; known without opening any, so it
        answers after :meth:`close` too."""
        return [self.path / member.name for member in self._members]

    def rank_members(self, rank: int = 0) -> Members:
        """The members of ``rank`` (of a split set: every member, ``rank`` 0)."""
        return Members(self, self._group(rank))

    def _group(self, rank: int) -> list[int]:
        """The positions of ``rank``'s members, in manifest order."""
        if not 0 <= rank < len(self._ranks):
            raise ValueError(f"rank {rank} of a set of {len(self._ranks)} rank(s)")
        if self.only_rank is not None and rank != self.only_rank:
            raise ValueError(f"rank {rank}: only rank {self.only_rank}'s members were opened")
        return self._ranks[rank]

    def find(self, name: str, *, rank: int | None = None) -> int | None:
        """The position of the member that holds ``name`` in rank ``rank``'s members (as
        :meth:`entry` takes the rank [SET-13]), for :meth:`lease`; ``None`` if none does."""
        return self._find(name, self._rank(rank, repr(name)))

    def _find(self, name: str, rank: int) -> int | None:
        """The position of the first member of ``rank`` that holds ``name`` [SET-6]."""
        for index in self._group(rank):
            with self.lease(index) as reader:
                if name in reader:
                    return index
        return None

    def _holder(self, info: TensorInfo, rank: int) -> int:
        """The member whose entry ``info`` is (entries carry no file of their own)."""
        index = self._find(info.name, rank)
        if index is not None:
            with self.lease(index) as reader:
                if reader.entry(info.name) == info:
                    return index
        raise ValueError(f"{info.name!r}: not an entry of rank {rank} of this set")

    def _position(self, name: str, rank: int) -> int:
        """:meth:`_find`, raising ``TensorNotFoundError`` when no member holds ``name``."""
        index = self._find(name, rank)
        if index is None:
            raise TensorNotFoundError(name)
        return index

    # ------------------------------------------------------------------ the Reader API

    def __len__(self) -> int:
        return sum(len(r) for r in self._each(self.only_rank or 0))

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
        return [name for r in self._each(self._listed(rank)) for name in r.names()]

    def entries(self, *, rank: int | None = None) -> list[TensorInfo]:
        """Every entry of ``rank``'s members (of a rank set, that rank's shards: opened
        without a rank, it needs one [SET-13]; of a split set, every member's)."""
        rank = self._rank(rank, "every entry")
        return [info for r in self._each(rank) for info in r.entries()]

    def entry(self, name: str, *, rank: int | None = None) -> TensorInfo:
        """The entry of ``name`` in rank ``rank``'s members [SET-13]."""
        rank = self._rank(rank, repr(name))
        with self.lease(self._position(name, rank)) as reader:
            return reader.entry(name)

    def tensor(self, name: str, *, rank: int | None = None) -> NDArray[Any]:
        """Zero-copy view of the payload of ``name`` in rank ``rank``'s members: in a rank
        set, that rank's shard [SET-13]."""
        rank = self._rank(rank, repr(name))
        with self.lease(self._position(name, rank)) as reader:
            return reader.tensor(name)

    def view(self, info: TensorInfo, *, rank: int | None = None) -> NDArray[Any]:
        with self.lease(self._holder(info, self._rank(rank, repr(info.name)))) as reader:
            return reader.view(info)

    def tensors(self, *, rank: int | None = None) -> Iterator[tuple[TensorInfo, NDArray[Any]]]:
        for reader in self._each(self._rank(rank, "every tensor")):
            yield from reader.tensors()

    def layers(self, *, rank: int | None = None) -> list[str]:
        """Prefixes of every quantised layer, member by member (the same in every rank
        [SET-7])."""
        return [prefix for r in self._each(self._listed(rank)) for prefix in r.layers()]

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
            with self.lease(self._position(f"{prefix}.qweight", rank)) as reader:
                layer = reader.linear(prefix)
            return dataclasses.replace(layer, tp_rank=rank, tp_size=self.tp_size)
        with self.lease(self._position(f"{prefix}.qweight", 0)) as reader:
            return reader.linear(prefix, tp_rank=tp_rank or 0, tp_size=tp_size or 1,
                                 parallel=parallel)  # fmt: skip

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
        count = 0
        for count, (tensor, out) in enumerate(itertools.chain([first], items), start=1):
            if isinstance(tensor, TensorInfo):
                index, info = self._holder(tensor, rank), tensor
            else:
                index = self._position(tensor, rank)
                with self.lease(index) as reader:
                    info = reader.entry(tensor)
            jobs.setdefault(index, []).append((count - 1, info, out))
        results: list[NDArray[Any] | None] = [None] * count
        for member, member_jobs in sorted(jobs.items()):
            with self.lease(member) as reader:
                arrays = reader.read_many_into((info, out) for _, info, out in member_jobs)
            for (position, _, _), array in zip(member_jobs, arrays, strict=True):
                results[position] = array
        return [a for a in results if a is not None]

    @property
    def metadata(self) -> dict[str, Any]:
        """The set's metadata: its first member's [SET-10]; of a rank set, every open member's,
        which must be the same [SET-14]."""
        with self.lease(0) as first, _in_member(first.path):
            metadata = first.metadata
        if self.kind != "rank":
            return metadata
        for index in range(1, len(self._members)):
            with self.lease(index) as reader, _in_member(reader.path):
                other = reader.metadata
            if without_rank_record(other) != without_rank_record(metadata):  # [SET-14]
                keys = sorted(k for k in metadata.keys() | other.keys()
                              if metadata.get(k) != other.get(k))  # fmt: skip
                one, two = self._named(0), self._named(index)
                raise error("TP_METADATA_MISMATCH", f"{two}: metadata differs from {one}'s in "
                            + ", ".join(map(repr, keys[:5])), expected=f"{one}'s metadata",
                            found=f"{two}'s, different in {len(keys)} key(s)",
                            path=str(self.path / self._members[index].name))  # fmt: skip
        return metadata

    def _named(self, index: int) -> str:
        """A member's file name and rank, as a message names it."""
        member = self._members[index]
        return f"{member.name} (rank {member.rank})"

    @property
    def version(self) -> tuple[int, int]:
        with self.lease(0) as reader:
            return reader.version

    # ------------------------------------------------------------------ validation [SET-8]

    def validate(self) -> None:
        """Every check of SET-8, in its order: members (RD-2), extra files, names, ranks.

        Each member is read once, in manifest order: its full validation, then its names
        kept for SET-6 (the first member of its rank to hold each name) and, in a whole rank
        set, SET-7 (each name's fields per rank).  Time and memory grow with the members and
        the names, never with their product."""
        ranked = self.kind == "rank" and self.only_rank is None
        seen: list[dict[str, int]] = [{} for _ in self._ranks]
        repeated: list[tuple[str, int, int] | None] = [None] * len(self._ranks)
        fields: list[dict[str, tuple[Any, ...]]] = [{} for _ in self._ranks] if ranked else []
        for index, member in enumerate(self._members):
            with self.lease(index) as reader:
                with _in_member(reader.path):
                    infos = reader.validated_entries()  # [RD-2]
                check_rank_record(self.manifest, member, reader)  # its own rank [SET-15]
            rank = member.rank or 0
            holders = seen[rank]
            for info in infos:
                first = holders.setdefault(info.name, index)
                if first != index and repeated[rank] is None:
                    repeated[rank] = (info.name, first, index)
            if ranked:
                fields[rank].update((info.name, _fields(info)) for info in infos)
        self._check_extra()
        for rank, twice in enumerate(repeated):
            if twice is not None:
                self._duplicate(rank, *twice)
        if ranked:
            self._check_ranks(fields)

    def _check_extra(self) -> None:
        """No ``.awq2`` file in the folder that the manifest does not list [SET-8].  A folder
        that cannot be listed is an input that cannot be read (its ``OSError``), never a set
        without extra files [SET-17]."""
        listed = {m.name for m in self.manifest.members}
        with os.scandir(self.path) as listing:  # raises; Path.glob passes over the error
            names = [entry.name for entry in listing]
        extra = sorted(n for n in names if n.endswith(".awq2") and n not in listed)
        if extra:
            raise error("SET_EXTRA_FILE", f"{extra[0]}: an .awq2 file the manifest does not list",
                        expected=f"only the {len(listed)} listed", found=", ".join(extra[:5]),
                        path=str(self.path / extra[0]))  # fmt: skip

    def _duplicate(self, rank: int, name: str, first: int, again: int) -> None:
        """[SET-6]: ``name`` of member ``again`` is also in the earlier member ``first`` (the
        first member in manifest order that repeats a name, at its first such name in slab
        order; the first earlier member that holds it)."""
        where = f" of rank {rank}" if self.kind == "rank" else ""
        one, two = self._members[first].name, self._members[again].name
        raise error("SET_DUPLICATE_NAME", f"{name!r} is in two members{where}",
                    expected=f"one of {one}, {two}", found="both",
                    path=str(self.path / two))  # fmt: skip

    def _check_ranks(self, fields: list[dict[str, tuple[Any, ...]]]) -> None:
        """Every rank holds rank 0's names with the same fields [SET-7] (when every rank is
        open: a set opened for one rank checks that rank's members only)."""
        first = fields[0]
        for rank in range(1, self.tp_size):
            these = fields[rank]
            for name in sorted(first.keys() ^ these.keys()):
                holder = "rank 0" if name in first else f"rank {rank}"
                raise error("SET_RANK_MISMATCH", f"{name!r} is only in {holder}",
                            expected="the same names in every rank", found=holder,
                            path=str(self.manifest_path))  # fmt: skip
            for name, found in these.items():
                if found != first[name]:
                    raise error("SET_RANK_MISMATCH", f"{name!r} differs between rank 0 and "
                                f"rank {rank}", expected=_show(first[name]), found=_show(found),
                                path=str(self.manifest_path))  # fmt: skip

    def verify(self) -> None:
        """``validate()``, then every member's payload checksums and SHA-256 [SET-8], one
        member at a time.  A member truncated since it was opened is refused (``TRUNCATED``,
        naming it), never read through its map."""
        self.validate()
        for index, member in enumerate(self._members):
            with self.lease(index) as reader:
                with _in_member(reader.path):
                    reader.verify()
                digest = sha256_file(reader)
            if digest != member.sha256:
                # expected: the value computed, found: the one stored (as for every checksum)
                raise error("SET_BAD_SHA256", f"{member.name}: SHA-256 is not the manifest's",
                            expected=digest, found=member.sha256,
                            path=str(self.path / member.name))  # fmt: skip

    # ------------------------------------------------------------------ lifetime

    def close(self) -> None:
        """Close every member reader still open (one in use by a call in another thread when
        that call is done with it); views handed out stay valid, and every later read of a
        member raises ``ValueError``."""
        if hasattr(self, "_open"):
            with self._open_lock:
                self._closed = True
                self._open.close()

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
    """``path`` is a set's folder (it holds an entry named as the manifest, even a link to
    nothing, which opening then refuses: :func:`dangling_link`) or a manifest (``*.json``)."""
    if path.is_dir():
        return os.path.lexists(path / SET_MANIFEST)
    return path.name.endswith(".json")


def dangling_link(path: Path) -> OSError | None:
    """The error of a link that leads nowhere (its target does not exist: a download that did
    not finish, a Hub cache whose blob is gone; or a loop of links), naming the link and its
    target; ``None`` for anything else.  It is the ``OSError`` of an input that cannot be
    read (the tools' exit status 3), never a reason to read the folder as something else."""
    try:
        if not path.is_symlink():
            return None
        target = os.readlink(path)
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return OSError(errno.ELOOP, f"{path.name} is a link to {target}, in a loop of "
                           "links", str(path))  # fmt: skip
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return FileNotFoundError(exc.errno, f"{path.name} is a link to {target}, which "
                                     "does not exist (an unfinished download?)",
                                     str(path))  # fmt: skip
        return None
    return None


def _refuse_dangling(path: Path) -> None:
    broken = dangling_link(path)
    if broken is not None:
        raise broken
