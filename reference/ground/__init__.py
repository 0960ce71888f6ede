"""The ground floor: helpers every other room uses, tied to no part of the format.

``errors`` (``FormatError`` and its constructors: a stable code, the offset or field, what was
expected), ``files`` (opening regular files only; a folder's rename made durable), ``cli``
(the commands' parser: JSON usage errors with ``--json``), ``text`` (escaping names for messages),
``scratch`` (bounded scratch buffers), ``hashing`` (FNV-1a over many names), ``parallel``
(copying runs on every core), ``residency`` (which pages are in the page cache), ``version``
(the package's version, as installed).

May import: ``spec`` only; nothing else of ``reference``.
"""
