"""The seeds (every conformance vector, and two AWQ v1 checkpoints) and the inputs made from
them: input ``number`` of ``--seed K`` is one seed with one to four mutations, chosen by a
``random.Random`` seeded with ``"{K}/{number}"``, so any input can be rebuilt from its number."""

from __future__ import annotations

import contextlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass

from conformance.surgery import FileEditor
from tools import ROOT
from tools.fuzz import awq2, v1
from tools.fuzz.mutant import Mutant, Seed
from tools.fuzz.view import FileView

MANIFEST = ROOT / "conformance" / "manifest.json"


@dataclass
class Input:
    data: bytes
    config: bytes | None  # config.json to put beside it (AWQ v1 inputs), else none
    base: Seed
    steps: list[str]


def make_input(seeds: Sequence[Seed], seed: int, number: int) -> Input:
    """Input ``number``: deterministic in (seed, number)."""
    rng = random.Random(f"{seed}/{number}")
    base = rng.choices(seeds, [s.weight for s in seeds])[0]
    m = Mutant(FileEditor(base.data), rng, seeds, config=base.config)
    is_v1 = base.config is not None
    funcs, weights = (v1.FUNCS, v1.WEIGHTS) if is_v1 else (awq2.FUNCS, awq2.WEIGHTS)
    for _ in range(rng.choices((1, 2, 3, 4), (50, 25, 15, 10))[0]):
        rng.choices(funcs, weights)[0](m)
    if not is_v1 and rng.random() < (0.85 if m.structured else 0.25):
        awq2.refresh(m)
    return Input(bytes(m.ed.data), m.config, base, m.steps)


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


def load_seeds(with_v1: bool = True) -> list[Seed]:
    """Every vector of the manifest (weighted towards the accepted and the small ones), then
    the AWQ v1 seeds unless ``with_v1`` is false."""
    manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    seeds = []
    for v in manifest["vectors"]:
        data = (MANIFEST.parent / v["file"]).read_bytes()
        names = _names_of(data)
        weight = (3.0 if v["expect"] != "reject" else 1.0) / (1 + len(names) / 300)
        seeds.append(Seed(v["id"], data, names, weight))
    if with_v1:
        seeds += v1.v1_seeds()
    return seeds
