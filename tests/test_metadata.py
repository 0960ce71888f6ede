"""The metadata rules at their edges [META-1, META-2, META-5, META-6, LIM-5]."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
from reference.format.metadata import encode_metadata, lexical_depth, parse_metadata
from reference.format.rules import json_depth
from spec.constants import MAX_METADATA_DEPTH


def _code(raw: bytes) -> str | None:
    try:
        parse_metadata(raw, offset=0)
    except reference.FormatError as exc:
        return exc.code
    return None


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b'{"a":1' + b"0" * 99 + b"}", None),  # 100 bytes: the longest number
        (b'{"a":1' + b"0" * 100 + b"}", "BAD_METADATA"),  # 101 bytes
        (b'{"a":-1' + b"0" * 98 + b"}", None),  # the sign counts: 100 bytes
        (b'{"a":1e308}', None),
        (b'{"a":1.7976931348623157e308}', None),  # the largest binary64
        (b'{"a":1e309}', "BAD_METADATA"),  # rounds to infinity
        (b'{"a":-1e309}', "BAD_METADATA"),
        (b'{"a":1e-400}', None),  # rounds to zero: finite
        (b'{"a":NaN}', "BAD_METADATA"),
        (b'{"a":"\\ud83d\\ude00"}', None),  # an escaped pair: one character
        (b'{"a":"\\ud800"}', "BAD_METADATA"),  # high half alone
        (b'{"a":"\\udc00"}', "BAD_METADATA"),  # low half alone
        (b'{"\\ud800":1}', "BAD_METADATA"),  # in a key too
        (b'{"a":"\\ud800\\u0041"}', "BAD_METADATA"),  # high half, then not a low half
        (b'{"a":1,"\\u0061":2}', "BAD_METADATA"),  # duplicates after decoding
        (b' {"a":1}\n', None),  # whitespace around the object
        (b"\xef\xbb\xbf{}", "BAD_METADATA"),  # a byte order mark
        (b"[1]", "BAD_METADATA"),  # not an object
        # 2.0 clarifications: the e and its sign count: 1, 93 zeros, e+0001 is a 100-byte token
        (b'{"a":1' + b"0" * 93 + b"e+0001}", None),
        (b'{"a":1' + b"0" * 94 + b"e+0001}", "BAD_METADATA"),  # 101 bytes, 99 without e, +
        (b'{"a":-1' + b"0" * 92 + b"E-0001}", None),  # 100 bytes with sign, E and -
        (b'{"a":"\\udc00\\ud800"}', "BAD_METADATA"),  # a low half before a high one
        (b'{"a":"x\ty"}', "BAD_METADATA"),  # a raw tab inside a string
        (b'{"a":"x\x00y"}', "BAD_METADATA"),  # a raw U+0000
        (b'{"a":"x\x1fy"}', "BAD_METADATA"),  # a raw U+001F
        (b'{"a":"x\\u0009\\u0000y"}', None),  # the same characters escaped
        (b'{"a":"\xef\xbb\xbf"}', None),  # U+FEFF inside a string: a character
        (b'{"\xef\xbb\xbfk":"\\ufeff"}', None),  # at the start of a key, and escaped
        (b" \xef\xbb\xbf{}", "BAD_METADATA"),  # U+FEFF after whitespace: not JSON
        (b"{}\xef\xbb\xbf", "BAD_METADATA"),  # nor after the object
    ],
)
def test_numbers_strings_and_keys_at_their_edges(raw, code):
    """META-1, META-2 and META-5, one document each."""
    assert _code(raw) == code


def _nested(depth: int) -> bytes:
    return b'{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize(
    "depth", [MAX_METADATA_DEPTH - 1, MAX_METADATA_DEPTH, MAX_METADATA_DEPTH + 1]
)
def test_depth_is_measured_before_the_grammar(depth):
    """META-6: at the limit and one over, valid and malformed (unclosed, a bad token after
    the brackets): over the limit is LIMIT_METADATA whatever follows; at it, the grammar
    decides."""
    over = depth > MAX_METADATA_DEPTH
    assert _code(_nested(depth)) == ("LIMIT_METADATA" if over else None)
    unclosed = b'{"a":' + b"[" * (depth - 1)
    assert _code(unclosed) == ("LIMIT_METADATA" if over else "BAD_METADATA")
    bad_token = b'{"a":' + b"[" * (depth - 1) + b"nope"
    assert _code(bad_token) == ("LIMIT_METADATA" if over else "BAD_METADATA")


def test_brackets_inside_strings_and_escaped_quotes_do_not_count():
    """META-6's lexical pass skips strings, and a backslash skips the byte after it."""
    deep_text = "[" * 200
    assert lexical_depth(json.dumps({"a": deep_text, "b": '\\"[[['}).encode()) == 1
    assert _code(json.dumps({"a": deep_text}).encode()) is None
    assert lexical_depth(b'{"a":"\\\\"}') == 1  # an escaped backslash, then the closing quote
    assert lexical_depth(b"]]]][[") == 0  # closers below zero are counted, not clamped


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), json_values, max_size=4))
def test_lexical_depth_is_the_nesting_depth_of_valid_documents(doc):
    """For valid JSON, META-6's pass measures what LIM-5 means by nesting."""
    raw = json.dumps(doc, ensure_ascii=False).encode()
    assert lexical_depth(raw) == json_depth(doc)
    assert parse_metadata(raw, offset=0) == doc


@pytest.mark.parametrize(
    "doc",
    [{"a": float("inf")}, {"a": float("nan")}, {"a": 10**100}, {"a": "\ud800"}, {"\udc00": 1}],
)
def test_the_writer_refuses_what_a_reader_would_reject(doc):
    with pytest.raises(ValueError):
        encode_metadata(doc)


def test_the_writer_accepts_the_edges_a_reader_accepts():
    doc = {"big": 10**99, "max": 1.7976931348623157e308, "tiny": 5e-324, "emoji": "\U0001f600"}
    assert parse_metadata(encode_metadata(doc), offset=0) == doc
