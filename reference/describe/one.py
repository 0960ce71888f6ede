"""One tensor or one quantised layer of an input, as ``awq2-dump --tensor`` and ``--layer``
explain it: its document (entry, statistics; a layer's facts and its dequantised weights'
statistics), of a rank set one rank's shard [SET-13]; a question that names nothing the input
holds is :class:`UsageError`, saying what to ask instead."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from reference.describe.documents import family
from reference.ground.errors import TensorNotFoundError
from reference.ground.text import escape
from reference.sets.fileset import FileSet

#: Registry dtypes that reach NumPy as ``ml_dtypes`` floats (NumPy kind ``V``).
ML_FLOATS = frozenset({"BF16", "F8_E4M3", "F8_E5M2"})


def stats(values: NDArray[np.float64]) -> dict[str, Any]:
    """``min``, ``max``, ``mean``, ``std`` of the values that are not NaN (None when all
    are), how many are NaN and how many there are, without NumPy's warnings about NaN or
    infinities (an infinite mean or a NaN std stays a float)."""
    nan = np.isnan(values)
    rest = values[~nan] if nan.any() else values
    found: dict[str, float | None] = {"min": None, "max": None, "mean": None, "std": None}
    if rest.size:
        with np.errstate(invalid="ignore", over="ignore"):  # infinities: mean inf, std nan
            found = {"min": float(rest.min()), "max": float(rest.max()),
                     "mean": float(rest.mean()), "std": float(rest.std())}  # fmt: skip
    return {**found, "nan": int(nan.sum()), "elements": int(values.size)}


class UsageError(Exception):
    """A question that names nothing the input holds (no such tensor or layer, a layer asked
    for as a tensor, a rank set's shard without its rank): its message says what to ask
    instead.  ``awq2-dump`` reports it as a usage error."""


def rank_kw(source: Any, rank: int | None, what: str) -> dict[str, int]:
    """``{"rank": R}`` for a rank set (whose tensors are per-rank shards [SET-13]); ``{}``
    for anything else, which holds the whole model (rank 0)."""
    if not (isinstance(source, FileSet) and source.kind == "rank"):
        if rank not in (None, 0):
            raise UsageError(f"--rank {rank}: not a rank set (the whole model is rank 0)")
        return {}
    last = source.tp_size - 1
    if rank is None:
        raise UsageError(f"{what}: a rank set for tensor parallelism {source.tp_size} holds one "
                     f"shard of it per rank: give --rank 0..{last} [TP_RANK_REQUIRED]")  # fmt: skip
    if not 0 <= rank <= last:
        raise UsageError(f"--rank {rank}: this rank set has ranks 0..{last}")
    return {"rank": rank}


def is_layer(source: Any, name: str) -> bool:
    return name in source.layers()


def tensor_doc(source: Any, name: str, kw: dict[str, int]) -> tuple[dict[str, Any], Any]:
    """``--tensor``: the entry and statistics of ``name`` (a usage error when there is no
    such tensor), and its array."""
    try:
        info = source.entry(name, **kw)
    except TensorNotFoundError:
        if is_layer(source, name):
            hint = f"{escape(name)} is a quantised layer; use --layer {escape(name)}"
            raise UsageError(hint) from None
        raise UsageError(f"no tensor named {escape(name)!r}") from None
    array = source.view(info, **kw)
    doc: dict[str, Any] = {"tensor": info.to_dict(), **kw, "statistics": None}
    if array.size and (array.dtype.kind in "biuf" or info.dtype in ML_FLOATS):
        doc["statistics"] = stats(array.astype(np.float64))
    return doc, array


def layer_doc(source: Any, prefix: str, kw: dict[str, int]) -> dict[str, Any]:
    """``--layer``: a quantised layer's facts, its stored tensors, and statistics of its
    dequantised ``float32[k, n]`` weights (the reader's ``dequantize``)."""
    if not is_layer(source, prefix):
        raise UsageError(not_a_layer(source, prefix))
    stored = [source.entry(f"{prefix}.{part}", **kw)
              for part in ("qweight", "qzeros", "scales", "bias")
              if f"{prefix}.{part}" in source]  # fmt: skip
    q, scales = stored[0], next(e for e in stored if e.name.endswith(".scales"))
    weights = source.dequantize(prefix, **kw)
    return {"layer": {"prefix": prefix, **kw, "bits": q.bits, "group_size": q.group_size,
                      "layout": family(q.layout).upper(), "in_features": q.k,
                      "out_features": q.n, "scale_dtype": scales.dtype,
                      "tensors": [e.to_dict() for e in stored],
                      "weights": {"dtype": "F32", "shape": list(weights.shape),
                                  **stats(weights.astype(np.float64))}}}  # fmt: skip


def not_a_layer(source: Any, name: str) -> str:
    """Why ``--layer NAME`` names no quantised layer, and what to give instead."""
    head, _, part = name.rpartition(".")
    if part in ("qweight", "qzeros", "scales", "bias") and is_layer(source, head):
        return (f"{escape(name)} is a tensor of the quantised layer {escape(head)}; use "
                f"--layer {escape(head)} (or --tensor {escape(name)})")  # fmt: skip
    if name in source:
        return f"{escape(name)} is a tensor, not a quantised layer; use --tensor {escape(name)}"
    return f"no quantised layer named {escape(name)!r} (the table lists the .qweight of each)"
