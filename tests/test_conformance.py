"""The conformance suite: committed vectors are reproducible, the manifest is well formed,
the reference passes, and the runner catches loaders that accept or reject everything."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import jsonschema
import pytest
from referencing import Registry, Resource

from conformance import exactjson, run, suite
from conformance.adapters.reference import describe
from tools import traceability
from tools.vectors import generate

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conformance"
MANIFEST = json.loads((CONF / "manifest.json").read_text(encoding="utf-8"))
EXACT_CONTENT = {
    v["id"]: v["content"] for v in suite.load(CONF).manifest["vectors"] if "content" in v
}


def _schemas() -> tuple[dict, dict, Registry]:
    adapter = json.loads((CONF / "schema" / "adapter-output.schema.json").read_text())
    manifest = json.loads((CONF / "schema" / "manifest.schema.json").read_text())
    registry = Registry().with_resources([
        (adapter["$id"], Resource.from_contents(adapter)),
        ("adapter-output.schema.json", Resource.from_contents(adapter)),
    ])  # fmt: skip
    return adapter, manifest, registry


def test_regenerating_reproduces_the_committed_vectors_exactly(tmp_path):
    generate.write_all(tmp_path)
    assert (tmp_path / "manifest.json").read_bytes() == (CONF / "manifest.json").read_bytes()
    fresh = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "vectors").rglob("*"))
    committed = sorted(p.relative_to(CONF).as_posix() for p in (CONF / "vectors").rglob("*"))
    assert fresh == committed
    for name in fresh:  # a file, or a set vector's folder and its files
        fresh_path, committed_path = tmp_path / name, CONF / name
        assert fresh_path.is_dir() == committed_path.is_dir(), name
        if not fresh_path.is_dir():
            assert fresh_path.read_bytes() == committed_path.read_bytes(), name


def test_manifest_matches_its_schema_and_files():
    _, schema, registry = _schemas()
    jsonschema.Draft202012Validator(schema, registry=registry).validate(MANIFEST)
    ids = [v["id"] for v in MANIFEST["vectors"]]
    assert len(ids) == len(set(ids))
    for v in MANIFEST["vectors"]:
        for item in suite.vector_files(v):  # a file, or every file of a set's folder
            data = (CONF / item.path).read_bytes()
            assert hashlib.sha256(data).hexdigest() == item.sha256 and len(data) == item.size
        assert v["id"][0] == {"accept": "y", "reject": "n", "either": "i"}[v["expect"]]


def test_vector_classes_cover_what_the_suite_promises():
    by_class: dict[str, int] = {}
    for v in MANIFEST["vectors"]:
        by_class[v["expect"]] = by_class.get(v["expect"], 0) + 1
    assert by_class["accept"] >= 20 and by_class["reject"] >= 60 and by_class["either"] <= 3
    codes = {v.get("error_code") for v in MANIFEST["vectors"]}
    from spec.registry import ERROR_CODES

    # checkpoint conversion (LegacyError: AWQ v1, compressed-tensors) and optional features
    # have no AWQ-v2 file to show them; a rank set's writer refusals (SplitError) are about a
    # checkpoint, not a file (tests/test_rankset.py); file sets (SetError) have folder vectors
    writer_classes = ("LegacyError", "SplitError")
    reader_codes = {
        e.code
        for e in ERROR_CODES
        if e.error_class not in writer_classes and not e.code.startswith("UNSUPPORTED")
    }
    assert reader_codes <= codes, f"error codes without a vector: {reader_codes - codes}"


@pytest.mark.parametrize("vector", [v for v in MANIFEST["vectors"] if v["expect"] != "reject"],
                         ids=lambda v: v["id"])  # fmt: skip
def test_reference_reads_every_accept_vector_as_the_manifest_says(vector):
    """Numbers compared by their characters, as the runner does [ADP-1, ADP-2]."""
    adapter_schema, _, _ = _schemas()
    text = exactjson.dumps(describe(str(CONF / suite.vector_path(vector))))
    jsonschema.Draft202012Validator(adapter_schema).validate(json.loads(text))
    assert run.compare(EXACT_CONTENT[vector["id"]], exactjson.loads(text)) == ""


def test_traceability_page_is_fresh_and_every_must_is_covered():
    page = (ROOT / "docs" / "conformance" / "traceability.md").read_text(encoding="utf-8")
    assert page == traceability.render(MANIFEST), "run python -m tools.regen"
    assert traceability.uncovered(MANIFEST) == []


def _runner(tmp_path: Path, loader: str, only: str) -> tuple[int, dict]:
    report = tmp_path / "report.json"
    status = run.main(["--loader", loader, "--only", only, "--report-json", str(report),
                       "--junit-xml", str(tmp_path / "junit.xml"), "--quiet"])  # fmt: skip
    return status, json.loads(report.read_text())["outcomes"]


SUBSET = "^(y_sample|y_marlin_4bit_g128|n_bad_magic|n_header_checksum|n_overlapping_payloads|i_marlin_8bit_g128)$"


def test_reference_loader_passes_through_the_runner(tmp_path):
    status, report = _runner(tmp_path, f"ref={run.REFERENCE_LOADER}", SUBSET)
    assert status == 0, report
    assert len(report) == 6 and all(o["passed"] for o in report)
    assert "<testsuite" in (tmp_path / "junit.xml").read_text()


def test_a_loader_that_accepts_everything_fails(tmp_path, capsys):
    accept_all = f'{sys.executable} -c "print(\'{{\\"tensors\\": [], \\"layers\\": [], \\"metadata\\": {{}}}}\')" {{file}}'
    status, report = _runner(tmp_path, f"yes={accept_all}", SUBSET)
    assert status == 1
    failed = {o["vector"] for o in report if not o["passed"]}
    assert {"n_bad_magic", "n_header_checksum", "n_overlapping_payloads", "y_sample"} <= failed
    out = capsys.readouterr().out
    assert "n_bad_magic (HDR-1" in out  # the failure names the vector and its requirements


def test_a_loader_that_rejects_everything_fails(tmp_path):
    status, report = _runner(
        tmp_path, f'no={sys.executable} -c "raise SystemExit(1)" {{file}}', SUBSET
    )
    assert status == 1
    failed = {o["vector"] for o in report if not o["passed"]}
    assert failed == {"y_sample", "y_marlin_4bit_g128", "i_marlin_8bit_g128"}


def test_crashes_timeouts_and_wrong_codes_are_failures(tmp_path):
    crash = f'crash={sys.executable} -c "raise SystemExit(3)" {{file}}'
    status, report = _runner(tmp_path, crash, "^n_bad_magic$")
    assert status == 1 and report[0]["kind"] == "crash"
    wrong = f"wrong={sys.executable} -c \"print('BAD_LENGTH'); raise SystemExit(1)\" {{file}}"
    status, report = _runner(tmp_path, wrong, "^n_bad_magic$")
    assert status == 1 and "expected BAD_MAGIC" in report[0]["detail"]
    slow = f'slow={sys.executable} -c "import time; time.sleep(5)" {{file}}'
    assert (
        run.main(["--loader", slow, "--only", "^n_bad_magic$", "--timeout", "0.5", "--quiet"]) == 1
    )


def test_manifest_layer_hashes_are_independent_of_the_codec():
    """The layer values in the manifest come from the generator's inputs: recompute one
    vector's codes and dequantised weights here from the same seed, without the reference."""
    import numpy as np

    layer = generate.draw_layer("layer.b4.g64", 256, 128, 4, 64, 10 * 4 + 64)
    vector = next(v for v in MANIFEST["vectors"] if v["id"] == "y_marlin_4bit_g64")
    (expected,) = vector["content"]["layers"]
    assert expected["codes_sha256"] == hashlib.sha256(layer.q.tobytes()).hexdigest()
    w = np.empty((256, 128), np.float32)
    for row in range(256):
        g = row // 64
        w[row] = (layer.q[row].astype(np.float32) - layer.z[g].astype(np.float32)) * layer.s[
            g
        ].astype(np.float32)
    assert expected["dequantized_sha256"] == hashlib.sha256(w.tobytes()).hexdigest()


