"""A small, deterministic YAML writer for the ``.ksy`` document (block style only).

The document holds dicts, lists, strings, ints and bools.  A string is written plain when
it is an identifier or an expression made of safe characters, as a literal block (``|``)
when it has several lines, and double-quoted (JSON escapes, which YAML shares) otherwise,
so that every YAML 1.2 parser (js-yaml in the Web IDE and in the check) reads back the same
values.  ``python -m tools.kaitai`` proves it: node parses the committed text and the check
compares the result with the document it was written from.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: Strings safe to write plain: identifiers, dotted paths and arithmetic over them.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*(?: [-+*/%<>=!]{1,2} [A-Za-z0-9_.()]+)*")
#: Plain words a YAML parser would read as something other than a string.
_RESERVED = frozenset({"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~"})

_INDENT = "  "


def scalar(value: object) -> str:
    """One scalar as YAML text (not a multi-line string)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _RESERVED:
            return value
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"no YAML form for {type(value).__name__}")


def _key(key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return str(key)
    if isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_/-]*", key):
        return key
    raise TypeError(f"unsupported key {key!r}")


def _value_lines(value: Any, depth: int) -> tuple[str, list[str]]:
    """What follows ``key:`` on its line, and the lines below it, indented for ``depth``."""
    pad = _INDENT * depth
    if isinstance(value, dict):
        if not value:
            return " {}", []
        return "", _mapping(value, depth)
    if isinstance(value, list):
        if not value:
            return " []", []
        if all(isinstance(v, (int, str)) and "\n" not in str(v) for v in value):
            return " [" + ", ".join(scalar(v) for v in value) + "]", []
        return "", _sequence(value, depth)
    if isinstance(value, str) and "\n" in value:
        body = value if value.endswith("\n") else value + "\n"
        indicator = " |" if value.endswith("\n") else " |-"
        return indicator, [pad + line if line else "" for line in body[:-1].split("\n")]
    return " " + scalar(value), []


def _mapping(mapping: dict[Any, Any], depth: int) -> list[str]:
    pad, lines = _INDENT * depth, []
    for key, value in mapping.items():
        head, below = _value_lines(value, depth + 1)
        lines.append(f"{pad}{_key(key)}:{head}")
        lines.extend(below)
    return lines


def _sequence(items: list[Any], depth: int) -> list[str]:
    pad, lines = _INDENT * depth, []
    for item in items:
        if isinstance(item, dict) and item:
            inner = _mapping(item, depth + 1)
            lines.append(f"{pad}- {inner[0].lstrip()}")
            lines.extend(inner[1:])
        else:
            head, below = _value_lines(item, depth + 1)
            lines.append(f"{pad}-{head}")
            lines.extend(below)
    return lines


def dump(document: dict[str, Any], header: str = "") -> str:
    """The document as YAML text, led by ``header`` (comment lines)."""
    return header + "\n".join(_mapping(document, 0)) + "\n"
