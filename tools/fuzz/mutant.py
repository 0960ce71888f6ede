"""One input under construction (:class:`Mutant`), and the byte-level mutators that fit any
file: bit flips, byte overwrites (random and "interesting" 1/2/4/8-byte values), truncations,
extensions, insertions and deletions, and splices of two seed files.  Half the time they aim
at the header, the index or the trailer (:meth:`tools.fuzz.view.FileView.regions`)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from spec.constants import ALIGNMENT, MAX_TENSORS, SLAB_OFFSET
from spec.schema import HEADER_SIZE, TRAILER_SIZE
from tools.fuzz.view import FileView, put_int
from tools.vectors.surgery import FileEditor

U64 = (1 << 64) - 1


@dataclass
class Seed:
    id: str
    data: bytes
    names: tuple[str, ...]
    weight: float
    config: bytes | None = None  # config.json beside an AWQ v1 (safetensors) seed


@dataclass
class Mutant:
    """One input under construction: the editor, what was done, which entries were touched."""

    ed: FileEditor
    rng: random.Random
    seeds: Sequence[Seed]
    steps: list[str] = field(default_factory=list)
    touched: set[int] = field(default_factory=set)
    structured: bool = False
    files: dict[str, bytes] = field(default_factory=dict)  # AWQ v1: the checkpoint folder

    @property
    def data(self) -> bytearray:
        return self.ed.data

    def view(self) -> FileView:
        return FileView.of(self.ed.data)

    def position(self) -> int:
        """A byte position, half the time inside the header, the index or the trailer."""
        n = len(self.data)
        if n == 0:
            return 0
        regions = self.view().regions()
        if regions and self.rng.random() < 0.6:
            a, b = self.rng.choice(regions)
            return self.rng.randrange(a, b)
        return self.rng.randrange(n)


def bitflip(m: Mutant) -> None:
    for _ in range(m.rng.choice((1, 1, 1, 2, 3, 8))):
        if not m.data:
            return
        at, bit = m.position(), m.rng.randrange(8)
        m.data[at] ^= 1 << bit
        m.steps.append(f"flip bit {bit} of byte {at}")


INTERESTING = (
    0,
    1,
    0x7F,
    0x80,
    0xFF,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFF,
    1 << 63,
    U64,
    ALIGNMENT,
    MAX_TENSORS + 1,
)


def overwrite(m: Mutant) -> None:
    if not m.data:
        return
    at = m.position()
    if m.rng.random() < 0.5:
        blob = bytes(m.rng.randrange(256) for _ in range(m.rng.randint(1, 8)))
        m.data[at : at + len(blob)] = blob[: max(0, len(m.data) - at)]
        m.steps.append(f"overwrite {len(blob)} random bytes at {at}")
    else:
        size = m.rng.choice((1, 2, 4, 8))
        value = m.rng.choice(INTERESTING)
        put_int(m.data, at - at % size, size, value)
        m.steps.append(f"write u{8 * size} {value:#x} at {at - at % size}")


def boundaries(m: Mutant) -> list[int]:
    g = m.view()
    points = [
        0,
        1,
        8,
        HEADER_SIZE,
        SLAB_OFFSET,
        g.index_offset,
        g.geo.entries.offset,
        g.geo.dims.offset,
        g.geo.names.offset,
        g.geo.metadata.offset,
        g.size - TRAILER_SIZE,
        g.size - 8,
        g.size - 1,
    ]
    return [p for p in points if 0 <= p < g.size]


def truncate(m: Mutant) -> None:
    n = len(m.data)
    if m.rng.random() < 0.6 and n:
        cut = m.rng.choice(boundaries(m)) + m.rng.choice((-1, 0, 0, 1))
    else:
        cut = m.rng.randrange(n + 1)
    cut = max(0, min(cut, n))
    m.ed.truncate(cut)
    m.steps.append(f"truncate to {cut}")


def extend(m: Mutant) -> None:
    how = m.rng.randrange(4)
    length = m.rng.choice((1, 8, 32, 4096, ALIGNMENT))
    blob = bytes(length) if m.rng.random() < 0.5 else m.rng.randbytes(length)
    if how == 0:
        m.data.extend(blob)
        m.steps.append(f"append {length} bytes")
    elif how == 1:
        at = m.position()
        m.data[at:at] = blob
        m.steps.append(f"insert {length} bytes at {at}")
    elif how == 2:
        at = m.position()
        del m.data[at : at + length]
        m.steps.append(f"delete {length} bytes at {at}")
    else:
        m.data.extend(m.data[-TRAILER_SIZE:])
        m.steps.append("append a second trailer")


def splice(m: Mutant) -> None:
    other = m.rng.choice(m.seeds)
    how = m.rng.randrange(4)
    if how == 0:  # this file's prefix, the other's suffix
        at = m.rng.choice([*boundaries(m), m.rng.randrange(len(m.data) + 1)])
        m.ed.data = m.data[:at] + bytearray(other.data[at:])
        m.steps.append(f"splice {other.id} from byte {at}")
    elif how == 1:  # the other's header
        m.data[:HEADER_SIZE] = other.data[:HEADER_SIZE]
        m.steps.append(f"header of {other.id}")
    elif how == 2:  # the other's trailer
        if len(m.data) >= TRAILER_SIZE:
            m.data[-TRAILER_SIZE:] = other.data[-TRAILER_SIZE:]
            m.steps.append(f"trailer of {other.id}")
    else:  # the other's index and trailer after this file's slab
        og = FileView.of(bytearray(other.data))
        g = m.view()
        if 0 < g.index_offset <= len(m.data) and 0 < og.index_offset <= len(other.data):
            m.ed.data = m.data[: g.index_offset] + bytearray(other.data[og.index_offset :])
            m.steps.append(f"index of {other.id}")
