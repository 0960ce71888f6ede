"""The fuzzer's AWQ v1 inputs (``tools/fuzz``): checkpoint folders built deterministically
from their number, and JSON mutators that reach every JSON file of a checkpoint."""

from __future__ import annotations

import json

from tools.fuzz.inputs import FOLDER, load_seeds, make_input
from tools.fuzz.jsontext import CONFIG, INDEX, QUANT_CONFIG, render

N = 300


def test_v1_inputs_are_deterministic_folders():
    seeds = load_seeds(with_v1=True, with_v2=False)
    first = [make_input(seeds, 7, n) for n in range(N)]
    again = [make_input(seeds, 7, n) for n in range(N)]
    for a, b in zip(first, again, strict=True):
        assert (a.files, a.targets, a.steps, a.convert) == (b.files, b.targets, b.steps, b.convert)
    assert all(item.v1 for item in first)
    assert any(FOLDER in item.targets and INDEX in item.files for item in first)
    assert any(item.targets[0] == "model.safetensors" for item in first)
    kinds = {s.split(":")[0] for item in first for s in item.steps}
    assert {CONFIG, QUANT_CONFIG, INDEX} <= kinds, kinds


def test_render_puts_raw_text_in_place():
    import random

    doc = {"quantization_config": {"bits": 4}, "hidden_size": 8}
    text = render(doc, ("quantization_config", "bits"), b"NaN", random.Random(0))
    assert b'"bits": NaN' in text
    deep = render(doc, ("weight_map",), b"[" * 100_000 + b"]" * 100_000, random.Random(0))
    assert deep is not None and deep.count(b"[") == 100_000
    assert json.loads(render(doc, (), b"{}", random.Random(0)) or b"") == {}
