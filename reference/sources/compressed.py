"""compressed-tensors ``pack-quantized`` checkpoints (llm-compressor's W4A16) behind the v2 API.

A checkpoint is a folder (or one ``.safetensors`` file with its ``config.json`` beside it)
whose ``config.json`` has ``quantization_config.quant_method == "compressed-tensors"``
[CT-1].  Each quantised linear layer ``<prefix>`` is stored as:

* ``weight_packed`` int32 ``[out, ceil(in / 8)]``: the 4-bit codes of ``W[out, in]`` along
  ``in``, eight consecutive input columns a word, column ``8c + i`` in bits ``4i .. 4i + 3``,
  each the signed code ``q`` in ``[-8, 7]`` plus 8 (compressed-tensors
  ``compressors/pack_quantized/helpers.py: pack_to_int32``, ``unpack_from_int32``; the
  offset ``1 << (num_bits - 1)``);
* ``weight_scale`` ``[out, groups]`` in the model's dtype (F16, BF16 or F32);
* ``weight_zero_point`` int32 ``[ceil(out / 8), groups]`` for asymmetric ``group`` and
  ``channel`` layers only: the signed zero points packed the same way along ``out``
  (``pack_to_int32(zero_point, num_bits, packed_dim=0)`` in
  ``compressors/pack_quantized/base.py: PackedQuantizationCompressor.compress``; symmetric
  layers drop it, ``_remove_symmetric_zp``);
* ``weight_shape`` ``[out, in]`` (int64 from ``torch.tensor(weight.shape)``);
* ``weight_g_idx`` int32 ``[in]`` only with ``actorder: "group"``.

The library dequantises as ``(q - zp) * scale`` in the scale's dtype
(``quantization/lifecycle/forward_helpers.py: _dequantize``, called by
``PackedQuantizationCompressor.decompress`` through ``forward.py: dequantize``, which infers
``group`` or ``channel`` from the scale's shape).  Since ``q + 8 - (zp + 8) = q - zp``, the
stored unsigned fields are exactly AWQ codes and zero points, a symmetric layer's zero
points are all 8, and ``w = (code - zero) * scale`` is the AWQ-v2 rule: each layer is
presented as ``<prefix>.qweight``, ``.qzeros``, ``.scales`` in the AWQ layouts (transposed
to ``[in, out]``), so :mod:`reference.format.layers` and the converter use it unchanged [CT-1].
vLLM reads the same tensors in
``compressed_tensors/schemes/compressed_tensors_wNa16.py: CompressedTensorsWNA16``
(``uint4b8`` when symmetric, ``uint4`` with ``weight_zero_point`` when not) and repacks them
to Marlin at load time, the work the conversion does once.

What cannot be represented exactly is refused [CT-2 .. CT-5]; the configuration is checked
on opening, every layer's parts from the safetensors headers plus two tiny tensors
(``weight_shape`` and, when present, ``weight_g_idx``).  Targets and ``ignore`` entries that
are regular expressions are never run: a layer is recognised by its ``weight_packed`` and
matched to a configuration group by its parts (symmetry, group count), which is all its
decoding needs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from reference.format.layers import PARTS, LinearLayer, awq_linear, sharded
from reference.format.rules import TensorInfo
from reference.ground.errors import FormatError, TensorNotFoundError
from reference.quant import codec
from reference.sources.checkpoint import (
    CheckpointReader,
    SafetensorsFiles,
    StTensor,
    legacy_error,
    read_json,
)

QUANT_METHOD = "compressed-tensors"
FORMAT = "pack-quantized"
MIXED_FORMAT = "mixed-precision"
BITS = 4
#: The offset of the stored fields: ``1 << (num_bits - 1)`` (``pack_to_int32``).
OFFSET = 1 << (BITS - 1)
PACK = 32 // BITS
#: The parts of a stored layer, ``<prefix>.<part>``.
STORED_PARTS = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape",
                "weight_g_idx")  # fmt: skip
#: ``QuantizationArgs`` fields (compressed-tensors ``quantization/quant_args.py``; the model
#: forbids others, ``extra="forbid"``).
WEIGHT_ARGS = frozenset({"num_bits", "type", "symmetric", "group_size", "strategy",
                         "block_structure", "dynamic", "actorder", "scale_dtype", "zp_dtype",
                         "observer", "observer_kwargs"})  # fmt: skip
#: ``QuantizationScheme`` fields (``quantization/quant_scheme.py``).
SCHEME_KEYS = frozenset({"targets", "weights", "input_activations", "output_activations",
                         "format"})  # fmt: skip
#: ``actorder`` values that change nothing stored (``ActivationOrdering.WEIGHT`` and its
#: alias ``static``: calibration order only, no ``weight_g_idx``).
HARMLESS_ACTORDER = (None, False, "weight", "static")
SCALE_DTYPES = ("F16", "BF16", "F32")
_Q = "quantization_config"


def _bad_config(message: str, field: str, expected: object, found: object) -> FormatError:
    return legacy_error("CT", "BAD_CONFIG", f"{field}: {message}", offset=0,
                        expected=expected, found=str(found)[:80])  # fmt: skip


def _unsupported(message: str, field: str, expected: object, found: object) -> FormatError:
    return legacy_error("CT", "UNSUPPORTED", f"{field}: {message}", offset=0,
                        expected=expected, found=str(found)[:80])  # fmt: skip


@dataclass(frozen=True)
class Group:
    """One configuration group's weights, as far as decoding needs them."""

    name: str
    symmetric: bool
    group_size: int  # -1 for strategy "channel"

    def fits(self, k: int, groups: int) -> bool:
        """True when a layer of ``k`` inputs with ``groups`` scale columns is this group's."""
        if self.group_size == -1:
            return groups == 1
        return k % self.group_size == 0 and groups == k // self.group_size


