"""Quantised linear layers in a file: how the writer stores them and how the reader returns them.

A layer ``<prefix>`` is three entries, ``<prefix>.qweight``, ``<prefix>.scales`` and
``<prefix>.qzeros`` [NAME-4], plus an optional plain ``<prefix>.bias``.  The writer
stores it in the MARLIN_* layouts when Marlin's shape rules hold and in the AWQ_*
(AutoAWQ v1) layouts otherwise [LAY-8]; every entry records k, n, bits and group
size [LAY-5, LAY-7], so the reader needs no outside configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from reference.format.rules import TensorInfo, check_bias, check_layers
from reference.format.source import TensorSource
from reference.ground import scratch
from reference.ground.errors import field_error
from reference.quant import codec
from spec.marlin import QUANT_BITS, marlin_shape_ok, pack_factor

PARTS = ("qweight", "scales", "qzeros")
Parallel = Literal["column", "row"]


@dataclass(frozen=True)
class LinearLayer:
    """One quantised linear layer (or one tensor-parallel shard of it), as stored.

    ``layout`` is ``"MARLIN"`` (the arrays are what vLLM's Marlin kernels take, no repack)
    or ``"AWQ"`` (AutoAWQ v1 packing, for layers outside Marlin's shape rules).
    ``k`` and ``n`` are the shard's when ``tp_size > 1``.  ``scale_dtype`` is the stored
    dtype name (``"F16"``, ``"BF16"`` or ``"F32"``), never converted: read from a file, BF16
    scales are an ``ml_dtypes.bfloat16`` array (raw bits: ``scales.view(np.uint16)``).
    """

    prefix: str
    layout: str
    qweight: NDArray[np.int32]
    scales: NDArray[Any]
    qzeros: NDArray[np.int32]
    bias: NDArray[Any] | None
    k: int
    n: int
    bits: int
    group_size: int
    scale_dtype: str
    tp_rank: int = 0
    tp_size: int = 1


# ------------------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class StoredTensor:
    """One entry a layer is stored as: its name, array and the writer's keyword fields."""

    name: str
    array: NDArray[Any]
    fields: dict[str, Any] = field(default_factory=dict)


def encode_linear(
    prefix: str,
    *,
    bits: int,
    group_size: int,
    q: NDArray[np.uint8] | None = None,
    z: NDArray[np.uint8] | None = None,
    scales: NDArray[Any],
    qweight: NDArray[np.int32] | None = None,
    qzeros: NDArray[np.int32] | None = None,
    bias: NDArray[Any] | None = None,
    scale_dtype: str | None = None,
    bias_dtype: str | None = None,
) -> tuple[str, list[StoredTensor]]:
    """The entries that store one layer, from codes (``q``, ``z``) or from AutoAWQ v1 tensors
    (``qweight``, ``qzeros``), with its ``scales`` and optional ``bias``; and the layout
    family chosen, ``"MARLIN"`` or ``"AWQ"`` [LAY-8].  ``Writer.add_linear`` adds them.

    Scales and bias are ``float16``, ``float32`` or ``ml_dtypes.bfloat16`` arrays, their dtype
    inferred; ``scale_dtype="BF16"`` (``bias_dtype="BF16"``) also takes a ``uint16`` array
    holding bfloat16 bits.  The bias is F16, BF16 or F32 [LAY-10].
    """
    if (q is None) == (qweight is None) or (z is None) == (qzeros is None):
        raise ValueError("give either codes (q, z) or AWQ v1 tensors (qweight, qzeros)")
    if q is None:
        assert qweight is not None and qzeros is not None
        q = _unpacked_codes(np.asarray(qweight), bits)
        z = codec.awq_unpack(np.asarray(qzeros), bits)
    assert z is not None
    q, z, scales = np.asarray(q), np.asarray(z), np.asarray(scales)
    k, n = q.shape
    if bias is not None and np.shape(bias) != (n,):
        raise ValueError(f"{prefix}: bias of shape {np.shape(bias)}, expected ({n},) [LAY-10]")
    if bias is not None and bias_dtype is None:
        bias_dtype = _scale_dtype_name(np.asarray(bias), "bias")
    stored_dtype = scale_dtype or _scale_dtype_name(scales)
    fields = dict(bits=bits, group_size=group_size, k=k, n=n)
    if marlin_shape_ok(k, n, bits, group_size):
        family = "MARLIN"
        mq = codec.swizzle_qweight(q, bits)
        ms = _on_scales(scales, lambda s: codec.swizzle_scales(s, k, group_size))
        mz = codec.swizzle_zeros(z, bits)
    else:
        family = "AWQ"
        mq = codec.awq_pack(q, bits)
        ms = scales
        mz = codec.awq_pack(z, bits)
    stored = [
        StoredTensor(f"{prefix}.qweight", mq, dict(layout=f"{family}_QWEIGHT", **fields)),
        StoredTensor(
            f"{prefix}.scales", ms, dict(dtype=stored_dtype, layout=f"{family}_SCALES", **fields)
        ),
        StoredTensor(f"{prefix}.qzeros", mz, dict(layout=f"{family}_QZEROS", **fields)),
    ]
    if bias is not None:
        stored.append(StoredTensor(f"{prefix}.bias", np.asarray(bias), dict(dtype=bias_dtype)))
    return family, stored


def _unpacked_codes(qweight: NDArray[np.int32], bits: int) -> NDArray[np.uint8]:
    """The codes of AWQ v1 words, in this thread's scratch memory (:mod:`reference.ground.scratch`):
    a temporary, read once by the swizzle or the AWQ packing, which make new arrays."""
    if qweight.ndim != 2 or bits not in QUANT_BITS:
        return codec.awq_unpack(qweight, bits)  # raises the codec's error
    shape = (qweight.shape[0], qweight.shape[1] * pack_factor(bits))
    return codec.awq_unpack(qweight, bits, out=scratch.empty("encode_linear.q", shape, np.uint8))


def _scale_dtype_name(scales: NDArray[Any], what: str = "scales") -> str:
    names = {"float16": "F16", "float32": "F32", "bfloat16": "BF16"}
    if scales.dtype.name not in names:
        rule = "LAY-6" if what == "scales" else "LAY-10"
        raise ValueError(
            f"{what} must be float16, float32 or bfloat16 (or uint16 BF16 bits with dtype BF16), "
            f"got {scales.dtype} [{rule}]"
        )
    return names[scales.dtype.name]


def _on_scales(scales: NDArray[Any], permute: Any) -> NDArray[Any]:
    """Apply a column permutation to scales of any 2-byte or 4-byte dtype (BF16 bits too)."""
    if scales.dtype.kind == "f":
        return np.asarray(permute(scales))
    as_float = scales.view(np.float16 if scales.dtype.itemsize == 2 else np.float32)
    return np.asarray(permute(as_float)).view(scales.dtype)


# ------------------------------------------------------------------------------------- reading


def read_linear(
    reader: TensorSource,
    prefix: str,
    *,
    tp_rank: int = 0,
    tp_size: int = 1,
    parallel: Parallel | None = None,
) -> LinearLayer:
    """The layer's stored arrays (zero-copy views), or one tensor-parallel shard of them."""
    infos = {part: _info(reader, f"{prefix}.{part}") for part in PARTS}
    parts = list(infos.values())
    check_layers(parts, lambda i: parts[i].offset)  # [LAY-7], as full validation checks it
    qi = infos["qweight"]
    if f"{prefix}.bias" in reader:  # [LAY-10]
        bias_info = reader.entry(f"{prefix}.bias")
        check_bias(bias_info, qi, offset=bias_info.offset)
    family = "MARLIN" if qi.layout.startswith("MARLIN_") else "AWQ"
    views = {part: reader.view(info) for part, info in infos.items()}
    bias = reader.tensor(f"{prefix}.bias") if f"{prefix}.bias" in reader else None
    layer = LinearLayer(
        prefix,
        family,
        views["qweight"],
        views["scales"],
        views["qzeros"],
        bias,
        qi.k,
        qi.n,
        qi.bits,
        qi.group_size,
        infos["scales"].dtype,
    )
    return sharded(layer, tp_rank=tp_rank, tp_size=tp_size, parallel=parallel)


def awq_linear(
    prefix: str,
    qweight: NDArray[np.int32],
    qzeros: NDArray[np.int32],
    scales: NDArray[Any],
    bias: NDArray[Any] | None,
    *,
    k: int,
    n: int,
    bits: int,
    group_size: int,
    scale_dtype: str,
) -> LinearLayer:
    """A layer given as AWQ v1 tensors, repacked to Marlin in NumPy when Marlin's shape rules
    hold and kept in the AWQ layout otherwise [LAY-8]: what a checkpoint reader returns."""
    if not marlin_shape_ok(k, n, bits, group_size):
        return LinearLayer(prefix, "AWQ", qweight, scales, qzeros, bias, k, n, bits, group_size,
                           scale_dtype)  # fmt: skip
    mq, ms, mz = codec.awq_to_marlin(
        qweight, qzeros, _as_float(scales), bits=bits, group_size=group_size
    )
    return LinearLayer(prefix, "MARLIN", mq, np.asarray(ms).view(scales.dtype), mz, bias, k, n,
                       bits, group_size, scale_dtype)  # fmt: skip


def sharded(
    layer: LinearLayer, *, tp_rank: int, tp_size: int, parallel: Parallel | None
) -> LinearLayer:
    """``layer`` itself when ``tp_size == 1`` and no ``parallel`` is asked, else its shard."""
    if tp_size == 1 and parallel is None:
        return layer
    if parallel not in ("column", "row"):
        raise ValueError(f"parallel must be 'column' or 'row', got {parallel!r}")
    return shard(layer, tp_rank=tp_rank, tp_size=tp_size, parallel=parallel)


def _info(reader: TensorSource, name: str) -> TensorInfo:
    info = reader.entry(name)
    if info.layout == "DENSE":
        raise field_error(
            "BAD_QUANT_FIELDS",
            f"{name!r} is not a quantised entry",
            info.offset,
            "an AWQ_* or MARLIN_* layout",
            info.layout,
        )
    return info


def shard(layer: LinearLayer, *, tp_rank: int, tp_size: int, parallel: Parallel) -> LinearLayer:
    """One tensor-parallel shard, cut from the stored tensors without unswizzling the weights.

    Column-parallel shards slice ``n`` (bias sliced too); row-parallel shards slice ``k``
    (the bias stays whole: it is added once, after the reduction).
    """
    if layer.layout == "MARLIN":
        qw, sc, qz, k, n = codec.shard_marlin(
            layer.qweight,
            _as_float(layer.scales),
            layer.qzeros,
            k=layer.k,
            n=layer.n,
            bits=layer.bits,
            group_size=layer.group_size,
            tp_rank=tp_rank,
            tp_size=tp_size,
            parallel=parallel,
        )
        sc = np.asarray(sc).view(layer.scales.dtype)
    else:
        qw, sc, qz, k, n = _shard_awq(layer, tp_rank, tp_size, parallel)
    bias = layer.bias
    if bias is not None and parallel == "column":
        bias = bias[tp_rank * n : (tp_rank + 1) * n]
    return LinearLayer(
        layer.prefix,
        layer.layout,
        qw,
        sc,
        qz,
        bias,
        k,
        n,
        layer.bits,
        layer.group_size,
        layer.scale_dtype,
        tp_rank,
        tp_size,
    )


def columns(layer: LinearLayer, start: int, stop: int) -> LinearLayer:
    """Output columns ``start .. stop`` of a layer as a layer of its own (views, bias sliced
    too): one part of a fused layer, such as the ``k`` third of a stored ``qkv_proj``
    [LAY-11].  A MARLIN layer is cut on 64-column boundaries
    (:func:`~reference.quant.codec.columns_marlin`), an AWQ one on whole packed words."""
    if layer.layout == "MARLIN":
        qw, sc, qz = codec.columns_marlin(layer.qweight, _as_float(layer.scales), layer.qzeros,
                                          k=layer.k, n=layer.n, bits=layer.bits,
                                          group_size=layer.group_size, start=start,
                                          stop=stop)  # fmt: skip
        sc = np.asarray(sc).view(layer.scales.dtype)
    else:
        pf = pack_factor(layer.bits)
        if not (0 <= start < stop <= layer.n and start % pf == 0 and stop % pf == 0):
            raise codec.CodecError("0 <= start < stop <= n, start and stop multiples of pf",
                                   f"start = {start}, stop = {stop}, n = {layer.n}")  # fmt: skip
        qw = layer.qweight[:, start // pf : stop // pf]
        sc, qz = layer.scales[:, start:stop], layer.qzeros[:, start // pf : stop // pf]
    bias = None if layer.bias is None else layer.bias[start:stop]
    return replace(layer, qweight=qw, scales=sc, qzeros=qz, bias=bias, n=stop - start)


def side_by_side(layers: list[LinearLayer]) -> LinearLayer:
    """Layers of one ``k``, layout, bits and group size as one layer, their output columns
    side by side in order (new arrays): the inverse of cutting a fused layer into parts with
    :func:`columns` [LAY-11].  In the MARLIN layouts each part's ``n`` is a multiple of 64,
    so the parts' tiles, scale runs and zero-point runs follow one another unchanged."""
    first = layers[0]
    for other in layers[1:]:
        same = (first.layout, first.k, first.bits, first.group_size, first.scale_dtype)
        if (other.layout, other.k, other.bits, other.group_size, other.scale_dtype) != same:
            raise ValueError(f"{first.prefix}: parts of different layouts or shapes")
    biases = [x.bias for x in layers if x.bias is not None]
    bias: NDArray[Any] | None = np.concatenate(biases) if len(biases) == len(layers) else None

    def joined(name: str) -> NDArray[Any]:
        return np.concatenate([getattr(x, name) for x in layers], axis=1)

    return replace(first, qweight=joined("qweight"), scales=joined("scales"),
                   qzeros=joined("qzeros"), bias=bias, n=sum(x.n for x in layers),
                   tp_rank=0, tp_size=1)  # fmt: skip


def _as_float(scales: NDArray[Any]) -> NDArray[Any]:
    return scales if scales.dtype.kind == "f" else scales.view(np.float16)


def _shard_awq(
    layer: LinearLayer, rank: int, size: int, parallel: Parallel
) -> tuple[NDArray[np.int32], NDArray[Any], NDArray[np.int32], int, int]:
    """Shards of AWQ v1 tensors: plain column or row slices."""
    if not 0 <= rank < size:
        raise codec.CodecError("0 <= tp_rank < tp_size", f"tp_rank = {rank}, tp_size = {size}")
    pf = codec.pack_factor(layer.bits)
    k, n, gs = layer.k, layer.n, layer.group_size
    if parallel == "column":
        if n % (size * pf):
            raise codec.CodecError("tp_size * pf divides n", f"n = {n}, tp_size = {size}")
        ns = n // size
        c0 = rank * ns
        return (
            layer.qweight[:, c0 // pf : (c0 + ns) // pf],
            layer.scales[:, c0 : c0 + ns],
            layer.qzeros[:, c0 // pf : (c0 + ns) // pf],
            k,
            ns,
        )
    group = k if gs == -1 else gs
    if k % size or (gs != -1 and (k // size) % gs):
        raise codec.CodecError(
            "tp_size divides k into whole groups", f"k = {k}, tp_size = {size}, group_size = {gs}"
        )
    ks = k // size
    r0 = rank * ks
    if gs == -1:
        return layer.qweight[r0 : r0 + ks], layer.scales, layer.qzeros, ks, n
    g0, g1 = r0 // group, (r0 + ks) // group
    return layer.qweight[r0 : r0 + ks], layer.scales[g0:g1], layer.qzeros[g0:g1], ks, n


def unpack(layer: LinearLayer) -> tuple[NDArray[np.uint8], NDArray[np.uint8], NDArray[Any]]:
    """Codes ``q[k, n]``, zero points ``z[G, n]`` and plain scales ``s[G, n]`` of a layer."""
    if layer.layout == "MARLIN":
        q = codec.unswizzle_qweight(layer.qweight, layer.k, layer.n, layer.bits)
        z = codec.unswizzle_zeros(layer.qzeros, layer.n, layer.bits)
        s = _on_scales(layer.scales, lambda m: codec.unswizzle_scales(m, layer.k, layer.group_size))
    else:
        q = codec.awq_unpack(layer.qweight, layer.bits)
        z = codec.awq_unpack(layer.qzeros, layer.bits)
        s = layer.scales
    return q, z, s


def dequantize_layer(layer: LinearLayer) -> NDArray[np.float32]:
    """``float32[k, n]`` weights of a layer: ``(q - z) * s`` per group, exact.  BF16 scales
    (an ``ml_dtypes.bfloat16`` array, or ``uint16`` bits) are widened exactly: their 16 bits
    are the top half of a float32."""
    q, z, s = unpack(layer)
    if layer.scale_dtype == "BF16":
        bits = np.asarray(s).view(np.uint16).astype(np.uint32)
        s = (bits << np.uint32(16)).view(np.float32)
    return codec.dequantize(q, z, s, layer.group_size)


def find_layers(reader: TensorSource) -> list[str]:
    """Prefixes of every quantised layer in a file (entries whose name ends in .qweight)."""
    out = []
    for info in reader.entries():
        if info.layout in ("MARLIN_QWEIGHT", "AWQ_QWEIGHT") and info.name.endswith(".qweight"):
            out.append(info.name[: -len(".qweight")])
    return out
