"""The NumPy type of each registry dtype, as every reader presents it [ENT-4].

BF16, F8_E4M3 and F8_E5M2 have no NumPy type of their own; ``ml_dtypes`` supplies them
(``bfloat16``, ``float8_e4m3fn``, ``float8_e5m2``); this module imports it the first time
one of them is asked for.  Arrays of those types are the stored bytes
reinterpreted, never converted: their raw bits are ``array.view(np.uint16)`` (BF16) or
``array.view(np.uint8)`` (FP8), zero-copy, and :func:`raw_bits` does that for any array.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spec.registry import DTYPE_BY_NAME

#: NumPy names that only exist once ``ml_dtypes`` is imported.
ML_DTYPES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})


@functools.cache
def numpy_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype a reader presents for the registry dtype ``name``.  ``ml_dtypes`` is
    imported on the first BF16 or FP8 tensor, not with this package: ml_dtypes 0.7.0's
    extension took 2.2-2.8 s to load here (0.5.1: 0.5 s, NumPy included; measured on a
    loaded 2-core machine), which every ``import reference`` and every ``python -m
    reference.dump`` would otherwise pay."""
    numpy_name = DTYPE_BY_NAME[name].numpy
    if numpy_name in ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, numpy_name))
    return np.dtype(numpy_name)


def raw_bits(array: NDArray[Any]) -> NDArray[Any]:
    """``array`` viewed as the unsigned integers of its item size (zero-copy): the stored
    bits of a bfloat16 or float8 array, the same bits of any other."""
    return array.view(np.dtype(f"<u{array.dtype.itemsize}"))