@dataclass(frozen=True)
class CTConfig:
    """The ``quantization_config`` of a compressed-tensors checkpoint, checked [CT-2, CT-3]."""

    groups: tuple[Group, ...]
    ignore: frozenset[str]
    source: dict[str, Any]


def is_compressed_tensors(path: Path) -> bool:
    """True when the ``config.json`` of ``path`` (a folder, or beside a file) names
    compressed-tensors.  An unreadable config is left to the AWQ v1 reader to report."""
    folder = path if path.is_dir() else path.parent
    if not (folder / "config.json").is_file():
        return False
    try:
        config = read_json(folder / "config.json", family="CT")
    except FormatError:
        return False
    q = config.get(_Q)
    return isinstance(q, dict) and q.get("quant_method") == QUANT_METHOD


def parse_config(q: dict[str, Any]) -> CTConfig:
    """The configuration, refused unless every group is exactly representable [CT-2, CT-3]."""
    for key in ("sparsity_config", "transform_config"):
        if q.get(key) not in (None, {}):
            raise _unsupported("not supported (the stored weights are not plain W4A16)",
                               f"{_Q}.{key}", "null or {}", q[key])  # fmt: skip
    if q.get("kv_cache_scheme") is not None:
        raise _unsupported("KV-cache quantisation is not W4A16", f"{_Q}.kv_cache_scheme",
                           None, q["kv_cache_scheme"])  # fmt: skip
    fmt = q.get("format", FORMAT)
    if not isinstance(fmt, str):
        raise _bad_config("not a string", f"{_Q}.format", FORMAT, fmt)
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise _bad_config("not an object of groups", f"{_Q}.config_groups", "an object", groups)
    ignore = q.get("ignore") or []
    if not isinstance(ignore, list) or not all(isinstance(m, str) for m in ignore):
        raise _bad_config("not a list of module names", f"{_Q}.ignore", "a list of str", ignore)
    parsed = tuple(_group(name, g, fmt) for name, g in groups.items())
    return CTConfig(parsed, frozenset(ignore), q)


