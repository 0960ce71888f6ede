"""What a converter reads: checkpoints of other formats, read through the same API (AutoAWQ's
AWQ v1 and compressed-tensors ``pack-quantized``), and AWQ-v2 models given back to the
converter in the same form, for resharding.

``checkpoint`` (safetensors files and shards, read strictly), ``v1`` (AutoAWQ), ``compressed``
(compressed-tensors), ``legacy`` (opening either), ``awq2`` (an AWQ-v2 file or set as a
converter's source).

May import: ``spec``, ``reference.ground``, ``reference.quant``, ``reference.format``,
``reference.write``.
"""
