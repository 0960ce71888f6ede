"""The metadata document: strict JSON, checked in the spec's order [META-1, META-2, META-5,
META-6, LIM-5], and its canonical encoding for the writer [WR-1].

Reading checks, in this order (the first failure gives the code):

1. no byte order mark, valid UTF-8 (``BAD_METADATA``) [META-1];
2. the nesting depth, by one lexical pass over the text, before anything is parsed
   (``LIMIT_METADATA``, whatever the rest of the text) [META-6, LIM-5];
3. the JSON grammar of one object, duplicate keys after decoding escapes, no ``NaN`` or
   ``Infinity`` tokens (``BAD_METADATA``) [META-2];
4. every number at most 100 bytes long and finite as binary64, no ``\\u`` escape of an
   unpaired surrogate (``BAD_METADATA``) [META-5].

Steps 3 and 4 are one parse: their failures share a code, so their order does not matter.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from reference.format import rules
from reference.ground.errors import error
from spec.constants import MAX_METADATA_DEPTH, MAX_METADATA_LENGTH

#: META-5: the longest number token (sign, digits, point and exponent included).
MAX_NUMBER_LENGTH = 100

#: A string as META-6's lexical pass sees it: from a quote, every byte up to the next quote
#: not escaped by a backslash (or to the end of an unterminated string).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_OPENERS = np.zeros(256, np.int8)
_OPENERS[[ord("["), ord("{")]] = 1
_OPENERS[[ord("]"), ord("}")]] = -1


#: Bytes counted per step of :func:`lexical_depth`: its memory is this times 8, whatever the
#: size of the text (a 100 MB safetensors header included).
_DEPTH_CHUNK = 1 << 20


def lexical_depth(raw: bytes) -> int:
    """META-6: the deepest nesting of the text, strings skipped; malformed text included
    (closing brackets are counted even below zero)."""
    outside = np.frombuffer(_STRING.sub(b"", raw), np.uint8)
    level = deepest = 0
    for start in range(0, len(outside), _DEPTH_CHUNK):
        running = np.cumsum(_OPENERS[outside[start : start + _DEPTH_CHUNK]], dtype=np.int64)
        running += level
        deepest = max(deepest, int(running.max()))
        level = int(running[-1])
    return deepest


def _bad(offset: int, message: str, found: str, expected: str = "a JSON object") -> Exception:
    return error("BAD_METADATA", message, offset=offset, expected=expected, found=found[:200])


def parse_metadata(raw: bytes, *, offset: int) -> dict[str, Any]:
    """Parse the metadata bytes (checksum already checked [META-4]); ``offset`` is theirs in
    the file, for errors."""
    raw = bytes(raw)
    if raw.startswith(b"\xef\xbb\xbf"):
        raise _bad(offset, "metadata starts with a byte order mark", "EF BB BF", "UTF-8 text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(offset + exc.start, "metadata is not UTF-8", raw[exc.start : exc.start + 4]
                   .hex(" "), "UTF-8 text") from exc  # fmt: skip
    depth = lexical_depth(raw)
    if depth > MAX_METADATA_DEPTH:
        raise error("LIMIT_METADATA", "metadata nested too deeply", offset=offset,
                    expected=f"depth <= {MAX_METADATA_DEPTH}", found=depth)  # fmt: skip

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"duplicate key {key!r}")
            out[key] = value
        return out

    def no_constants(token: str) -> Any:
        raise ValueError(f"{token} is not JSON")

    def number(token: str, convert: Any) -> Any:
        if len(token) > MAX_NUMBER_LENGTH:
            raise ValueError(f"a number of {len(token)} bytes (at most {MAX_NUMBER_LENGTH})")
        value = convert(token)
        if convert is float and math.isinf(value):
            raise ValueError(f"{token} is outside the range of binary64")
        return value

    try:
        document = json.loads(
            text,
            object_pairs_hook=no_duplicates,
            parse_constant=no_constants,
            parse_float=lambda t: number(t, float),
            parse_int=lambda t: number(t, int),
        )
        _no_lone_surrogates(document)
    except ValueError as exc:  # json.JSONDecodeError, the hooks' errors
        raise _bad(offset, "metadata is not strict JSON", str(exc)) from exc
    if not isinstance(document, dict):
        raise _bad(offset, "metadata is not a JSON object", type(document).__name__)
    return document


def _no_lone_surrogates(document: Any) -> None:
    """META-5: every string and key is Unicode scalar values (JSON's ``\\ud800`` is not).

    One iterator per open level: memory follows the depth, not the number of elements."""
    stack = [iter((document,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict):
                stack.append(itertools.chain.from_iterable(item.items()))
                break
            if isinstance(item, list):
                stack.append(iter(item))
                break
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(f"an unpaired surrogate escape in {item[:40]!r}") from exc
        else:
            stack.pop()


def encode_metadata(metadata: Mapping[str, Any] | None) -> bytes:
    """Canonical UTF-8 JSON of the metadata [META-1, META-2, WR-1]: sorted keys, no spaces.

    Refused (``ValueError``): what a reader would reject [META-5, LIM-5]: NaN or infinite
    numbers, numbers over 100 bytes, unpaired surrogates, too long or too deep documents.
    """
    if metadata is None:
        return b""
    if not isinstance(metadata, Mapping):
        raise TypeError("metadata must be a mapping (a JSON object)")
    if rules.json_depth(metadata) > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata nests deeper than {MAX_METADATA_DEPTH} levels [LIM-5]")
    text = json.dumps(
        metadata, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False
    )
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"metadata holds an unpaired surrogate [META-5]: {exc}") from exc
    if len(raw) > MAX_METADATA_LENGTH:
        raise ValueError(
            f"metadata is {len(raw)} bytes, over the limit {MAX_METADATA_LENGTH} [LIM-5]"
        )
    try:
        parse_metadata(raw, offset=0)
    except Exception as exc:  # a FormatError: the same rules as the reader's
        raise ValueError(f"metadata a reader would reject [META-5]: {exc}") from exc
    return raw


__all__ = ["MAX_NUMBER_LENGTH", "encode_metadata", "lexical_depth", "parse_metadata"]