def _group(name: str, g: Any, global_format: str) -> Group:
    """One ``QuantizationScheme``, refused unless 4-bit int static weights only [CT-2]."""
    where = f"{_Q}.config_groups.{name}"
    if not isinstance(g, dict):
        raise _bad_config("not an object", where, "an object", g)
    unknown = sorted(set(g) - SCHEME_KEYS)
    if unknown:
        raise _unsupported("unknown scheme fields", where, sorted(SCHEME_KEYS), unknown)
    targets = g.get("targets")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise _bad_config("not a list of names", f"{where}.targets", "a list of str", targets)
    fmt = g.get("format") or global_format
    if fmt != FORMAT:
        raise _unsupported("unsupported format", f"{where}.format", FORMAT, fmt)
    for key in ("input_activations", "output_activations"):
        if g.get(key) is not None:
            raise _unsupported("activation quantisation (W4A8, W8A8 ...) is not W4A16",
                               f"{where}.{key}", None, g[key])  # fmt: skip
    w = g.get("weights")
    if w is None:  # QuantizationScheme allows it: a scheme that quantises no weight
        raise _unsupported("a group without weight quantisation", f"{where}.weights",
                           "an object", w)  # fmt: skip
    if not isinstance(w, dict):  # CT-3: weights are QuantizationArgs, an object
        raise _bad_config("not an object", f"{where}.weights", "an object", w)
    return _weights(name, f"{where}.weights", w)


def _weights(name: str, where: str, w: dict[str, Any]) -> Group:
    """One group's ``QuantizationArgs``, inferred as the library infers them
    (``QuantizationArgs.validate_model_after``) and refused unless exact [CT-2, CT-3]."""
    unknown = sorted(set(w) - WEIGHT_ARGS)
    if unknown:
        raise _unsupported("unknown weight arguments", where, sorted(WEIGHT_ARGS), unknown)
    bits, kind, symmetric = w.get("num_bits", 8), w.get("type", "int"), w.get("symmetric", True)
    if type(bits) is not int or not isinstance(kind, str) or type(symmetric) is not bool:
        raise _bad_config("num_bits, type or symmetric of the wrong type", where,
                          "int, str, bool", [bits, kind, symmetric])  # fmt: skip
    if bits != BITS:
        raise _unsupported("bit width", f"{where}.num_bits", BITS, bits)
    if kind.lower() != "int":
        raise _unsupported("weight type", f"{where}.type", "int", kind)
    if w.get("dynamic") not in (None, False):
        raise _unsupported("dynamic weights have no stored scales", f"{where}.dynamic", False,
                           w["dynamic"])  # fmt: skip
    actorder = w.get("actorder")
    if isinstance(actorder, str):
        actorder = actorder.lower()
    if actorder not in HARMLESS_ACTORDER:
        raise _unsupported("activation ordering (weight_g_idx) is not representable",
                           f"{where}.actorder", "null or weight", w["actorder"])  # fmt: skip
    if w.get("block_structure") is not None:
        raise _unsupported("block strategy", f"{where}.block_structure", None,
                           w["block_structure"])  # fmt: skip
    group_size = w.get("group_size")
    if group_size is not None and type(group_size) is not int:
        raise _bad_config("not an integer", f"{where}.group_size", "int or null", group_size)
    strategy = w.get("strategy")
    if strategy is None:  # inferred from group_size, as the library does
        strategy = {None: "tensor", -1: "channel"}.get(group_size, "group")
    if not isinstance(strategy, str):
        raise _bad_config("not a string", f"{where}.strategy", "group or channel", strategy)
    strategy = strategy.lower()
    if strategy == "group" and group_size is not None and group_size > 0:
        return Group(name, symmetric, group_size)
    if strategy == "channel" and group_size in (None, -1):
        return Group(name, symmetric, -1)
    raise _unsupported("strategy and group size", f"{where}.strategy",
                       "group with group_size > 0, or channel",
                       f"{strategy}, group_size {group_size}")  # fmt: skip


