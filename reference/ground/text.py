"""Text from a file, made safe to print: one escaping function for every tool.

Names, metadata values and error details come from files that may be hostile.  Printed raw,
an ESC sequence can rewrite the terminal, an OSC sequence its title, a bidi control
(U+202E) reverse what follows, and U+2028/U+2029 break lines where no newline was.
:func:`escape` writes each such character as a Python-style escape that reads back as
exactly that code point: ``\\x1b``, ``\\u202e``, ``\\U000e0041`` (never ``\\ue0041``,
which reads as U+E004 followed by "1").  A backslash is doubled, so the output is
unambiguous.
"""

from __future__ import annotations

import unicodedata

#: Categories escaped: controls (C0, DEL, C1), format characters (bidi controls, zero-width
#: joiners, tag characters), line and paragraph separators, surrogates, private use and
#: unassigned code points.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _escape_char(ch: str) -> str:
    code = ord(ch)
    if ch == "\\":
        return "\\\\"
    if unicodedata.category(ch) not in _ESCAPED_CATEGORIES:
        return ch
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape(text: str) -> str:
    """``text`` with every control, format, separator, surrogate, private-use and unassigned
    character escaped, so that printing it cannot change the terminal or hide what it says."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escape_char(ch) for ch in text)
