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

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from numpy.typing import NDArray

from reference.format.layers import LinearLayer, awq_linear, sharded
from reference.format.rules import TensorInfo
from reference.ground.errors import FormatError, TensorNotFoundError, error
from reference.sources.checkpoint import (
    CheckpointReader,
    SafetensorsFiles,
    is_safetensors,
    read_json,
    read_safetensors_header,
)

__all__ = ["QuantConfig", "V1Reader", "is_safetensors", "quant_config", "read_safetensors_header"]


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


def _legacy(code: str, message: str, **kw: Any) -> FormatError:
    return error(code, message, **kw)


def quant_config(folder: Path) -> tuple[dict[str, Any] | None, QuantConfig | None]:
    """``(config.json or None, QuantConfig or None)`` from a folder [V1-2]."""
    config = read_json(folder / "config.json") if (folder / "config.json").is_file() else None
    q: dict[str, Any] | None = None
    if config is not None and isinstance(config.get("quantization_config"), dict):
        q = dict(config["quantization_config"])
    elif (folder / "quant_config.json").is_file():
        legacy = read_json(folder / "quant_config.json")
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


class V1Reader(CheckpointReader):
    """An AWQ v1 checkpoint, read lazily, with the :class:`reference.Reader` API."""

    format_version = "1"
    family = "V1"

    @property
    def source_format(self) -> str:
        """What the checkpoint is, said truthfully [CONV-4]: AWQ v1 only when it holds an AWQ
        layer; a checkpoint without one (a model never quantised) is plain safetensors."""
        if self._layers:
            return "AWQ v1 (AutoAWQ GEMM, safetensors)"
        if self.quant is None:
            return "safetensors, not quantised (no quantisation config)"
        return "safetensors, not quantised (an AWQ config, but no quantised layer)"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        folder = self.path if self.path.is_dir() else self.path.parent
        self.config, self.quant = quant_config(folder)
        self._st = SafetensorsFiles(self.path, family="V1")
        self.files = self._st.files
        self._tensors = self._st.tensors
        self._layers = self._find_layers()

    def _find_layers(self) -> dict[str, QuantConfig]:
        layers = {}
        for name in self._tensors:
            if name.endswith(".weight_packed"):
                raise _legacy("CT_BAD_CONFIG", f"{name!r} is a compressed-tensors layer but no "
                              "config.json beside it says quant_method compressed-tensors",
                              offset=0, expected="a compressed-tensors quantization_config",
                              found=(self.quant.source.get("quant_method") if self.quant
                                     else "none"))  # fmt: skip
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

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors

    def names(self) -> list[str]:
        """Tensor names in file order (shard by shard, then by offset)."""
        return self._st.names()

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
        """The stored v1 payload (read through safetensors; BF16 and FP8 as ``ml_dtypes`` arrays,
        whose raw bits are ``.view(np.uint16)`` / ``.view(np.uint8)``)."""
        return self._st.tensor(name)

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
        layer = awq_linear(prefix, qweight, qzeros, scales, bias, k=k, n=n, bits=q.bits,
                           group_size=q.group_size, scale_dtype=scale_dtype)  # fmt: skip
        return sharded(layer, tp_rank=tp_rank, tp_size=tp_size, parallel=parallel)