def _set_vector(vid: str) -> dict:
    return next(v for v in MANIFEST["vectors"] if v["id"] == vid)


def test_the_runner_matches_a_rank_sets_tensors_by_rank_and_name():
    """ADP-5, ADP-3: a rank set's document lists each rank's tensors with its rank; swapping
    two ranks' values, dropping a rank, or leaving out ``set`` is a difference."""
    vector = _set_vector("y_set_rank_tp2")
    plain = describe(str(CONF / vector["folder"]))
    ranks = {t["rank"] for t in plain["tensors"]} | {layer["rank"] for layer in plain["layers"]}
    assert ranks == {0, 1} and plain["set"] == {"kind": "rank", "tp_size": 2}
    got = exactjson.loads(exactjson.dumps(plain))
    want = EXACT_CONTENT[vector["id"]]
    assert run.compare(want, got) == ""
    one = exactjson.loads("[0, 1]")  # ranks as the runner reads them: numbers by lexeme
    swapped = {**got, "tensors": [{**t, "rank": one[t["rank"] == one[0]]} for t in got["tensors"]]}
    assert "tensor 'model.embed_tokens.weight' of rank 0: sha256 expected" in run.compare(
        want, swapped
    )
    rank0 = {**got, "tensors": [t for t in got["tensors"] if t["rank"] == 0]}
    assert run.compare(want, rank0).startswith("tensor names differ: missing [")
    unranked = {
        **got,
        "layers": [{k: v for k, v in x.items() if k != "rank"} for x in got["layers"]],
    }
    assert run.compare(want, unranked).startswith("quantised layers differ")
    assert run.compare(want, {k: v for k, v in got.items() if k != "set"}).startswith(
        "set expected {'kind': 'rank', 'tp_size': 2}, found None"
    )


def test_a_file_document_with_a_set_is_a_difference():
    """ADP-5: a file's document has no ``set``."""
    vector = _set_vector("y_sample")
    got = describe(str(CONF / vector["file"]))
    doc = exactjson.loads(exactjson.dumps({**got, "set": {"kind": "split"}}))
    assert run.compare(EXACT_CONTENT["y_sample"], doc).startswith("set expected None")


def test_every_set_error_code_has_a_set_vector():
    """Each code of the set chapter's table has a must-reject folder vector [SET-8]."""
    from spec.registry import ERROR_CODES

    set_codes = {e.code for e in ERROR_CODES if e.error_class == "SetError"}
    folder_codes = {v.get("error_code") for v in MANIFEST["vectors"] if "folder" in v}
    assert set_codes <= folder_codes, set_codes - folder_codes
