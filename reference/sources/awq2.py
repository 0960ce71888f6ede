"""AWQ-v2 files and sets as a converter's source: resharding (``convert`` of an AWQ-v2 SRC).

The converter reads a checkpoint through ``names``, ``entry``, ``tensor`` and ``layers``, with
every quantised layer as AWQ v1 tensors (``qweight``, ``qzeros``, ``scales``).
:class:`Awq2Checkpoint` presents a stored AWQ-v2 model that way, so that converting it again
gives the bytes a conversion of the original checkpoint gives:

* a ``MARLIN_*`` layer's entries are unswizzled to codes, zero points and plain scales and
  packed back into AWQ v1 words; an ``AWQ_*`` layer's entries are AWQ v1 tensors as stored.
  Every map of the codec is a bijection ([codec.md](../../docs/spec/codec.md)), so the
  converter's re-encoding gives the stored payloads back;
* dense tensors are given as stored;
* the metadata is the stored one without what the converter itself adds (``provenance``,
  ``tensor_parallel``, a rank set member's ``awq2_rank``), and the stored ``provenance`` is
  carried over unchanged [META-3]: the output describes the original checkpoint, not this
  intermediate copy.  A file without provenance (one written by ``save``) is described as the
  source itself: its files, sizes and SHA-256.

The whole model comes from a :class:`Model`: a single file or a split set gives its tensors as
stored (:class:`WholeModel`); a rank set's shards are joined back by the inverse of each cut
(:class:`RankModel`, with the joiner the top level builds from
:mod:`reference.sets.tpsplit`, which this room does not import).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from reference.format.rules import TensorInfo
from reference.ground.errors import TensorNotFoundError
from reference.quant import codec
from spec.constants import SET_RANK_KEY
from spec.marlin import pack_factor
from spec.registry import DTYPE_BY_NAME

#: Metadata keys the converter writes itself: not the source's configuration.
CONVERTER_KEYS = ("provenance", "tensor_parallel", SET_RANK_KEY)
PARTS = ("qweight", "scales", "qzeros")


class Stored(Protocol):
    """What a single file (:class:`~reference.format.reader.Reader`) and a split set offer."""

    @property
    def metadata(self) -> dict[str, Any]: ...
    def names(self) -> list[str]: ...
    def layers(self) -> list[str]: ...
    def entry(self, name: str) -> TensorInfo: ...
    def tensor(self, name: str) -> NDArray[Any]: ...
    def close(self) -> None: ...


class Model(Protocol):
    """A whole AWQ-v2 model: entries with the whole layer's fields, dense tensors whole, and
    each quantised part unpacked (:func:`plain_part`)."""

    @property
    def metadata(self) -> dict[str, Any]: ...
    def names(self) -> list[str]: ...
    def layers(self) -> list[str]: ...
    def entry(self, name: str) -> TensorInfo: ...
    def tensor(self, name: str) -> NDArray[Any]: ...
    def plain(self, name: str) -> NDArray[Any]: ...
    def close(self) -> None: ...


def plain_part(info: TensorInfo, stored: NDArray[Any]) -> NDArray[Any]:
    """One quantised entry unpacked: codes ``uint8[k, n]``, zero points ``uint8[G, n]`` or
    plain scales ``[G, n]`` in the stored dtype; the inverse of the writer's encoding of that
    part, with the entry's own ``k``, ``n``, ``bits`` and ``group_size``."""
    layout = info.layout
    if layout == "MARLIN_QWEIGHT":
        return codec.unswizzle_qweight(stored, info.k, info.n, info.bits)
    if layout == "MARLIN_QZEROS":
        return codec.unswizzle_zeros(stored, info.n, info.bits)
    if layout == "MARLIN_SCALES":  # any 2- or 4-byte dtype, moved as bit patterns
        raw = stored.view(np.float16 if stored.dtype.itemsize == 2 else np.float32)
        return np.asarray(codec.unswizzle_scales(raw, info.k, info.group_size)).view(stored.dtype)
    if layout in ("AWQ_QWEIGHT", "AWQ_QZEROS"):
        return codec.awq_unpack(np.asarray(stored), info.bits)
    if layout == "AWQ_SCALES":
        return stored
    raise ValueError(f"{info.name}: {layout} is not a quantised layout")


