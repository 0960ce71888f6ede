"""JSON with every number kept as it is written: the adapter protocol's exact comparison [ADP-1].

:func:`loads` parses RFC 8259 JSON and returns ``dict``, ``list``, ``str``, ``bool``, ``None``
and, for every number, a :class:`Number` holding its lexeme (``1.0`` stays ``"1.0"``, ``-0``
stays ``"-0"``, ``12345678901234567890`` stays as is).  Two documents are then equal
(``==``) exactly when they hold the same numbers, character for character, the same strings
after unescaping, objects with the same keys and values in any order, and arrays in the same
order.  ``NaN``, ``Infinity``, a key given twice and nesting deeper than :data:`MAX_DEPTH`
are refused (``ValueError``): no valid document holds them.  The depth is measured by one
lexical pass before anything is parsed (``reference.format.metadata.lexical_depth``), so that
no text, a manifest or a loader's output, can exhaust the parser's recursion.

:func:`dumps` writes such a value back, numbers as their lexemes (Python ``int`` as its
decimal digits), strings as :func:`json.dumps` escapes them, in the layout of ``json.dumps``
with the same ``indent``.  One home for both directions: the runner reads adapters and the
manifest with it, the reference adapter prints with it, and the vector generator writes the
manifest's expected metadata with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from reference.format.metadata import lexical_depth

#: The deepest nesting :func:`loads` parses: twice the deepest metadata a file may hold (LIM-5,
#: 64 levels), which a manifest and a loader's document hold two to four levels down; far
#: below the recursion limit of the parser and of :func:`difference` and :func:`dumps`.
MAX_DEPTH = 128


@dataclass(frozen=True)
class Number:
    """A JSON number as written: equal to another only when the characters are the same."""

    lexeme: str

    def __str__(self) -> str:
        return self.lexeme

    def __repr__(self) -> str:  # as in the document: 1.0, not Number(lexeme='1.0')
        return self.lexeme


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the key {key!r} is given twice")
        out[key] = value
    return out


def _constant(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON number")


def loads(text: str | bytes) -> Any:
    """Parse ``text`` (UTF-8 when bytes), every number a :class:`Number` of its lexeme."""
    check_depth(text)
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return json.loads(
        text,
        object_pairs_hook=_object,
        parse_int=Number,
        parse_float=Number,
        parse_constant=_constant,
    )


def check_depth(text: str | bytes) -> None:
    """``ValueError`` when ``text`` nests deeper than :data:`MAX_DEPTH`, told before anything
    is parsed (one lexical pass, strings skipped)."""
    raw = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    depth = lexical_depth(raw)
    if depth > MAX_DEPTH:
        raise ValueError(f"nested {depth} levels deep, more than the {MAX_DEPTH} allowed")


def difference(want: Any, got: Any, where: str = "") -> str:
    """Where ``got`` first differs from ``want`` and how (``'["a"][0]: expected 1.0, found
    1'``), or ``""`` when they are equal: objects compared as maps, arrays in order."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in want:
            if key not in got:
                return f"{where}: the key {json.dumps(key)} is missing"
            found = difference(want[key], got[key], f"{where}[{json.dumps(key)}]")
            if found:
                return found
        extra = [key for key in got if key not in want]
        return f"{where}: an unexpected key {json.dumps(extra[0])}" if extra else ""
    if isinstance(want, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(want, got, strict=False)):
            found = difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(want) != len(got):
            return f"{where}: {len(want)} items expected, found {len(got)}"
        return ""
    if type(want) is not type(got) or want != got:
        return f"{where}: expected {dumps(want)}, found {dumps(got)}"
    return ""


def dumps(value: Any, *, indent: int | None = None, ensure_ascii: bool = False) -> str:
    """``value`` as JSON text, numbers exactly as their lexemes; the layout of
    ``json.dumps(value, indent=indent)``."""
    parts: list[str] = []
    _write(value, parts, indent, 0, ensure_ascii)
    return "".join(parts)


def _write(value: Any, out: list[str], indent: int | None, level: int, ascii_only: bool) -> None:
    if isinstance(value, Number):
        out.append(value.lexeme)
    elif value is None or isinstance(value, (bool, str)):
        out.append(json.dumps(value, ensure_ascii=ascii_only))
    elif isinstance(value, int):
        out.append(str(int(value)))  # exact, whatever the size
    elif isinstance(value, dict):
        items: list[tuple[str | None, Any]] = [(_key(k, ascii_only), v) for k, v in value.items()]
        _container("{", "}", items, out, indent, level, ascii_only)
    elif isinstance(value, (list, tuple)):
        _container("[", "]", [(None, v) for v in value], out, indent, level, ascii_only)
    else:  # a float has no lexeme: the caller says how it is written, with a Number
        raise TypeError(f"no exact JSON form for {type(value).__name__} {value!r}")


def _key(key: object, ascii_only: bool) -> str:
    if not isinstance(key, str):
        raise TypeError(f"an object key must be a string, not {type(key).__name__}")
    return json.dumps(key, ensure_ascii=ascii_only)


def _container(
    open_: str,
    close: str,
    items: list[tuple[str | None, Any]],
    out: list[str],
    indent: int | None,
    level: int,
    ascii_only: bool,
) -> None:
    if not items:
        out.append(open_ + close)
        return
    inner = "" if indent is None else "\n" + " " * (indent * (level + 1))
    outer = "" if indent is None else "\n" + " " * (indent * level)
    out.append(open_)
    for i, (key, item) in enumerate(items):
        out.append(("," if i else "") + (inner or (" " if i else "")))
        if key is not None:
            out.append(key + ": ")
        _write(item, out, indent, level + 1, ascii_only)
    out.append(outer + close)


__all__ = ["MAX_DEPTH", "Number", "check_depth", "difference", "dumps", "loads"]
