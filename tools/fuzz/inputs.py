"""The seeds (every conformance vector, and two AWQ v1 checkpoints) and the inputs made from
them: input ``number`` of ``--seed K`` is one seed with one to four mutations, chosen by a
``random.Random`` seeded with ``"{K}/{number}"``, so any input can be rebuilt from its number."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT
from tools.fuzz import awq2, v1
from tools.fuzz.mutant import Mutant, Seed
from tools.fuzz.target import write_folder
from tools.fuzz.view import FileView
from tools.vectors.surgery import FileEditor

MANIFEST = ROOT / "conformance" / "manifest.json"


#: The file name of an AWQ-v2 input in its folder.
AWQ2_NAME = "input.awq2"
#: A target that is the input's folder itself (AWQ v1 checkpoint folders).
FOLDER = "."


@dataclass
class Input:
    """One input: the files of its folder, and what the reader path opens in it."""

    files: dict[str, bytes]  # file name -> bytes, all in one folder
    targets: tuple[str, ...]  # file names in it to open, or FOLDER for the folder itself
    base: Seed
    steps: list[str]
    convert: bool = False  # also run ``reference.convert.main`` on the first target

    @property
    def v1(self) -> bool:
        return self.base.config is not None

    @property
    def data(self) -> bytes:
        """The AWQ-v2 file (or the v1 model.safetensors, if any)."""
        return self.files.get(AWQ2_NAME, self.files.get("model.safetensors", b""))

    @property
    def suffix(self) -> str:
        """How a written-out copy of it is named: ``.v1`` (a folder) or ``.awq2``."""
        return ".v1" if self.v1 else ".awq2"

    @property
    def size(self) -> int:
        return sum(map(len, self.files.values()))


#: Share of the AWQ v1 inputs that also go through the whole converter (it writes a file).
CONVERT_SHARE = 0.02


def make_input(seeds: Sequence[Seed], seed: int, number: int) -> Input:
    """Input ``number``: deterministic in (seed, number).  An AWQ-v2 input draws from the
    generator exactly as before AWQ v1 folders existed (its bytes did not change); an AWQ v1
    input draws its folder layout right after its base."""
    rng = random.Random(f"{seed}/{number}")
    base = rng.choices(seeds, [s.weight for s in seeds])[0]
    m = Mutant(FileEditor(base.data), rng, seeds)
    is_v1 = base.config is not None
    targets: tuple[str, ...] = (AWQ2_NAME,)
    if is_v1:
        targets = v1.lay_out(m, base)
    funcs, weights = (v1.FUNCS, v1.WEIGHTS) if is_v1 else (awq2.FUNCS, awq2.WEIGHTS)
    for _ in range(rng.choices((1, 2, 3, 4), (50, 25, 15, 10))[0]):
        rng.choices(funcs, weights)[0](m)
    if not is_v1 and rng.random() < (0.85 if m.structured else 0.25):
        awq2.refresh(m)
    if not is_v1:
        return Input({AWQ2_NAME: bytes(m.ed.data)}, targets, base, m.steps)
    return Input(dict(m.files), targets, base, m.steps, rng.random() < CONVERT_SHARE)


def write_input(item: Input, out: Path) -> Path:
    """Write an input out: an AWQ-v2 input as the file ``out``, an AWQ v1 input as the folder
    ``out`` with its files.  Returns the path to open first (the file, or the folder's first
    target)."""
    if not item.v1:
        out.write_bytes(item.data)
        return out
    out.mkdir(parents=True, exist_ok=True)
    write_folder(out, item.files)
    return out / item.targets[0]


def _names_of(data: bytes) -> tuple[str, ...]:
    names = []
    with contextlib.suppress(Exception):
        g = FileView.of(bytearray(data))
        if g.entries_ok():
            buf = bytearray(data)
            for i in range(g.count):
                r = g.name_range(buf, i)
                if r is not None:
                    with contextlib.suppress(UnicodeDecodeError):
                        names.append(bytes(buf[r[0] : r[1]]).decode("utf-8"))
    return tuple(names)


def load_seeds(with_v1: bool = True, with_v2: bool = True) -> list[Seed]:
    """Every vector of the manifest (weighted towards the accepted and the small ones) unless
    ``with_v2`` is false, then the AWQ v1 seeds unless ``with_v1`` is false."""
    if not with_v2:
        return v1.v1_seeds()
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    seeds = []
    for v in (v for v in manifest["vectors"] if "file" in v):  # a file set's folder aside
        data = (MANIFEST.parent / v["file"]).read_bytes()
        names = _names_of(data)
        weight = (3.0 if v["expect"] != "reject" else 1.0) / (1 + len(names) / 300)
        seeds.append(Seed(v["id"], data, names, weight))
    if with_v1:
        seeds += v1.v1_seeds()
    return seeds
