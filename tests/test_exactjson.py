"""The adapter protocol's exact comparison (``conformance.exactjson``) and the documents
the reference adapter prints [ADP-1, ADP-2, ADP-3, ADP-4]."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from conformance import exactjson, run, suite
from conformance.adapters import reference as adapter

CONF = Path(__file__).resolve().parent.parent / "conformance"


def same(a: str, b: str) -> bool:
    return exactjson.loads(a) == exactjson.loads(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1", "1.0"),  # an integer and a float of one value
        ("-0", "0"),
        ("0.0", "-0.0"),
        ("1E5", "1e5"),  # the same value, other characters
        ("1E5", "100000"),
        ("12345678901234567890", "12345678901234567000"),  # what binary64 prints
        ("1.0000000000000001", "1.0"),
        ("1e-400", "0"),
        ('"1"', "1"),  # a string is not a number
        ("true", "1"),
        ("null", "0"),
        ("[1, 2]", "[2, 1]"),  # arrays in order
        ('{"a": 1}', '{"a": 1, "b": 2}'),
    ],
)
def test_different_characters_are_different_numbers(a, b):
    """ADP-1: numbers compare by their characters, nothing else converts."""
    assert not same(a, b) and exactjson.difference(exactjson.loads(a), exactjson.loads(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('"\\u00e9"', '"é"'),  # strings after unescaping
        ('"\\ud83d\\ude00"', '"😀"'),  # a surrogate pair is one character
        ('"a\\/b"', '"a/b"'),
        ('"\\u0000"', '"\\u0000"'),
        ('{"\\u0061": 1}', '{"a": 1}'),  # keys too
        ('{"a": 1, "b": [2.50]}', '{"b": [2.50], "a": 1}'),  # objects as maps
        ("12345678901234567890", " 12345678901234567890 "),
    ],
)
def test_escapes_whitespace_and_key_order_do_not_matter(a, b):
    """ADP-1: any valid escaping, objects compared as maps."""
    assert same(a, b) and exactjson.difference(exactjson.loads(a), exactjson.loads(b)) == ""


def test_dumps_writes_each_number_as_read():
    text = '{"b": [-0, 1.0, 1E5, 1e-400, 12345678901234567890], "a": {"c": "\\u00e9"}}'
    assert exactjson.dumps(exactjson.loads(text)) == text.replace("\\u00e9", "é")
    assert exactjson.dumps({"n": 2**64 - 1, "t": True}) == '{"n": 18446744073709551615, "t": true}'
    with pytest.raises(TypeError):
        exactjson.dumps({"x": 0.1})  # a float has no lexeme: refused, never rounded


@pytest.mark.parametrize("text", ['{"a": 1, "a": 2}', '{"a": NaN}', "[Infinity]"])
def test_no_valid_document_holds_duplicates_or_non_numbers(text):
    with pytest.raises(ValueError):
        exactjson.loads(text)


def test_difference_names_the_place():
    want, got = exactjson.loads('{"a": [1, 2.0]}'), exactjson.loads('{"a": [1, 2]}')
    assert exactjson.difference(want, got, "metadata") == (
        'metadata["a"][1]: expected 2.0, found 2'
    )


def _expected(vector_id: str) -> dict:
    manifest = suite.load(CONF).manifest
    return next(v for v in manifest["vectors"] if v["id"] == vector_id)["content"]


def test_runner_compares_metadata_and_dims_exactly():
    """ADP-1, ADP-2: the manifest's content keeps the file's characters; a loader printing the
    same values in binary64's spelling fails; layers and tensors in any order pass [ADP-3]."""
    want = _expected("y_metadata_exact_numbers")
    good = exactjson.loads(exactjson.dumps(want))
    assert run.compare(want, good) == ""
    as_values = json.dumps(json.loads(exactjson.dumps(want["metadata"])))  # Python's spelling
    rounded = {**want, "metadata": exactjson.loads(as_values)}
    assert run.compare(want, rounded).startswith("metadata differs: metadata[")
    dims = _expected("y_dim_2p53_plus_1")
    assert exactjson.dumps(dims["tensors"][0]["shape"]) == "[0, 9007199254740993]"
    doubled = exactjson.loads(exactjson.dumps(dims).replace("9007199254740993", "9007199254740992"))
    assert "shape expected" in run.compare(dims, doubled)
    sample = _expected("y_sample")
    shuffled = {**sample, "tensors": sample["tensors"][::-1], "layers": sample["layers"][::-1]}
    assert run.compare(sample, shuffled) == ""


def test_reference_error_documents_match_their_schema(capsys):
    """ADP-4: every reject of the reference adapter prints the error document, offset an
    integer (checked on every must-reject vector)."""
    schema = json.loads((CONF / "schema" / "adapter-error.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    manifest = json.loads((CONF / "manifest.json").read_text(encoding="utf-8"))
    rejects = [v for v in manifest["vectors"] if v["expect"] == "reject"]
    for vector in rejects:
        assert adapter.main([str(CONF / (vector.get("file") or vector["folder"]))]) == 1, vector[
            "id"
        ]
        doc = json.loads(capsys.readouterr().out)
        validator.validate(doc)
        assert doc["error"]["code"] == vector["error_code"], vector["id"]
        if "folder" in vector and doc["error"]["code"].startswith("SET_"):
            continue  # a set's own error may name no byte of a file [ADP-4]
        assert type(doc["error"]["offset"]) is int, vector["id"]
        size = vector.get(
            "size", max((f["size"] for f in vector.get("folder_files", [])), default=0)
        )
        assert doc["error"]["offset"] <= size, vector["id"]  # TRUNCATED: the end
