"""Quantised numbers: the Marlin codec and the element types.

``codec`` (AWQ and compressed-tensors packing, the Marlin swizzles of weights, scales and zero
points, tensor-parallel shards of Marlin tensors, dequantisation: NumPy, exact) and ``dtypes``
(the file's dtypes as NumPy arrays, bfloat16 included).

May import: ``spec``, ``reference.ground``.
"""
