"""Issue 12, finding 10: full validation and ``dump --json`` in bounded memory, same answers.

* validation allocates well under 200 bytes per tensor at its peak and keeps nothing per
  tensor afterwards (tracemalloc, which NumPy reports its arrays to);
* ``dump --json`` streams, byte for byte what one ``json.dump`` of the whole document wrote;
* the slab order (offset, then name) is found without sorting Python objects;
* the layer check [LAY-7] from columns reports the offender a walk over every entry reports,
  also when every prefix hash collides.
"""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import reference
import reference.format.validate
from reference import dump
from reference.format import rules
from reference.format.order import slab_order
from reference.format.rules import check_layers
from reference.ground.errors import FormatError

VECTORS = Path(__file__).resolve().parent.parent / "conformance" / "vectors"
PARTS = ("qweight", "scales", "qzeros")


# ------------------------------------------------------------------ files


def many_tensors(path: Path, count: int) -> Path:
    """``count`` tensors named like MoE experts' parts: mostly empty (one shared offset), a
    few small payloads, and a few real quantised layers, so every pass has work."""
    layers = 4
    with reference.Writer(path, metadata={"model": "many"}) as w:
        for i in range(layers):
            q, z, s = np.zeros((128, 64), np.uint8), np.zeros((1, 64), np.uint8), None
            s = np.ones((1, 64), np.float16)
            w.add_linear(f"q.{i}", q=q, z=z, scales=s, bits=4, group_size=-1)
        for i in range(count - 3 * layers):
            name = f"model.layers.{i // 384}.mlp.experts.{i % 384 // 3}.{PARTS[i % 3]}"
            shape = (2,) if i % 10_000 == 0 else (0, 4)
            w.add(name, np.zeros(shape, np.float16))
    return path