@dataclass(frozen=True)
class Layer:
    """One stored layer: its parts and what they decode as."""

    prefix: str
    group: Group
    k: int  # in
    n: int  # out
    groups: int
    packed: StTensor
    scale: StTensor
    zero_point: StTensor | None


class CompressedReader(CheckpointReader):
    """A compressed-tensors ``pack-quantized`` checkpoint, read lazily, with the
    :class:`reference.Reader` API; each layer is presented in the AWQ layouts [CT-1]."""

    format_version = "compressed-tensors"
    family = "CT"
    source_format = "compressed-tensors pack-quantized (safetensors)"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        folder = self.path if self.path.is_dir() else self.path.parent
        config_path = folder / "config.json"
        self.config = read_json(config_path, family="CT") if config_path.is_file() else None
        q = (self.config or {}).get(_Q)
        if not isinstance(q, dict) or q.get("quant_method") != QUANT_METHOD:
            raise _bad_config("no compressed-tensors quantization_config", "config.json",
                              QUANT_METHOD, "none")  # fmt: skip
        self.quant = parse_config(q)
        self._st = SafetensorsFiles(self.path, family="CT")
        self.files = self._st.files
        self._layers = self._find_layers()
        self._presented = self._present()

    # ------------------------------------------------------------------ layers

    def _find_layers(self) -> dict[str, Layer]:
        stored = self._st.tensors
        prefixes = {name.rpartition(".")[0] for name in stored if _part(name) in STORED_PARTS}
        layers = {}
        for prefix in sorted(prefixes):
            if f"{prefix}.weight_packed" not in stored:
                raise self._incomplete(prefix, "weight_packed")
            layers[prefix] = self._layer(prefix)
        return layers

    def _incomplete(self, prefix: str, part: str) -> FormatError:
        return legacy_error("CT", "INCOMPLETE", f"{prefix}: a quantised layer without {part}",
                            offset=0, expected=f"{prefix}.{part}", found="absent")  # fmt: skip

    def _mismatch(self, prefix: str, what: str, expected: object, found: object) -> FormatError:
        return legacy_error("CT", "SHAPE_MISMATCH", f"{prefix}: {what}", offset=0,
                            expected=expected, found=found)  # fmt: skip

    def _layer(self, prefix: str) -> Layer:
        """One layer's parts, checked against each other and the configuration [CT-4, CT-5]."""
        stored = self._st.tensors
        for part in ("weight_scale", "weight_shape"):
            if f"{prefix}.{part}" not in stored:
                raise self._incomplete(prefix, part)
        if prefix in self.quant.ignore:
            raise self._mismatch(prefix, "named in ignore but stored quantised",
                                 "an unquantised module", "weight_packed")  # fmt: skip
        packed, scale = stored[f"{prefix}.weight_packed"], stored[f"{prefix}.weight_scale"]
        zero_point = stored.get(f"{prefix}.weight_zero_point")
        n, k = self._weight_shape(prefix)
        if packed.dtype != "I32" or packed.shape != (n, -(-k // PACK)):
            raise self._mismatch(prefix, "weight_packed", f"I32 {[n, -(-k // PACK)]}",
                                 f"{packed.dtype} {list(packed.shape)}")  # fmt: skip
        if scale.dtype not in SCALE_DTYPES or len(scale.shape) != 2 or scale.shape[0] != n:
            raise self._mismatch(prefix, "weight_scale", f"F16/BF16/F32 [{n}, groups]",
                                 f"{scale.dtype} {list(scale.shape)}")  # fmt: skip
        groups = scale.shape[1]
        group = self._group_of(prefix, k, groups, symmetric=zero_point is None)
        if zero_point is not None and (
            zero_point.dtype != "I32" or zero_point.shape != (-(-n // PACK), groups)
        ):
            raise self._mismatch(prefix, "weight_zero_point", f"I32 {[-(-n // PACK), groups]}",
                                 f"{zero_point.dtype} {list(zero_point.shape)}")  # fmt: skip
        if n % PACK:
            raise legacy_error("CT", "UNSUPPORTED",
                               f"{prefix}: output size not a multiple of {PACK} (the AWQ "
                               "layouts pack zero points along it)", offset=0,
                               expected=f"out % {PACK} == 0", found=n)  # fmt: skip
        self._check_g_idx(prefix, k, group)
        return Layer(prefix, group, k, n, groups, packed, scale, zero_point)

    def _weight_shape(self, prefix: str) -> tuple[int, int]:
        """``weight_shape``: two positive integers, ``[out, in]``."""
        t = self._st.tensors[f"{prefix}.weight_shape"]
        if t.dtype not in ("I32", "I64") or t.shape != (2,):
            raise self._mismatch(prefix, "weight_shape", "I32 or I64 [2]",
                                 f"{t.dtype} {list(t.shape)}")  # fmt: skip
        out, inp = (int(v) for v in self._st.tensor(t.name))
        if out <= 0 or inp <= 0:
            raise self._mismatch(prefix, "weight_shape", "positive sizes", [out, inp])
        return out, inp

    def _group_of(self, prefix: str, k: int, groups: int, *, symmetric: bool) -> Group:
        """The first configuration group whose weights these parts are [CT-4, CT-5]."""
        for g in self.quant.groups:
            if g.symmetric == symmetric and g.fits(k, groups):
                return g
        if symmetric and any(not g.symmetric and g.fits(k, groups) for g in self.quant.groups):
            raise self._incomplete(prefix, "weight_zero_point")
        found = (f"{'symmetric' if symmetric else 'asymmetric'}, weight_scale of {groups} "
                 f"groups, in = {k}")  # fmt: skip
        raise self._mismatch(prefix, "its parts fit no configuration group",
                             [(g.name, g.symmetric, g.group_size) for g in self.quant.groups],
                             found)  # fmt: skip

    def _check_g_idx(self, prefix: str, k: int, group: Group) -> None:
        """A stored ``weight_g_idx`` must be ``column // group_size`` (no reordering) [CT-2]."""
        t = self._st.tensors.get(f"{prefix}.weight_g_idx")
        if t is None:
            return
        if t.dtype not in ("I32", "I64") or t.shape != (k,):
            raise self._mismatch(prefix, "weight_g_idx", f"I32 [{k}]",
                                 f"{t.dtype} {list(t.shape)}")  # fmt: skip
        size = k if group.group_size == -1 else group.group_size
        g_idx = self._st.tensor(t.name)
        identity = np.arange(k, dtype=np.int64) // size
        if not np.array_equal(g_idx.astype(np.int64), identity):
            first = int(np.flatnonzero(g_idx != identity)[0])
            raise legacy_error("CT", "UNSUPPORTED",
                               f"{prefix}: activation ordering (weight_g_idx reorders columns)",
                               offset=0, expected=f"g_idx[{first}] = {identity[first]}",
                               found=int(g_idx[first]))  # fmt: skip

    def _present(self) -> dict[str, str]:
        """Presented name -> the stored tensor it comes from (itself for dense tensors)."""
        out: dict[str, str] = {}
        for name in self._st.names():
            prefix = name.rpartition(".")[0]
            if prefix in self._layers and _part(name) in STORED_PARTS:
                source = {"qweight": "weight_packed", "scales": "weight_scale",
                          "qzeros": "weight_zero_point"}  # fmt: skip
                for part in PARTS:
                    if f"{prefix}.{part}" not in out:
                        stored = f"{prefix}.{source[part]}"
                        out[f"{prefix}.{part}"] = stored if stored in self._st.tensors else name
                continue
            if self._layer_part(name)[0] is not None:
                raise self._mismatch(prefix, f"{name!r} is stored beside the layer it names",
                                     "one tensor of that name", "two")  # fmt: skip
            out[name] = name
        return out

    # ------------------------------------------------------------------ the Reader API

    def __len__(self) -> int:
        return len(self._presented)

    def __contains__(self, name: object) -> bool:
        return name in self._presented

    def names(self) -> list[str]:
        """Presented names in file order (a layer where its first part is stored)."""
        return list(self._presented)

    def layers(self) -> list[str]:
        """Quantised layer prefixes, in file order."""
        return [n[: -len(".qweight")] for n in self.names() if self._layer_part(n)[1] == "qweight"]

    def _layer_part(self, name: str) -> tuple[Layer | None, str]:
        prefix, _, part = name.rpartition(".")
        layer = self._layers.get(prefix)
        if layer is None or part not in PARTS:
            return None, ""
        return layer, part

    def entry(self, name: str) -> TensorInfo:
        source = self._presented.get(name)
        if source is None:
            raise TensorNotFoundError(name)
        t = self._st.tensors[source]
        layer, part = self._layer_part(name)
        if layer is None:
            return TensorInfo(name, t.dtype, t.shape, "DENSE", t.offset, t.length, 0)
        shape, dtype = {
            "qweight": ((layer.k, layer.n // PACK), "I32"),
            "qzeros": ((layer.groups, layer.n // PACK), "I32"),
            "scales": ((layer.groups, layer.n), layer.scale.dtype),
        }[part]
        itemsize = 4 if dtype in ("I32", "F32") else 2
        length = itemsize * shape[0] * shape[1]
        return TensorInfo(name, dtype, shape, f"AWQ_{part.upper()}", t.offset, length, 0,
                          BITS, layer.group.group_size, layer.k, layer.n)  # fmt: skip

    def tensor(self, name: str) -> NDArray[Any]:
        """A dense tensor as stored, or a layer part in the AWQ layout [CT-1]."""
        source = self._presented.get(name)
        if source is None:
            raise TensorNotFoundError(name)
        layer, part = self._layer_part(name)
        if layer is None:
            return self._st.tensor(source)
        if part == "qweight":
            return codec.awq_pack(np.ascontiguousarray(self.codes(layer).T), BITS)
        if part == "qzeros":
            return codec.awq_pack(np.ascontiguousarray(self.zeros(layer).T), BITS)
        return np.ascontiguousarray(self._st.tensor(layer.scale.name).T)

    def codes(self, layer: Layer) -> NDArray[np.uint8]:
        """The stored fields ``uint8[out, in]`` (signed code + 8)."""
        return codec.ct_unpack(self._st.tensor(layer.packed.name), BITS)[:, : layer.k]

    def zeros(self, layer: Layer) -> NDArray[np.uint8]:
        """Zero points ``uint8[out, groups]`` (signed zero point + 8; 8 when symmetric)."""
        if layer.zero_point is None:
            return np.full((layer.n, layer.groups), OFFSET, dtype=np.uint8)
        by_group = np.ascontiguousarray(self._st.tensor(layer.zero_point.name).T)
        return np.ascontiguousarray(codec.ct_unpack(by_group, BITS)[:, : layer.n].T)

    @property
    def metadata(self) -> dict[str, Any]:
        return {"config": self.config, "quantization_config": self.quant.source}

    def linear(
        self,
        prefix: str,
        *,
        tp_rank: int = 0,
        tp_size: int = 1,
        parallel: Literal["column", "row"] | None = None,
    ) -> LinearLayer:
        """The layer repacked to Marlin in NumPy (AWQ layout when Marlin's shape rules fail)."""
        layer = self._layers.get(prefix)
        if layer is None:
            raise TensorNotFoundError(f"{prefix}.qweight")
        qweight, qzeros, scales = (
            self.tensor(f"{prefix}.{p}") for p in ("qweight", "qzeros", "scales")
        )
        bias = self.tensor(f"{prefix}.bias") if f"{prefix}.bias" in self else None
        built = awq_linear(prefix, qweight, qzeros, scales, bias, k=layer.k, n=layer.n,
                           bits=BITS, group_size=layer.group.group_size,
                           scale_dtype=layer.scale.dtype)  # fmt: skip
        return sharded(built, tp_rank=tp_rank, tp_size=tp_size, parallel=parallel)


def _part(name: str) -> str:
    return name.rpartition(".")[2]
