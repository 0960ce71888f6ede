"""The load format ``awq_v2``: a ``BaseModelLoader`` that reads each tensor from the AWQ-v2
file into the parameter that holds it.

``BaseModelLoader`` in vLLM 0.33.0 (``vllm/model_executor/model_loader/base_loader.py:27``)
has two abstract methods, ``download_model`` (line 39) and ``load_weights`` (line 44);
its ``load_model`` (line 63) builds the model, calls ``load_weights`` and then
``process_weights_after_loading`` on every module (line 109).

How a quantised module is filled (:func:`load_layer`): for each stored part (one for a plain
layer; ``q_proj, k_proj, v_proj`` for ``qkv_proj`` and ``gate_proj, up_proj`` for
``gate_up_proj``, from the model's ``packed_modules_mapping``) this rank's shard is cut by the
reference reader's public API (``Reader.linear(prefix, tp_rank=, tp_size=, parallel=)``, the
spec's Tensor-parallel slicing, including the re-permuted scales of a row shard whose k is the
group size) and written into that part's columns of the module's ``qweight``, ``scales``,
``qzeros`` (and ``bias``).  A whole, unmerged layer on rank 0 of 1 is read with positioned
reads straight into the parameter's bytes (``Reader.read_into``); a slice (merged columns, a
TP shard) is copied once from the file's memory map into the parameter's columns.  On a GPU
each part goes through one pinned host buffer and one copy to the device (not run here).
Every other tensor (embeddings, norms, lm_head) goes through the model's own
``load_weights``, as vLLM's default loader would pass it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from vllm.model_executor.model_loader.base_loader import BaseModelLoader

from awq2_vllm.config import weight_file
from awq2_vllm.errors import PluginError
from awq2_vllm.method import AWQv2LinearMethod, Part, plan
from reference.dtypes import raw_bits
from reference.layers import PARTS
from reference.reader import Reader
from reference.torch import TORCH_DTYPES, bytes_of, read_entries
from reference.writer import dtype_name_of
from spec.marlin import pack_factor

MARLIN_TILE = 16


def load_layer(layer: torch.nn.Module, reader: Reader, where: str | None = None) -> list[str]:
    """Fill a module built with :class:`AWQv2LinearMethod` from ``reader``; return the names
    of the file's tensors it used."""
    method = layer.quant_method
    assert isinstance(method, AWQv2LinearMethod)
    where = where or method.prefix
    used: list[str] = []
    parts = plan(layer, method.parts)
    whole = len(parts) == 1 and parts[0].count == 1
    for part in parts:
        used += _load_part(layer, reader, part, where, whole)
    return used


def _load_part(layer: Any, reader: Reader, part: Part, where: str, whole: bool) -> list[str]:
    stored = reader.linear(part.prefix, tp_rank=part.rank, tp_size=part.count,
                           parallel=part.parallel)  # fmt: skip
    if stored.layout != "MARLIN":
        raise PluginError("AWQ_LAYOUT", where, f"{part.prefix!r} in the MARLIN_* layouts",
                          "the AWQ_* layouts")  # fmt: skip
    if stored.bits != 4:
        raise PluginError("BITS_UNSUPPORTED", where, f"{part.prefix!r} in 4 bits",
                          f"{stored.bits} bits")  # fmt: skip
    if (stored.k, stored.n) != (layer.awq2_k, part.n):
        raise PluginError("SHAPE_MISMATCH", where, f"{part.prefix!r} with k = {layer.awq2_k}, "
                          f"n = {part.n}", f"k = {stored.k}, n = {stored.n}")  # fmt: skip
    pf = pack_factor(stored.bits)
    cols = {
        "qweight": slice(
            part.offset * MARLIN_TILE // pf, (part.offset + part.n) * MARLIN_TILE // pf
        ),
        "scales": slice(part.offset, part.offset + part.n),
        "qzeros": slice(part.offset // pf, (part.offset + part.n) // pf),
    }
    arrays = {"qweight": stored.qweight, "scales": stored.scales, "qzeros": stored.qzeros}
    names = [f"{part.prefix}.{name}" for name in PARTS]
    for name in PARTS:
        param = getattr(layer, name)
        entry = reader.entry(f"{part.prefix}.{name}")
        if whole and TORCH_DTYPES[entry.dtype] == param.dtype and param.device.type == "cpu":
            reader.read_into(entry, bytes_of(param.data))  # positioned reads into the storage
        else:
            _copy_into(param.data[:, cols[name]], arrays[name])
    bias = getattr(layer, "bias", None)
    if bias is not None:
        if stored.bias is None:
            raise PluginError("BIAS_MISSING", where, f"{part.prefix}.bias", "no such tensor")
        target = (
            bias.data if part.parallel == "row" else bias.data[part.offset : part.offset + part.n]
        )
        _copy_into(target, stored.bias)
        names.append(f"{part.prefix}.bias")
    return names


def _copy_into(target: torch.Tensor, array: Any) -> None:
    """One copy of ``array``'s values into ``target`` (a view of a parameter), cast only when
    the stored dtype is not the parameter's (F16 scales in a bf16 model)."""
    with warnings.catch_warnings():  # a read-only view of the map: only read here
        warnings.simplefilter("ignore", UserWarning)
        source = torch.from_numpy(np.ascontiguousarray(raw_bits(array)))
    source = source.view(TORCH_DTYPES[dtype_name_of(array)])
    if target.device.type != "cpu":
        source = source.pin_memory()
    target.copy_(source.to(target.dtype) if source.dtype != target.dtype else source)


class AWQv2ModelLoader(BaseModelLoader):
    """``--load-format awq_v2``: the model folder's ``model.awq2``."""

    def download_model(self, model_config: Any) -> None:
        path = weight_file(model_config.model)
        if not path.is_file():
            raise PluginError("NO_WEIGHTS", str(model_config.model), "a model.awq2 file", "none")

    def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
        with Reader(weight_file(model_config.model), validate=True) as reader:
            used: set[str] = set()
            for name, module in model.named_modules():
                if isinstance(getattr(module, "quant_method", None), AWQv2LinearMethod):
                    used.update(load_layer(module, reader, name))
            rest = [info for info in reader.entries() if info.name not in used]
            model.load_weights(_tensors(reader, rest))  # type: ignore[operator]


def _tensors(reader: Reader, infos: list[Any]) -> Iterator[tuple[str, torch.Tensor]]:
    for info, tensor in zip(infos, read_entries(reader, infos), strict=True):
        yield info.name, tensor
