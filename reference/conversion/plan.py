"""The conversion's plan: its steps in natural name order (a quantised layer, or one plain
tensor), the output's exact sizes computed from shapes alone, and the metadata with its
provenance [META-3], all known before a tensor is read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reference.format.layers import PARTS
from reference.ground import hashing
from reference.ground.errors import error
from reference.ground.version import VERSION
from reference.sources.awq2 import Awq2Checkpoint
from reference.sources.legacy import Checkpoint as LegacyCheckpoint
from reference.write.writer import encode_metadata
from spec.algorithms import align_up, bucket_bits_for
from spec.constants import ALIGNMENT, MAX_NAME_LENGTH, SLAB_OFFSET
from spec.geometry import index_geometry
from spec.marlin import marlin_shape_ok
from spec.registry import DTYPE_BY_NAME
from spec.schema import HEADER_SIZE, TRAILER_SIZE

#: What the converter reads: a checkpoint, or an AWQ-v2 model to reshard.
Checkpoint = LegacyCheckpoint | Awq2Checkpoint

#: The provenance names the converter and its version (``reference.__version__``).
CONVERTER = f"reference.convert {VERSION}"


@dataclass
class Step:
    """One unit of work: a quantised layer (its 3-4 tensors) or one plain tensor."""

    name: str  # layer prefix, or tensor name
    layer: bool
    tensors: list[tuple[str, str, tuple[int, ...]]]  # (stored name, dtype, shape)
    family: str = "DENSE"  # "MARLIN", "AWQ" or "DENSE"

    @property
    def nbytes(self) -> int:
        """The payload bytes the step stores (in a single file)."""
        total = 0
        for _name, dtype, shape in self.tensors:
            length = DTYPE_BY_NAME[dtype].itemsize
            for d in shape:
                length *= d
            total += length
        return total


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def tensor_count(self) -> int:
        return sum(len(s.tensors) for s in self.steps)

    def sizes(self) -> dict[str, int]:
        """Exact sizes of the output file, computed from shapes (no data read)."""
        cursor, payload = SLAB_OFFSET, 0
        names = dims = 0
        for step in self.steps:
            for name, dtype, shape in step.tensors:
                length = Step(name, False, [(name, dtype, shape)]).nbytes
                payload += length
                names += len(name.encode())
                dims += len(shape)
                if length:
                    cursor = align_up(cursor + length, ALIGNMENT)
        count = self.tensor_count
        index = index_geometry(
            index_offset=cursor,
            bucket_bits=bucket_bits_for(count),
            tensor_count=count,
            dims_count=dims,
            names_length=names,
            metadata_length=len(encode_metadata(self.metadata)),
        ).length
        total = cursor + index + TRAILER_SIZE
        padding = total - payload - index - TRAILER_SIZE - HEADER_SIZE
        return {"file_size": total, "payload_bytes": payload, "index_bytes": index,
                "padding_bytes": padding}  # fmt: skip

    def summary(self, dst: object) -> dict[str, Any]:
        """What the plan writes to ``dst``: the first keys of a conversion's summary."""
        layers = [s for s in self.steps if s.layer]
        return {
            "destination": str(dst),
            "tensors": self.tensor_count,
            "layers": len(layers),
            "marlin_layers": sum(s.family == "MARLIN" for s in layers),
            "awq_layout_layers": [s.name for s in layers if s.family == "AWQ"],
            **self.sizes(),
        }


