"""Checkpoints of other formats, read through the same API: AutoAWQ's AWQ v1 and
compressed-tensors ``pack-quantized``.

``checkpoint`` (safetensors files and shards, read strictly), ``v1`` (AutoAWQ), ``compressed``
(compressed-tensors), ``legacy`` (opening either).

May import: ``spec``, ``reference.ground``, ``reference.quant``, ``reference.format``,
``reference.write``.
"""
