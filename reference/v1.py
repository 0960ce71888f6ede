"""Legacy AWQ v1 checkpoints (AutoAWQ "GEMM" packing in safetensors) behind the v2 reader API.

Accepted inputs [V1-1]:

* a single ``.safetensors`` file (the quantisation config then comes from a
  ``config.json`` or ``quant_config.json`` beside it, if any);
* a checkpoint folder with ``config.json`` (``quantization_config``) or a legacy
  ``quant_config.json`` (``w_bit``, ``q_group_size``, ``zero_point``, ``version``),
  and ``model.safetensors`` or shards listed by ``model.safetensors.index.json``.

Opening reads the config, the shard index and each shard's JSON header (a few
KiB each): no tensor data.  ``tensor()`` reads one tensor through the
``safetensors`` package; ``linear()`` repacks one layer to Marlin in NumPy, the
repack an engine does at load time today, which AWQ-v2 files make unnecessary.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray
from safetensors import SafetensorError, safe_open

from reference import codec
from reference.errors import FormatError, TensorNotFoundError, error
from reference.files import open_regular
from reference.layers import LinearLayer, dequantize_layer, shard
from reference.metadata import lexical_depth, parse_metadata
from reference.partial import NAME_MAX
from reference.rules import TensorInfo, element_count, extent_fits
from spec.constants import MAX_METADATA_DEPTH, MAX_METADATA_LENGTH
from spec.marlin import marlin_shape_ok
from spec.registry import DTYPE_BY_NAME

_ST_DTYPES = {
    "BOOL": "BOOL", "U8": "U8", "I8": "I8", "U16": "U16", "I16": "I16", "U32": "U32",
    "I32": "I32", "U64": "U64", "I64": "I64", "F16": "F16", "BF16": "BF16", "F32": "F32",
    "F64": "F64", "F8_E4M3": "F8_E4M3", "F8_E5M2": "F8_E5M2",
}  # fmt: skip
#: safetensors' own cap on its JSON header (``MAX_HEADER_SIZE`` in safetensors/src/tensor.rs).
_MAX_ST_HEADER = 100_000_000
_ST_ITEMSIZE = {name: DTYPE_BY_NAME[name].itemsize for name in _ST_DTYPES}
#: Read raw (as the registry's NumPy type), not through safetensors' NumPy backend, which
#: has no bfloat16 or float8 type.
_RAW_DTYPES = frozenset({"BF16", "F8_E4M3", "F8_E5M2"})


@dataclass(frozen=True)
class QuantConfig:
    """The AWQ settings of a v1 checkpoint, normalised from either config spelling."""

    bits: int
    group_size: int
    zero_point: bool
    version: str
    modules_to_not_convert: tuple[str, ...]
    source: dict[str, Any]  # the config object as found, for the converted file's metadata

    def skips(self, prefix: str) -> bool:
        """True when ``prefix`` is inside a module the config leaves unquantised."""
        parts = prefix.split(".")
        return any(m in parts or prefix.startswith(m) for m in self.modules_to_not_convert)


@dataclass(frozen=True)
class _StTensor:
    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute offset of the payload in its file
    length: int


def _legacy(code: str, message: str, **kw: Any) -> FormatError:
    return error(code, message, **kw)


def read_safetensors_header(path: Path) -> tuple[dict[str, _StTensor], dict[str, str]]:
    """Parse one safetensors file's header and check that the file holds every payload [V1-3]."""
    size = path.stat().st_size
    with open_regular(path) as f:
        head = f.read(8)
        if len(head) < 8:
            raise _legacy(
                "V1_INCOMPLETE",
                f"{path.name}: truncated safetensors file",
                offset=0,
                expected=">= 8 bytes",
                found=len(head),
                path=str(path),
            )
        (length,) = struct.unpack("<Q", head)
        if length > _MAX_ST_HEADER or 8 + length > size:
            raise _legacy(
                "V1_INCOMPLETE",
                f"{path.name}: safetensors header length out of range",
                offset=0,
                expected=f"<= {min(_MAX_ST_HEADER, size - 8)}",
                found=length,
                path=str(path),
            )
        raw = f.read(length)
    depth = lexical_depth(raw)  # measured before parsing: no recursion on hostile nesting
    if depth > MAX_METADATA_DEPTH:
        raise _legacy("V1_INCOMPLETE", f"{path.name}: safetensors header nested too deeply",
                      offset=8, expected=f"depth <= {MAX_METADATA_DEPTH}", found=depth,
                      path=str(path))  # fmt: skip
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise _legacy(
            "V1_INCOMPLETE",
            f"{path.name}: safetensors header is not JSON",
            offset=8,
            expected="a JSON object",
            found=str(exc)[:80],
            path=str(path),
        ) from exc
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__") or {}, dict):
        raise _legacy("V1_INCOMPLETE", f"{path.name}: safetensors header is not a JSON object",
                      offset=8, expected="an object", found=type(header).__name__,
                      path=str(path))  # fmt: skip
    metadata = header.pop("__metadata__", None) or {}
    base = 8 + length
    tensors = {name: _st_tensor(path, name, spec, base, size) for name, spec in header.items()}
    return tensors, metadata