class WholeModel:
    """A single file or a split set: every tensor whole, as stored."""

    def __init__(self, stored: Stored) -> None:
        self._stored = stored

    @property
    def metadata(self) -> dict[str, Any]:
        return self._stored.metadata

    def names(self) -> list[str]:
        return self._stored.names()

    def layers(self) -> list[str]:
        return self._stored.layers()

    def entry(self, name: str) -> TensorInfo:
        return self._stored.entry(name)

    def tensor(self, name: str) -> NDArray[Any]:
        return self._stored.tensor(name)

    def plain(self, name: str) -> NDArray[Any]:
        return plain_part(self._stored.entry(name), self._stored.tensor(name))

    def close(self) -> None:
        self._stored.close()


class RankSource(Protocol):
    """A rank set opened whole (:class:`~reference.sets.fileset.FileSet`)."""

    @property
    def metadata(self) -> dict[str, Any]: ...
    @property
    def tp_size(self) -> int: ...
    def names(self, *, rank: int | None = None) -> list[str]: ...
    def layers(self, *, rank: int | None = None) -> list[str]: ...
    def entry(self, name: str, *, rank: int | None = None) -> TensorInfo: ...
    def tensor(self, name: str, *, rank: int | None = None) -> NDArray[Any]: ...
    def close(self) -> None: ...


class Joiner(Protocol):
    """The inverse of a rank set's cuts (:class:`reference.sets.tpsplit.RankJoin`)."""

    def whole_kn(self, prefix: str, k: int, n: int) -> tuple[int, int]: ...
    def whole_shape(self, name: str, shape: tuple[int, ...], *, layer: bool) -> tuple[int, ...]: ...
    def join_part(
        self, prefix: str, part: str, parts: Sequence[NDArray[Any]], *, group_size: int
    ) -> NDArray[Any]: ...
    def join_dense(
        self, name: str, parts: Sequence[NDArray[Any]], *, layer: bool
    ) -> NDArray[Any]: ...


class RankModel:
    """A rank set's shards joined into the whole model by the inverse of each cut."""

    def __init__(self, ranks: RankSource, joiner: Joiner) -> None:
        self._ranks, self._join = ranks, joiner
        self.tp_size = ranks.tp_size
        self._layers = set(ranks.layers())

    @property
    def metadata(self) -> dict[str, Any]:
        return self._ranks.metadata

    def names(self) -> list[str]:
        return self._ranks.names()

    def layers(self) -> list[str]:
        return self._ranks.layers()

    def _layer_of(self, name: str) -> tuple[str, str, bool]:
        prefix, _, part = name.rpartition(".")
        return prefix, part, prefix in self._layers and part in (*PARTS, "bias")

    def entry(self, name: str) -> TensorInfo:
        info = self._ranks.entry(name, rank=0)
        prefix, _, in_layer = self._layer_of(name)
        if info.quantized:
            k, n = self._join.whole_kn(prefix, info.k, info.n)
            return TensorInfo(name, info.dtype, info.shape, info.layout, 0, 0, 0, info.bits,
                              info.group_size, k, n)  # fmt: skip
        shape = self._join.whole_shape(name, info.shape, layer=in_layer)
        return TensorInfo(name, info.dtype, shape, info.layout, 0, _length(info.dtype, shape), 0)

    def tensor(self, name: str) -> NDArray[Any]:
        _prefix, _part, in_layer = self._layer_of(name)
        parts = [self._ranks.tensor(name, rank=r) for r in range(self.tp_size)]
        return self._join.join_dense(name, parts, layer=in_layer)

    def plain(self, name: str) -> NDArray[Any]:
        prefix, part, _ = self._layer_of(name)
        parts = []
        for r in range(self.tp_size):
            info = self._ranks.entry(name, rank=r)
            parts.append(plain_part(info, self._ranks.tensor(name, rank=r)))
        group_size = self._ranks.entry(name, rank=0).group_size
        return self._join.join_part(prefix, part, parts, group_size=group_size)

    def close(self) -> None:
        self._ranks.close()