def peak_above_start(run):
    """(peak, retained) bytes traced while ``run()`` runs, above what was traced before."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = run()
        current, peak = tracemalloc.get_traced_memory()
        return peak - start, current - start, result
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------ memory


@pytest.mark.slow
def test_validation_allocates_under_200_bytes_per_tensor(tmp_path):
    """At 20,000 tensors validate() peaks under 120 bytes a tensor (target 200; about 60 now;
    bf04b22, which kept a TensorInfo per entry, 450), and keeps nothing per tensor after.
    (tracemalloc slows validation eightfold: hence not 100,000.)"""
    count = 20_000
    path = many_tensors(tmp_path / "many.awq2", count)
    with reference.open(path) as f:
        peak, kept, _ = peak_above_start(f.validate)
        assert f.metadata == {"model": "many"}
    assert peak / count < 120, f"validate() peaked at {peak / count:.0f} B per tensor"
    assert kept < 64 << 10, f"validate() kept {kept} bytes"


@pytest.mark.slow
def test_dump_json_streams_in_bounded_memory(tmp_path):
    """dump --json of 10,000 tensors (most of them at one offset, so the slab order sorts
    them by name) peaks under 300 bytes a tensor (about 110 now); bf04b22 built the whole
    document, 760."""
    count = 10_000
    path = many_tensors(tmp_path / "many.awq2", count)
    sink = type("Sink", (), {"write": lambda self, text: len(text)})()  # /dev/null
    peak, _, status = peak_above_start(lambda: dump.main([str(path), "--json"], out=sink))
    assert status == 0
    assert peak / count < 300, f"dump --json peaked at {peak / count:.0f} B per tensor"


# ------------------------------------------------------------------ dump --json, byte for byte


def one_json_dump(path: Path) -> str:
    """What dump --json printed before it streamed: the whole document, then one json.dump."""
    with reference.Reader(path, validate=True) as f:
        infos = sorted(f.index.infos(), key=lambda t: (t.offset, t.name))
        doc = {**dump.summary(f, verified=False), "tensors": [t.to_dict() for t in infos]}
    out = io.StringIO()
    json.dump(doc, out, indent=2, ensure_ascii=True)
    return out.getvalue() + "\n"


def tricky_names(path: Path) -> Path:
    """Empty tensors sharing an offset, names alike for their first 8, 16, 24 bytes, differing
    by trailing NULs, non-ASCII and control characters; a payload between them; 0-d shapes."""
    names = ["a", "a\x00", "a\x00\x00", "a\x00b", "ab", "b", "é", "\u202e", "\x1b[31m", "z" * 300]
    names += [f"model.layers.{i}.mlp.experts.{j}.w" for i in (1, 10, 2) for j in (0, 1, 11)]
    names += ["model.layers.1.mlp.experts.0.w\x00", "model.layers.1.mlp.experts.0.", "m"]
    with reference.Writer(path, metadata={"k": ["v", {"x": None}], "ü": 1.5}) as w:
        for i, name in enumerate(names):
            w.add(name, np.zeros((0,) if i % 2 else (3, 0), np.int8))
            if i == 7:
                w.add("payload", np.arange(6, dtype=np.float32).reshape(2, 3))
        w.add("scalar", np.array(1.0, np.float64))
    return path


def vectors_and_files(tmp_path: Path) -> list[Path]:
    files = sorted(VECTORS.glob("*.awq2"))
    files.append(tricky_names(tmp_path / "tricky.awq2"))
    files.append(many_tensors(tmp_path / "many.awq2", 3_000))
    reference.save(tmp_path / "empty.awq2", {})
    files.append(tmp_path / "empty.awq2")
    return files


def test_dump_json_is_byte_identical_to_one_json_dump(tmp_path):
    """Every conformance vector and a few written files: valid ones print exactly the old
    document; invalid ones the same error report either way."""
    compared = 0
    for path in vectors_and_files(tmp_path):
        out = io.StringIO()
        status = dump.main([str(path), "--json"], out=out)
        if status == 0:
            assert out.getvalue() == one_json_dump(path), path.name
            compared += 1
        else:
            with pytest.raises(FormatError):
                reference.Reader(path, validate=True)
    assert compared >= 27


def test_dump_text_table_lists_every_tensor_in_slab_order(tmp_path):
    """The text table, two passes over the entries: every name, in slab order, in columns."""
    path = tricky_names(tmp_path / "tricky.awq2")
    out = io.StringIO()
    assert dump.main([str(path)], out=out) == 0
    lines = out.getvalue().splitlines()
    table = lines[lines.index("") + 1 :]
    with reference.open(path) as f:
        infos = sorted(f.index.infos(), key=lambda t: (t.offset, t.name))
    assert len(table) == len(infos) + 1 and table[0].startswith("offset")
    assert len({line.index("  ", line.index("0x")) for line in table[1:]}) == 1  # one width
    assert [line.rsplit("  ", 1)[-1] for line in table[1:]] == [
        reference.ground.text.escape(t.name) for t in infos
    ]


# ------------------------------------------------------------------ slab order


def test_slab_order_is_offset_then_name(tmp_path):
    for path in [tricky_names(tmp_path / "t.awq2"), *sorted(VECTORS.glob("y_*.awq2"))]:
        with reference.open(path) as f:
            infos = f.index.infos()
            want = sorted(range(len(infos)), key=lambda i: (infos[i].offset, infos[i].name))
            assert slab_order(f.index).tolist() == want, path.name
            assert f.entries() == [infos[i] for i in want]
            assert list(f.iter_entries()) == f.entries()


# ------------------------------------------------------------------ layers [LAY-7]


def random_layers(path: Path, rng: np.random.Generator, monkeypatch) -> None:
    """Layers whose parts are each valid on their own but that may break [LAY-7]: a part
    missing, dense, of the other family, with other k, n, bits or group size, or misnamed.
    The writer's own layer check is switched off to write them."""
    configs = [(128, 64, 4, -1), (128, 64, 4, 128), (128, 64, 8, 64), (256, 64, 4, 128)]
    prefixes = ["a", "a.b", "a.b.c", "x.qweight", "layer.0", "layer.1", "layer.10", "é"]
    tensors = {}
    for prefix in rng.choice(prefixes, size=rng.integers(1, 5), replace=False):
        layer = configs[rng.integers(len(configs))]
        family = "MARLIN" if rng.random() < 0.5 else "AWQ"
        for part in PARTS:
            roll = rng.random()
            if roll < 0.06:
                continue  # missing
            fields = configs[rng.integers(len(configs))] if roll < 0.12 else layer
            fam = ("AWQ" if family == "MARLIN" else "MARLIN") if roll > 0.94 else family
            name = f"{prefix}.{part}"
            if 0.12 <= roll < 0.16:
                name = f"{prefix}.{PARTS[(PARTS.index(part) + 1) % 3]}x"  # misnamed
            if 0.16 <= roll < 0.2:
                tensors[name] = (np.zeros((2, 3), np.int32), {})  # dense, named for the part
                continue
            k, n, bits, group = fields
            layout = f"{fam}_{part.upper()}"
            shape = rules.expected_quant_shape(layout, bits, group, k, n)
            dtype = np.float16 if part == "scales" else np.int32
            tensors[name] = (np.zeros(shape, dtype), dict(layout=layout, bits=bits,
                             group_size=group, k=k, n=n))  # fmt: skip
    tensors["dense.qzeros"] = (np.zeros(3, np.int32), {})
    monkeypatch.setattr(rules, "check_layers", lambda infos, offset_of: None)
    with reference.Writer(path) as w:
        for name, (array, fields) in tensors.items():
            w.add(name, array, **fields)
    monkeypatch.undo()