def _st_tensor(path: Path, name: str, spec: Any, base: int, size: int) -> _StTensor:
    """One safetensors header entry, checked: well formed, inside the file, a known dtype,
    a length that is its shape's [V1-3]."""
    if not _well_formed(spec):
        raise _legacy("V1_INCOMPLETE", f"{path.name}: malformed header entry for {name!r}",
                      offset=8, expected="dtype, shape and data_offsets of one tensor",
                      found=str(spec)[:80], path=str(path))  # fmt: skip
    start, end = spec["data_offsets"]
    if base + end > size:
        raise _legacy(
            "V1_INCOMPLETE",
            f"{path.name}: tensor {name!r} runs past the end of the file (truncated download?)",
            offset=base + start,
            expected=f"file of >= {base + end} bytes",
            found=size,
            path=str(path),
        )
    dtype = _ST_DTYPES.get(spec["dtype"])
    if dtype is None:
        raise _legacy(
            "V1_UNSUPPORTED",
            f"{path.name}: dtype {spec['dtype']} of {name!r}",
            offset=8,
            expected=sorted(_ST_DTYPES),
            found=spec["dtype"],
        )
    if end - start != _ST_ITEMSIZE[dtype] * element_count(tuple(spec["shape"])):
        raise _legacy("V1_INCOMPLETE", f"{path.name}: {name!r} length is not its shape's",
                      offset=8, expected=f"shape {spec['shape']} of {dtype}",
                      found=f"{end - start} bytes", path=str(path))  # fmt: skip
    if not extent_fits(tuple(spec["shape"]), _ST_ITEMSIZE[dtype]):
        raise _legacy("V1_INCOMPLETE", f"{path.name}: {name!r} shape is not representable",
                      offset=8, expected="non-zero dimensions x itemsize < 2**63",
                      found=spec["shape"], path=str(path))  # fmt: skip
    return _StTensor(name, path, dtype, tuple(spec["shape"]), base + start, end - start)


def _well_formed(spec: Any) -> bool:
    """A safetensors header entry: a str dtype, a list of sizes, two ordered offsets."""

    def sizes(value: Any) -> bool:
        return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)

    if not isinstance(spec, dict) or not isinstance(spec.get("dtype"), str):
        return False
    offsets = spec.get("data_offsets")
    if not sizes(spec.get("shape")) or not isinstance(offsets, list) or not sizes(offsets):
        return False
    return len(offsets) == 2 and offsets[0] <= offsets[1]