def natural_key(name: str) -> list[Any]:
    """``layers.10`` after ``layers.9``: digits compare as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def make_plan(src: Checkpoint, *, hash_sources: bool = True) -> Plan:
    """The conversion order (natural name order; a layer where its first tensor sorts)."""
    plan = Plan()
    layers = set(src.layers())
    if not layers:  # nothing to store in Marlin's layout: not what a user meant [CONV-4]
        raise error("NOT_QUANTISED", "this checkpoint holds no quantised layer, so there is "
                    "nothing to convert (quantise it first, e.g. AWQ W4A16 with AutoAWQ or "
                    "llm-compressor, then convert the result)", offset=0,
                    expected="at least one quantised linear layer (AWQ qweight/qzeros/scales, "
                    "or compressed-tensors weight_packed)",
                    found=f"{len(src)} tensors, none of them quantised: {src.source_format}",
                    path=str(src.path))  # fmt: skip
    done: set[str] = set()
    for name in sorted(src.names(), key=natural_key):
        _check_name(src, name)
        prefix, _, part = name.rpartition(".")
        if prefix in layers and part in (*PARTS, "bias"):
            if prefix in done:
                continue
            done.add(prefix)
            qi = src.entry(f"{prefix}.qweight")
            family = "MARLIN" if marlin_shape_ok(qi.k, qi.n, qi.bits, qi.group_size) else "AWQ"
            parts = [f"{prefix}.{p}" for p in PARTS]
            if f"{prefix}.bias" in src:
                parts.append(f"{prefix}.bias")
            tensors = [(n, src.entry(n).dtype, _stored_shape(src, n, family)) for n in parts]
            plan.steps.append(Step(prefix, True, tensors, family))
        else:
            info = src.entry(name)
            plan.steps.append(Step(name, False, [(name, info.dtype, info.shape)]))
    digests = [hashing.sha256_of(f) for f in src.files] if hash_sources else None
    plan.metadata = plan_metadata(src, digests)
    return plan


def _check_name(src: Checkpoint, name: str) -> None:
    """A tensor name an AWQ-v2 file can hold: 1 to max_name_length bytes [NAME-1, LIM-3]; a
    checkpoint with another cannot be converted exactly [V1-2, CT-2]."""
    length = len(name.encode("utf-8", "surrogatepass"))  # the readers refuse lone surrogates
    if not 1 <= length <= MAX_NAME_LENGTH:
        raise error(f"{src.family}_UNSUPPORTED", f"tensor name {name[:80]!r} cannot be an "
                    "AWQ-v2 tensor name", offset=0,
                    expected=f"1 to {MAX_NAME_LENGTH} bytes of UTF-8",
                    found=f"{length} bytes",
                    path=str(src.path))  # fmt: skip


def plan_metadata(src: Checkpoint, digests: Sequence[str] | None) -> dict[str, Any]:
    """The source's configuration plus provenance, with ``digests`` (each source file's
    SHA-256, in ``src.files`` order) [META-3]; refused here if a reader would refuse it.
    An AWQ-v2 source's own provenance is carried over unchanged (resharding).

    Without digests (a dry run, or before the hashing has finished) each is a placeholder of
    the same length, so the metadata's size, and with it the file's, is already exact."""
    if isinstance(src, Awq2Checkpoint) and src.provenance is not None:
        provenance = src.provenance
    else:
        hashes = ["0" * 64] * len(src.files) if digests is None else list(digests)
        files = [
            {"name": f.name, "size": f.stat().st_size, "sha256": digest}
            for f, digest in zip(src.files, hashes, strict=True)
        ]
        provenance = {
            "source_format": src.source_format,
            "source_files": files,
            "converter": CONVERTER,
        }
    metadata = {**src.metadata, "provenance": provenance}
    try:  # what a reader would refuse is refused here, with the checkpoint named [META-5]
        encode_metadata(metadata)
    except ValueError as exc:
        message = "the checkpoint's configuration cannot be AWQ-v2 metadata"
        raise error(f"{src.family}_BAD_CONFIG", message, offset=0,
                    expected="metadata a reader accepts", found=str(exc)[:200],
                    path=str(src.path)) from exc  # fmt: skip
    return metadata


def _stored_shape(src: Checkpoint, name: str, family: str) -> tuple[int, ...]:
    info = src.entry(name)
    if family == "MARLIN" and name.endswith(".qweight"):
        return (info.k // 16, info.n * 16 * info.bits // 32)
    return info.shape
