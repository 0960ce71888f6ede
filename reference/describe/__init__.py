"""What the reading tools say about an input, apart from how they print it.

``documents`` (the stable ``--json`` documents of an AWQ-v2 file, a file set and a legacy
checkpoint, their tensor rows, the raw header fields of an invalid file, and what an input is:
a checkpoint, or a model's configuration given in place of its weights), ``one`` (one
tensor's or one quantised layer's document and statistics, of a rank set one rank's shard).
``awq2-dump`` (:mod:`reference.dump`) parses its arguments, calls in here and prints.

May import: ``spec``, ``reference.ground``, ``reference.quant``, ``reference.format``,
``reference.write``, ``reference.sources``, ``reference.sets``.
"""