def _read_json(path: Path, *, limit: int = MAX_METADATA_LENGTH) -> dict[str, Any]:
    """A checkpoint's JSON file, read with the metadata's strict rules [META-5, META-6]: at
    most ``limit`` bytes, depth measured before parsing, no duplicate keys, NaN, overlong or
    out-of-range numbers or unpaired surrogates, and an object at the top."""
    try:
        with open_regular(path) as f:  # read what is there, not a buffer of the limit's size
            raw = f.read(min(os.fstat(f.fileno()).st_size, limit) + 1)
    except OSError as exc:
        raise _legacy("V1_BAD_CONFIG", f"{path.name} cannot be read", offset=0,
                      expected="a readable file", found=exc.strerror or str(exc),
                      path=str(path)) from exc  # fmt: skip
    if len(raw) > limit:
        raise _legacy("V1_BAD_CONFIG", f"{path.name} is too large", offset=0,
                      expected=f"<= {limit} bytes", found=f"more than {limit} bytes",
                      path=str(path))  # fmt: skip
    try:
        return parse_metadata(raw, offset=0)
    except FormatError as exc:
        raise _legacy("V1_BAD_CONFIG", f"{path.name} is not a strict JSON object: {exc.message}",
                      offset=exc.offset, expected=exc.expected, found=exc.found,
                      path=str(path)) from exc  # fmt: skip


def _plain_file_name(name: str) -> bool:
    """A file name with no folder part: no separator, not '.' or '..', no NUL, and short
    enough to be one (at most NAME_MAX bytes) [V1-3]."""
    return (
        name not in ("", ".", "..")
        and len(name.encode("utf-8", "surrogatepass")) <= NAME_MAX
        and "/" not in name
        and os.sep not in name
        and "\0" not in name
        and (os.altsep is None or os.altsep not in name)
    )


def quant_config(folder: Path) -> tuple[dict[str, Any] | None, QuantConfig | None]:
    """``(config.json or None, QuantConfig or None)`` from a folder [V1-2]."""
    config = _read_json(folder / "config.json") if (folder / "config.json").is_file() else None
    q: dict[str, Any] | None = None
    if config is not None and isinstance(config.get("quantization_config"), dict):
        q = dict(config["quantization_config"])
    elif (folder / "quant_config.json").is_file():
        legacy = _read_json(folder / "quant_config.json")
        q = {
            "quant_method": legacy.get("quant_method", "awq"),
            "bits": legacy.get("w_bit", legacy.get("bits")),
            "group_size": legacy.get("q_group_size", legacy.get("group_size")),
            "zero_point": legacy.get("zero_point"),
            "version": legacy.get("version", "gemm"),
            "modules_to_not_convert": legacy.get("modules_to_not_convert"),
        }
    if q is None:
        return config, None
    return config, _normalise(q)


def _normalise(q: dict[str, Any]) -> QuantConfig:
    def refuse(what: str, expected: object, found: object) -> FormatError:
        return _legacy(
            "V1_UNSUPPORTED",
            f"cannot read this checkpoint exactly: {what}",
            offset=0,
            expected=expected,
            found=found,
        )

    method = str(q.get("quant_method", "awq")).lower()
    if method != "awq":
        raise refuse("quant_method", "awq", method)
    version = str(q.get("version", "gemm")).lower()
    if version != "gemm":
        raise refuse(
            "AWQ version (gemv, gemv_fast and AutoAWQ's marlin are other layouts)", "gemm", version
        )
    if q.get("zero_point") is False:
        raise refuse("zero_point (Marlin's AWQ path needs zero points)", True, False)
    bits, group_size = q.get("bits"), q.get("group_size")
    if type(bits) is not int or bits not in (4, 8):
        raise refuse("bits", "4 or 8", bits)
    if type(group_size) is not int or not (group_size == -1 or group_size > 0):
        raise refuse("group_size", "-1 or a positive integer", group_size)
    skip = q.get("modules_to_not_convert") or ()
    if not isinstance(skip, list | tuple) or not all(isinstance(m, str) for m in skip):
        raise _legacy("V1_BAD_CONFIG", "modules_to_not_convert is not a list of module names",
                      offset=0, expected="a list of str", found=str(skip)[:80])  # fmt: skip
    return QuantConfig(bits, group_size, True, version, tuple(skip), q)


