"""The ground floor: helpers every other room uses, tied to no part of the format.

``errors`` (``FormatError`` and its constructors: a stable code, the offset or field, what was
expected), ``files`` (opening regular files only), ``text`` (escaping names for messages),
``scratch`` (bounded scratch buffers), ``hashing`` (FNV-1a over many names), ``parallel``
(copying runs on every core), ``residency`` (which pages are in the page cache).

May import: ``spec`` only; nothing else of ``reference``.
"""
