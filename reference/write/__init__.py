"""Writing one AWQ-v2 file.

``writer`` (``Writer`` and ``save``: streaming, memory bounded by the index), ``partial``
(a destination published whole: a hidden partial file renamed into place), ``writeback``
(flushing written pages in the background), ``rangecopy`` (a byte range copied between files
in the kernel, for a metadata edit), ``reindex`` (one file written again with new metadata, its
slab copied by ``rangecopy``, its payloads untouched).

May import: ``spec``, ``reference.ground``, ``reference.quant``, ``reference.format``.
"""