def _weight_map(index: Path) -> dict[str, str]:
    """The shard index's tensor -> file map, refused before any shard is opened unless it is
    an object of names to plain file names in the checkpoint folder [V1-3]."""
    weight_map = _read_json(index, limit=_MAX_ST_HEADER).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(file, str) for file in weight_map.values()
    ):
        found = type(weight_map).__name__ if not isinstance(weight_map, dict) else "other values"
        raise _legacy("V1_BAD_CONFIG", "weight_map is not an object of tensor -> file name",
                      offset=0, expected="an object of strings", found=found,
                      path=str(index))  # fmt: skip
    outside = sorted({file for file in weight_map.values() if not _plain_file_name(file)})
    if outside:
        message = "the shard index names files that are not plain names in the checkpoint folder"
        raise _legacy("V1_BAD_CONFIG", message,
                      offset=0, expected="plain file names", found=outside[:5],
                      path=str(index))  # fmt: skip
    return weight_map


class V1Reader:
    """An AWQ v1 checkpoint, read lazily, with the :class:`reference.Reader` API."""

    format_version = "1"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        folder = self.path if self.path.is_dir() else self.path.parent
        self.config, self.quant = quant_config(folder)
        self.files = self._shard_files()
        self._tensors: dict[str, _StTensor] = {}
        self._st_metadata: dict[str, str] = {}
        for file in self.files:
            tensors, meta = read_safetensors_header(file)
            self._tensors.update(tensors)
            self._st_metadata.update(meta)
        self._check_weight_map()
        self._layers = self._find_layers()
        self._handles: dict[Path, Any] = {}

    def _shard_files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        index = self.path / "model.safetensors.index.json"
        if index.is_file():
            self._weight_map = _weight_map(index)
            names = sorted(set(self._weight_map.values()))
            missing = [n for n in names if not (self.path / n).is_file()]
            if missing:
                raise _legacy(
                    "V1_INCOMPLETE",
                    "the shard index names files that are missing",
                    offset=0,
                    expected="every shard present",
                    found=missing[:5],
                    path=str(index),
                )
            return [self.path / n for n in names]
        single = self.path / "model.safetensors"
        if single.is_file():
            return [single]
        found = sorted(p.name for p in self.path.glob("*.safetensors"))
        raise _legacy(
            "V1_INCOMPLETE",
            "no model.safetensors or model.safetensors.index.json",
            offset=0,
            expected="a checkpoint folder",
            found=found[:5] or "nothing",
            path=str(self.path),
        )

    def _check_weight_map(self) -> None:
        weight_map = getattr(self, "_weight_map", None)
        if not weight_map:
            return
        for name, file in weight_map.items():
            t = self._tensors.get(name)
            if t is None or t.file.name != file:
                raise _legacy(
                    "V1_INCOMPLETE",
                    f"tensor {name!r} is listed in the shard index but missing from {file}",
                    offset=0,
                    expected=name,
                    found="absent",
                    path=str(self.path / file),
                )

    def _find_layers(self) -> dict[str, QuantConfig]:
        layers = {}
        for name in self._tensors:
            if not name.endswith(".qweight"):
                continue
            prefix = name[: -len(".qweight")]
            if self.quant is None:
                raise _legacy(
                    "V1_BAD_CONFIG",
                    f"{name!r} is quantised but no quantisation config "
                    "was found (config.json quantization_config or quant_config.json)",
                    offset=0,
                    expected="a quantisation config",
                    found="none",
                )
            if self.quant.skips(prefix):
                raise _legacy(
                    "V1_SHAPE_MISMATCH",
                    f"{prefix!r} is in modules_to_not_convert but holds a qweight",
                    offset=0,
                    expected="an unquantised module",
                    found="qweight",
                )
            for part in ("qzeros", "scales"):
                if f"{prefix}.{part}" not in self._tensors:
                    raise _legacy(
                        "V1_INCOMPLETE",
                        f"{prefix}.qweight without {prefix}.{part}",
                        offset=0,
                        expected=f"{prefix}.{part}",
                        found="absent",
                    )
            self._check_layer_shapes(prefix, self.quant)
            layers[prefix] = self.quant
        return layers

    def _check_layer_shapes(self, prefix: str, q: QuantConfig) -> None:
        """qweight, qzeros and scales agree with each other and the config [V1-4]."""
        qw, qz, sc = (self._tensors[f"{prefix}.{p}"] for p in ("qweight", "qzeros", "scales"))
        pf = 32 // q.bits

        def bad(what: str, expected: object, found: object) -> FormatError:
            return _legacy(
                "V1_SHAPE_MISMATCH",
                f"{prefix}: {what}",
                offset=0,
                expected=expected,
                found=found,
                path=str(qw.file),
            )

        if qw.dtype != "I32" or len(qw.shape) != 2 or qz.dtype != "I32":
            raise bad(
                "qweight and qzeros must be int32 matrices",
                "I32 [k, n/pf]",
                f"{qw.dtype} {list(qw.shape)}, {qz.dtype}",
            )
        k, n = qw.shape[0], qw.shape[1] * pf
        if q.group_size != -1 and k % q.group_size:
            raise bad("group_size does not divide k", f"k % {q.group_size} == 0", k)
        groups = 1 if q.group_size == -1 else k // q.group_size
        if qz.shape != (groups, n // pf):
            raise bad("qzeros shape", [groups, n // pf], list(qz.shape))
        if sc.shape != (groups, n) or sc.dtype not in ("F16", "BF16", "F32"):
            raise bad(
                "scales shape or dtype",
                f"F16/BF16/F32 {[groups, n]}",
                f"{sc.dtype} {list(sc.shape)}",
            )
        hidden = (self.config or {}).get("hidden_size")
        if hidden and prefix.endswith(("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")):
            if k != hidden:
                raise bad("in_features disagrees with config.json hidden_size", hidden, k)

    # ------------------------------------------------------------------ the Reader API

    def __enter__(self) -> V1Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for handle in self._handles.values():
            handle.__exit__(None, None, None)
        self._handles.clear()

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def names(self) -> list[str]:
        """Tensor names in file order (shard by shard, then by offset)."""
        return [t.name for t in sorted(self._tensors.values(), key=lambda t: (t.file, t.offset))]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def entries(self) -> list[TensorInfo]:
        """Every entry, in the order of :meth:`names`."""
        return [self.entry(name) for name in self.names()]

    def view(self, info: TensorInfo) -> NDArray[Any]:
        """The stored v1 payload of an entry this reader returned."""
        return self.tensor(info.name)

    def layers(self) -> list[str]:
        return [
            n[: -len(".qweight")] for n in self.names() if n[: -len(".qweight")] in self._layers
        ]

    def entry(self, name: str) -> TensorInfo:
        t = self._tensors.get(name)
        if t is None:
            raise TensorNotFoundError(name)
        layout, fields = "DENSE", (0, 0, 0, 0)
        prefix, _, part = name.rpartition(".")
        q = self._layers.get(prefix)
        if q is not None and part in ("qweight", "qzeros", "scales"):
            qw = self._tensors[f"{prefix}.qweight"]
            layout = f"AWQ_{part.upper()}"
            fields = (q.bits, q.group_size, qw.shape[0], qw.shape[1] * 32 // q.bits)
        return TensorInfo(name, t.dtype, t.shape, layout, t.offset, t.length, 0, *fields)

    def tensor(self, name: str) -> NDArray[Any]:
        """The stored v1 payload (read through safetensors; BF16 as raw uint16 bits)."""
        t = self._tensors.get(name)
        if t is None:
            raise TensorNotFoundError(name)
        if t.dtype in _RAW_DTYPES:
            d = DTYPE_BY_NAME[t.dtype]
            raw = np.fromfile(t.file, dtype=d.numpy, count=t.length // d.itemsize, offset=t.offset)
            return raw.reshape(t.shape)
        handle = self._handle(t.file)
        try:
            return np.asarray(handle.get_tensor(name))
        except SafetensorError as exc:
            raise _legacy("V1_INCOMPLETE", f"{t.file.name}: safetensors refuses it: {exc}",
                          offset=t.offset, expected="a valid safetensors file",
                          found=str(exc)[:120], path=str(t.file)) from exc  # fmt: skip

    def _handle(self, file: Path) -> Any:
        """safetensors' own reader of one file, opened once; what it refuses (offsets with
        gaps or overlaps, a data section that does not end the file) is ``V1_INCOMPLETE``."""
        handle = self._handles.get(file)
        if handle is None:
            try:
                handle = safe_open(str(file), framework="numpy").__enter__()
            except SafetensorError as exc:
                raise _legacy("V1_INCOMPLETE", f"{file.name}: safetensors refuses it: {exc}",
                              offset=8, expected="a valid safetensors file",
                              found=str(exc)[:120], path=str(file)) from exc  # fmt: skip
            self._handles[file] = handle
        return handle

    @property
    def metadata(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.config is not None:
            out["config"] = self.config
        if self.quant is not None:
            out["quantization_config"] = self.quant.source
        return out

    def linear(
        self,
        prefix: str,
        *,
        tp_rank: int = 0,
        tp_size: int = 1,
        parallel: Literal["column", "row"] | None = None,
    ) -> LinearLayer:
        """The layer repacked to Marlin in NumPy (AWQ layout when Marlin's shape rules fail)."""
        q = self._layers.get(prefix)
        if q is None:
            raise TensorNotFoundError(f"{prefix}.qweight")
        qweight, qzeros, scales = (
            self.tensor(f"{prefix}.{p}") for p in ("qweight", "qzeros", "scales")
        )
        k, n = qweight.shape[0], qweight.shape[1] * 32 // q.bits
        scale_dtype = self._tensors[f"{prefix}.scales"].dtype
        bias = self.tensor(f"{prefix}.bias") if f"{prefix}.bias" in self else None
        if marlin_shape_ok(k, n, q.bits, q.group_size):
            as_float = scales if scales.dtype.kind == "f" else scales.view(np.float16)
            mq, ms, mz = codec.awq_to_marlin(
                qweight, qzeros, as_float, bits=q.bits, group_size=q.group_size
            )
            layer = LinearLayer(
                prefix,
                "MARLIN",
                mq,
                np.asarray(ms).view(scales.dtype),
                mz,
                bias,
                k,
                n,
                q.bits,
                q.group_size,
                scale_dtype,
            )
        else:
            layer = LinearLayer(
                prefix,
                "AWQ",
                qweight,
                scales,
                qzeros,
                bias,
                k,
                n,
                q.bits,
                q.group_size,
                scale_dtype,
            )
        if tp_size == 1 and parallel is None:
            return layer
        if parallel not in ("column", "row"):
            raise ValueError(f"parallel must be 'column' or 'row', got {parallel!r}")
        return shard(layer, tp_rank=tp_rank, tp_size=tp_size, parallel=parallel)

    def dequantize(self, prefix: str) -> NDArray[np.float32]:
        return dequantize_layer(self.linear(prefix))

    def validate(self) -> None:
        """Configs, shard index, headers and layer shapes are checked on open; this adds
        safetensors' own check of every shard (contiguous offsets, data to the end)."""
        for file in sorted({t.file for t in self._tensors.values()}):
            self._handle(file)

    def verify(self) -> None:
        """AWQ v1 carries no checksums: reading every tensor once is all that can be done."""
        for name in self.names():
            self.tensor(name)


def is_safetensors(path: Path) -> bool:
    """A file that starts like a safetensors file: u64 length, then ``{``."""
    with open_regular(path) as f:
        head = f.read(9)
    return len(head) == 9 and head[8:9] == b"{"
