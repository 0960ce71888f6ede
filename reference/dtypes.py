"""The NumPy type of each registry dtype, as every reader presents it [ENT-4].

BF16, F8_E4M3 and F8_E5M2 have no NumPy type of their own; ``ml_dtypes`` supplies them
(``bfloat16``, ``float8_e4m3fn``, ``float8_e5m2``) and registers their names with NumPy
when imported, which this module does.  Arrays of those types are the stored bytes
reinterpreted, never converted: their raw bits are ``array.view(np.uint16)`` (BF16) or
``array.view(np.uint8)`` (FP8), zero-copy, and :func:`raw_bits` does that for any array.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8 types with NumPy)
import numpy as np
from numpy.typing import NDArray

from spec.registry import DTYPE_BY_NAME

#: Registry name -> the NumPy dtype of the arrays readers return.
NUMPY_DTYPE: dict[str, np.dtype[Any]] = {
    name: np.dtype(d.numpy) for name, d in DTYPE_BY_NAME.items()
}


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype a reader presents for the registry dtype ``name``."""
    return NUMPY_DTYPE[name]


def raw_bits(array: NDArray[Any]) -> NDArray[Any]:
    """``array`` viewed as the unsigned integers of its item size (zero-copy): the stored
    bits of a bfloat16 or float8 array, the same bits of any other."""
    return array.view(np.dtype(f"<u{array.dtype.itemsize}"))