def _length(dtype: str, shape: tuple[int, ...]) -> int:
    length = DTYPE_BY_NAME[dtype].itemsize
    for d in shape:
        length *= d
    return length


def _family(source_format: str) -> str:
    """The checkpoint family a conversion's provenance names (the folder's ``config.json``
    says it): compressed-tensors, else AWQ v1."""
    return "CT" if source_format.startswith("compressed-tensors") else "V1"


class Awq2Checkpoint:
    """An AWQ-v2 model through the checkpoint API the converter reads (``V1Reader``'s):
    quantised layers as AWQ v1 tensors, the source's configuration as its metadata.

    ``kind`` says what it is (``"file"``, ``"split set"``, ``"rank set"``); ``files`` are its
    files, hashed for the provenance only when the model carries none.  ``digests``, when
    given, are those files' SHA-256 already known to be right (a set's manifest, once
    verification has compared every member with it [SET-8]): the provenance takes them
    instead of reading the files again."""

    format_version = "2"

    def __init__(self, path: str | os.PathLike[str], model: Model, *, kind: str,
                 files: Sequence[Path], digests: Sequence[str] | None = None) -> None:  # fmt: skip
        self.path = Path(path)
        self.kind = kind
        self._model = model
        try:
            stored = model.metadata
            self.metadata: dict[str, Any] = {
                key: value for key, value in stored.items() if key not in CONVERTER_KEYS
            }
            carried = stored.get("provenance")
            self.provenance: dict[str, Any] | None = (
                carried if isinstance(carried, dict) and "source_format" in carried else None
            )
            self.files = [] if self.provenance is not None else list(files)
            known = None if digests is None or len(digests) != len(files) else list(digests)
            self.digests: list[str] | None = None if self.provenance is not None else known
            config = self.metadata.get("config")
            self.config: dict[str, Any] | None = config if isinstance(config, dict) else None
            self._names = model.names()
            self._known = set(self._names)
            self._layers = model.layers()
            self._layer_set = set(self._layers)
        except BaseException:
            model.close()
            raise

    @property
    def source_format(self) -> str:
        """The original checkpoint's format, as the carried provenance says; else this one."""
        if self.provenance is not None:
            return str(self.provenance["source_format"])
        return f"AWQ-v2 ({self.kind})"

    @property
    def family(self) -> str:
        return _family(self.source_format)

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._known

    def names(self) -> list[str]:
        return list(self._names)

    def layers(self) -> list[str]:
        return list(self._layers)

    def _part(self, name: str) -> str | None:
        prefix, _, part = name.rpartition(".")
        return part if prefix in self._layer_set and part in PARTS else None

    def entry(self, name: str) -> TensorInfo:
        """A layer's part as the AWQ v1 tensor it stands for; any other entry as stored."""
        if name not in self._known:
            raise TensorNotFoundError(name)
        info = self._model.entry(name)
        part = self._part(name)
        if part is None:
            return TensorInfo(name, info.dtype, info.shape, "DENSE", 0, info.length, 0)
        k, n, bits, gs = info.k, info.n, info.bits, info.group_size
        groups = 1 if gs == -1 else k // gs
        pf = pack_factor(bits)
        dtype, shape = {"qweight": ("I32", (k, n // pf)), "qzeros": ("I32", (groups, n // pf)),
                        "scales": (info.dtype, (groups, n))}[part]  # fmt: skip
        return TensorInfo(name, dtype, shape, f"AWQ_{part.upper()}", 0, _length(dtype, shape),
                          0, bits, gs, k, n)  # fmt: skip

    def tensor(self, name: str) -> NDArray[Any]:
        """A layer's part as AWQ v1 packs it (``qweight``, ``qzeros``: int32 words; scales
        plain); any other tensor as stored."""
        if name not in self._known:
            raise TensorNotFoundError(name)
        part = self._part(name)
        if part is None:
            return self._model.tensor(name)
        plain = self._model.plain(name)
        if part == "scales":
            return plain
        return codec.awq_pack(np.ascontiguousarray(plain), self._model.entry(name).bits)

    def close(self) -> None:
        self._model.close()

    def __enter__(self) -> Awq2Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
