"""Writing one AWQ-v2 file.

``writer`` (``Writer`` and ``save``: streaming, memory bounded by the index), ``partial``
(a destination published whole: a hidden partial file renamed into place), ``writeback``
(flushing written pages in the background), ``rangecopy`` (a byte range copied between files
in the kernel, for a metadata edit).

May import: ``spec``, ``reference.ground``, ``reference.quant``, ``reference.format``.
"""