def error_of(run) -> tuple[object, ...] | None:
    try:
        run()
    except FormatError as exc:
        return (exc.code, exc.offset, exc.message, str(exc.expected), str(exc.found))
    return None


@pytest.mark.parametrize("collide", [False, True])
def test_layer_check_reports_what_a_walk_over_every_entry_reports(tmp_path, monkeypatch, collide):
    """Random layers, each file validated, against check_layers over every entry's info (the
    check as bf04b22 ran it); with ``collide`` every prefix hashes alike, so only the bytes
    tell layers apart, and a collision can neither join two layers nor hide a missing part."""
    rng = np.random.default_rng(12 + collide)
    outcomes = set()
    for trial in range(40):
        path = tmp_path / f"l{trial}.awq2"
        random_layers(path, rng, monkeypatch)
        if collide:
            monkeypatch.setattr(reference.format.validate, "_prefix_key", lambda prefix: 7)
        with reference.open(path) as f:
            walk = error_of(lambda: check_layers(f.index.infos(), f.index.geometry.entry_offset))
            assert error_of(f.validate) == walk, trial
            outcomes.add(walk and walk[2].split()[-1])
        monkeypatch.undo()
        path.unlink()
    assert None in outcomes and len(outcomes) >= 3  # valid files and several kinds of error


def test_a_hash_collision_cannot_join_two_layers(tmp_path, monkeypatch):
    """``a`` has qweight and scales, ``b`` only qzeros: with every prefix hashing alike the
    three still do not make a layer."""
    path = tmp_path / "c.awq2"
    monkeypatch.setattr(rules, "check_layers", lambda infos, offset_of: None)
    fields = dict(bits=4, group_size=-1, k=128, n=64)
    with reference.Writer(path) as w:
        w.add("a.qweight", np.zeros((128, 8), np.int32), layout="AWQ_QWEIGHT", **fields)
        w.add("a.scales", np.zeros((1, 64), np.float16), layout="AWQ_SCALES", **fields)
        w.add("b.qzeros", np.zeros((1, 8), np.int32), layout="AWQ_QZEROS", **fields)
    monkeypatch.undo()
    monkeypatch.setattr(reference.format.validate, "_prefix_key", lambda prefix: 0)
    with reference.open(path) as f, pytest.raises(FormatError) as info:
        f.validate()
    assert info.value.code == "BAD_QUANT_FIELDS" and "without" in info.value.message
