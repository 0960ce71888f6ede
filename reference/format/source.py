"""What every source of tensors offers: the AWQ-v2 :class:`~reference.format.reader.Reader`,
the AWQ v1 :class:`~reference.sources.v1.V1Reader`, and whatever the next kind of source is.

:mod:`reference.format.layers` and :mod:`reference.dump` take a :class:`TensorSource`, so a new
source plugs in by offering these methods; nothing that uses it changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from numpy.typing import NDArray

from reference.format.rules import TensorInfo


@runtime_checkable
class TensorSource(Protocol):
    """A read-only set of named tensors with their entries and the file's metadata."""

    path: Path

    def __len__(self) -> int: ...

    def __contains__(self, name: object) -> bool: ...

    def __iter__(self) -> Iterator[str]: ...

    def names(self) -> list[str]:
        """Every tensor name."""
        ...

    def entries(self) -> list[TensorInfo]:
        """Every entry, each checked once."""
        ...

    def entry(self, name: str) -> TensorInfo:
        """What the source says about ``name``; ``TensorNotFoundError`` when it has none."""
        ...

    def tensor(self, name: str) -> NDArray[Any]:
        """The stored array of ``name`` (zero-copy where the source can), of the NumPy type
        :mod:`reference.quant.dtypes` gives its dtype (``ml_dtypes`` ones for BF16 and FP8)
        [DT-1]."""
        ...

    def view(self, info: TensorInfo) -> NDArray[Any]:
        """The stored array of an entry this source returned, without a second lookup."""
        ...

    @property
    def metadata(self) -> dict[str, Any]:
        """The metadata object ({} when there is none)."""
        ...

    def validate(self) -> None:
        """Every structural rule; raises the first ``FormatError``."""
        ...

    def verify(self) -> None:
        """``validate()`` plus every payload checksum."""
        ...

    def close(self) -> None: ...
