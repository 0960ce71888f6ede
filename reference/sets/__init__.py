"""Models of several files: file sets and model folders.

``setmanifest`` (``model.awq2.set.json``, read strictly), ``fileset`` (``FileSet``: a set
through the Reader API), ``setwriter`` (size-split and rank sets, published whole),
``tpsplit`` (which tensor is cut how over tensor-parallel ranks: the one table of those
facts), ``folder`` (a servable model folder: ``config.json`` and the files beside the weights),
``edit`` (a metadata edit of a file or a whole set, published whole: ``awq2-meta``'s work),
``model`` (an AWQ-v2 model as a path names it: a set, a model folder or a file, opened).

May import: ``spec``, ``reference.ground``, ``reference.quant``, ``reference.format``,
``reference.write``.
"""
