"""The converter's work, under the command ``awq2-convert`` (:mod:`reference.convert`), which
parses its arguments, calls in here and prints what it returns.

``plan`` (the conversion's steps in name order, the output's sizes from shapes alone, the
metadata and its provenance), ``source`` (what SRC is read through: a checkpoint, or an AWQ-v2
model checked before it is re-encoded), ``guard`` (SRC and DST checked before anything is
read or written: DST never names, holds or joins a file of SRC), ``steps`` (each step read and
encoded on the repacking threads, and cut for a rank set), ``progress`` (the bars a terminal
shows), ``run`` (``convert`` and ``convert_folder``: the steps written to a file, a set or a
model folder, published whole, and their summary).

May import: ``spec``, ``reference.ground``, ``reference.quant``, ``reference.format``,
``reference.write``, ``reference.sources``, ``reference.sets``.
"""
