"""The entry table checked at once (reference.format.entrytable, validate._entries_at_once) decides
exactly what the entry-by-entry walk decides: the same infos when the walk passes, None (so
that the walk runs and raises) when it fails [RD-2, RD-4, ENT-*, IDX-6..8, NAME-*, LAY-1..6].

Compared on every conformance vector and on structure-aware mutants of them (the fuzzer's
own mutators, checksums refreshed so that most get past ENT-9 into the deep checks)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference
from reference.format import entrytable, validate
from reference.format.entrytable import checked_infos
from reference.format.index import Index
from reference.ground.errors import FormatError
from tools.fuzz.inputs import load_seeds, make_input

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = json.loads((ROOT / "conformance" / "manifest.json").read_text(encoding="utf-8"))
FILE_VECTORS = [v for v in MANIFEST["vectors"] if "file" in v]
MUTANTS = 1500


def _walk_infos(index: Index) -> tuple[str, Any]:
    try:
        return "ok", [index.info(index.record(i)) for i in range(index.tensor_count)]
    except FormatError as exc:
        return "error", exc.code


def _walk_parts(index: Index) -> tuple[str, Any]:
    try:
        return "ok", validate._walk_entries(index)
    except FormatError as exc:
        return "error", exc.code


def compare(data: bytes) -> str:
    """Both paths on one file; returns what the walks said ("opening" when RD-1 fails)."""
    try:
        index = Index(data)
    except FormatError:
        return "opening"
    walk, walked = _walk_infos(index)
    fast = checked_infos(*index.entry_sections(), slab_end=index.header["index_offset"])
    if walk == "ok":
        assert fast == walked
    else:
        assert fast is None, f"the walk says {walked}, the table at once passed"
    entry_pass, parts = _walk_parts(index)
    at_once = validate._entries_at_once(index, keep=True)
    if entry_pass == "error":
        assert at_once is None, f"the entry pass says {parts}, the table at once passed"
        return f"pass {parts}"
    assert at_once is not None
    assert np.array_equal(at_once[0].code, parts.code)
    assert np.array_equal(at_once[0].key, parts.key)
    assert at_once[1] == walked
    return "passed"


@pytest.mark.parametrize("vector", FILE_VECTORS, ids=[v["id"] for v in FILE_VECTORS])
def test_every_vector_gets_the_same_answer_both_ways(vector: dict[str, Any]) -> None:
    compare((ROOT / "conformance" / vector["file"]).read_bytes())


@pytest.mark.parametrize("run", [None, 3])
def test_mutants_get_the_same_answer_both_ways(run, monkeypatch) -> None:
    """Also with runs of 3 entries (the passes copy and check runs of entries; every run
    boundary then falls inside a model's table)."""
    if run:
        monkeypatch.setattr(validate, "_RUN", run)
        monkeypatch.setattr(entrytable, "_CHUNK", run)
    seeds = load_seeds(with_v1=False)
    said = Counter(compare(make_input(seeds, 2026, n).data) for n in range(MUTANTS))
    # Not vacuous: many mutants reach the entry pass, and both answers are common.
    assert said["passed"] >= 150, said
    failed = sum(count for what, count in said.items() if what.startswith("pass "))
    assert failed >= 200, said
    assert len([what for what in said if what.startswith("pass ")]) >= 8, said


def test_validation_gives_the_walks_error_for_every_bad_table(monkeypatch) -> None:
    """With the table-at-once path switched off, every mutant gets the same code."""
    seeds = load_seeds(with_v1=False)
    inputs = [make_input(seeds, 7, n).data for n in range(300)]

    def codes() -> list[str]:
        out = []
        for data in inputs:
            try:
                index = Index(data)
                validate.validate_index(index)
                out.append("valid")
            except FormatError as exc:
                out.append(exc.code)
        return out

    with_fast = codes()
    monkeypatch.setattr(validate, "_entries_at_once", lambda index, keep=False: None)
    assert codes() == with_fast


def test_validated_entries_are_the_entries() -> None:
    accepted = [v for v in FILE_VECTORS if v["expect"] == "accept"]
    for vector in accepted:
        with reference.open(ROOT / "conformance" / vector["file"]) as f:
            assert f.validated_entries() == f.entries()


def _code(call: Any) -> str | None:
    try:
        call()
    except FormatError as exc:
        return exc.code
    return None


def test_validated_entries_raise_what_validate_raises() -> None:
    rejected = [v for v in FILE_VECTORS if v["expect"] == "reject"]
    seen = 0
    for vector in rejected:
        try:
            f = reference.open(ROOT / "conformance" / vector["file"])
        except FormatError:
            continue
        with f:
            code = _code(f.validate)
            assert _code(f.validated_entries) == code
        seen += code is not None
    assert seen >= 50


# ------------------------------------------------------------------ listing, and the slab alone


@pytest.mark.parametrize(
    ("vector", "code"), [("n_entry_checksum", "BAD_ENTRY_CHECKSUM"), ("n_empty_name", "EMPTY_NAME")]
)
def test_listing_a_bad_table_raises_what_the_walk_finds(vector: str, code: str) -> None:
    """``entries()`` of a table the fast path refuses walks it and raises the first failure,
    the same as full validation's entry pass [ENT-9, NAME-1]."""
    path = ROOT / "conformance" / "vectors" / f"{vector}.awq2"
    with pytest.raises(FormatError) as full:
        reference.open(path, validate=True).close()
    with reference.open(path) as f, pytest.raises(FormatError) as listed:
        f.entries()
    assert listed.value.code == full.value.code == code
    assert listed.value.offset == full.value.offset


@pytest.mark.parametrize(
    ("vector", "code"),
    [("n_overlapping_payloads", "OVERLAP"), ("n_gap_before_payload", "SLAB_GAP"),
     ("n_gap_before_index", "SLAB_GAP")],
)  # fmt: skip
def test_check_slab_raises_what_full_validation_does(vector: str, code: str) -> None:
    """``validate.check_slab``, the placement step alone [SLAB-4, SLAB-5]: the same error as
    full validation, whose first failure these vectors' is."""
    path = ROOT / "conformance" / "vectors" / f"{vector}.awq2"
    with pytest.raises(FormatError) as full:
        reference.open(path, validate=True).close()
    with reference.open(path) as f, pytest.raises(FormatError) as alone:
        validate.check_slab(f.index)
    assert full.value.code == alone.value.code == code
    assert full.value.offset == alone.value.offset


def test_check_slab_passes_every_must_accept_file() -> None:
    accepted = [v for v in FILE_VECTORS if v["expect"] == "accept"]
    assert len(accepted) >= 30
    for v in accepted:
        with reference.open(ROOT / "conformance" / v["file"]) as f:
            validate.check_slab(f.index)
