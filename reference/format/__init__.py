"""The format: parsing, checking and reading one AWQ-v2 file.

``rules`` (an entry's fields and their checks), ``source`` (what a tensor source offers),
``metadata`` (the metadata JSON, read strictly), ``entrytable`` (the entry table checked at
once), ``index`` (the tail index: buckets, entries, lookups), ``validate`` (full validation in
the spec's order), ``order`` (slab order), ``layers`` (a quantised layer's tensors, encoded and
read), ``reader`` (``Reader``: the open file).

May import: ``spec``, ``reference.ground``, ``reference.quant``.
"""
