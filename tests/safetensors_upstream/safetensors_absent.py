"""The names of safetensors that the adapted upstream tests import and this project does not
have (``tools/safetensors_suite.py``, ``NAMES``): each is an object that fails when used, so
that a test which needs one and is not listed as not claimed fails instead of passing."""

from __future__ import annotations

from typing import Any


class Absent:
    """A safetensors name with no counterpart here."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"safetensors' {self.name} has no counterpart in reference")


TensorSpec = Absent("TensorSpec")
serialize = Absent("serialize")
serialize_file = Absent("serialize_file")
_safe_open_handle = Absent("_safe_open_handle")
_end_ptr = Absent("_end_ptr")
_is_complete = Absent("_is_complete")
storage_ptr = Absent("storage_ptr")
storage_size = Absent("storage_size")
