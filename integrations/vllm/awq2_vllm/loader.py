"""The load format ``awq_v2``: a ``BaseModelLoader`` that reads each tensor from the model
folder's AWQ-v2 weights into the parameter that holds it.

``BaseModelLoader`` (``vllm/model_executor/model_loader/base_loader.py``, the same in vLLM
0.32.0 and 0.33.0) has two abstract methods, ``download_model`` and ``load_weights``; its
``load_model`` builds the model, calls ``load_weights`` and then
``process_weights_after_loading`` on every module.  This loader checks the folder first
(:meth:`AWQv2ModelLoader.load_model`): no weights (``NO_WEIGHTS``) or a rank set cut for
another tensor-parallel size (``TP_MISMATCH``) is refused before any model is built.

What the worker of tensor-parallel rank ``r`` of ``T`` opens (:mod:`awq2_vllm.weights`): the
one file, every member of a size-split set, or only rank ``r``'s members of a rank set.

How a quantised module is filled (:func:`load_layer`): for each stored part (one for a plain
layer; ``q_proj, k_proj, v_proj`` for ``qkv_proj`` and ``gate_proj, up_proj`` for
``gate_up_proj``, from the model's ``packed_modules_mapping``; or the merged module's own
name when the checkpoint stored it fused, as Phi-3's do [LAY-11]) this rank's shard is read
and written into that part's columns of the module's ``qweight``, ``scales``, ``qzeros``
(and ``bias``).  From a rank set the shard is the member's tensor as stored.  From one file
or a split set at ``T > 1`` it is cut by the reference reader (``linear(prefix, tp_rank=,
tp_size=, parallel=)``, the spec's Tensor-parallel slicing) exactly as the vLLM module
partitions itself (:func:`awq2_vllm.method.partition`: its ``tp_rank``, ``tp_size``, output
sizes and key/value head replicas), whatever the architecture: no table of ours is
consulted.  A whole layer, or a rank set's fused layer, goes into the parameter in one copy
(``read_into``: out of a private map of one file, or by positioned reads straight into the
parameter's bytes from a set's member); a slice is copied once from the file's memory map
into the parameter's columns.  On vLLM's CPU build, whose processing replaces every
quantised parameter (:mod:`awq2_vllm.cpu`), a whole layer of one file is not copied at all:
the parameter's data becomes the tensor over the private map (``Source.lend``), read once
when the layer is processed.  On a GPU each part goes through one pinned host
buffer and one copy to the device (not run here).

Every other tensor (embeddings, norms, lm_head): from one file or a split set through the
model's own ``load_weights``, which cuts it as vLLM cuts checkpoints (from one file each is a
tensor over a private, copy-on-write mapping of the file, handed over one at a time, as
safetensors hands vLLM its tensors: ``UntypedStorage.from_file(..., shared=False)``,
``bindings/python/src/lib.rs`` 705-730 of huggingface/safetensors; no buffer in between);
from a rank set, where
it is already this rank's cut (vocabulary rows padded to 64 as vLLM pads them [SET-12]),
copied into the parameter of the same name and shape.  With pipeline parallelism, tensors of
modules this stage does not build (``PPMissingLayer``) are not read.

What is checked: one file is fully validated once (header, index, every entry, layers,
bounds, overlaps, padding, metadata [RD-2]) and its entries are then found by name in what
validation checked, not looked up and checked in the index again (``Reader.validated_entries``
[RD-4]); a set is opened validated as :func:`awq2_vllm.weights.open_weights` opens it.
Payload checksums are not read by default: neither vLLM's loaders nor safetensors verify any.
``AWQ2_VLLM_VERIFY=1`` checks every payload's CRC-32C [ENT-10] (``Reader.verify``, by
positioned reads) before anything is copied, and refuses a damaged one with
``BAD_TENSOR_CHECKSUM``.

Once the model is loaded and its weights processed, the C heap's free pages are handed back
(glibc's ``malloc_trim``): the CPU build's repack (:mod:`awq2_vllm.cpu`) frees NumPy
temporaries that glibc would otherwise keep, and the engine's peak RSS, reached later with
the KV cache, would count them.

Each worker logs what it opened and read (``awq2_vllm: TP rank r/T read ...``), and writes it
as JSON into the folder ``AWQ2_VLLM_LOAD_REPORT`` names, when set.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import mmap
import os
import shlex
import time
import warnings
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from vllm.model_executor.model_loader.base_loader import BaseModelLoader

from awq2_vllm.errors import PluginError
from awq2_vllm.method import AWQv2LinearMethod, Part, plan
from awq2_vllm.moe import MOE_METHODS, load_experts
from awq2_vllm.weights import (
    CHECKPOINTS,
    Weights,
    check_tp,
    find_weights,
    open_weights,
    opened_files,
)
from reference.format.layers import PARTS, columns, read_linear, shard
from reference.format.reader import Reader
from reference.format.rules import TensorInfo
from reference.ground.errors import TensorNotFoundError
from reference.quant.dtypes import raw_bits
from reference.torch import TORCH_DTYPES, bytes_of, from_array
from reference.write.writer import dtype_name_of
from spec.marlin import pack_factor

MARLIN_TILE = 16
REPORT_ENV = "AWQ2_VLLM_LOAD_REPORT"
VERIFY_ENV = "AWQ2_VLLM_VERIFY"
# A child of vLLM's logger, so that vLLM's logging configuration prints it.
log = logging.getLogger("vllm.awq2_vllm")


class Checked:
    """One file's entries as its full validation checked them, found by name (what
    :func:`reference.format.layers.read_linear` asks of a reader: ``in``, ``entry``,
    ``view``, ``tensor``); the payloads are the reader's zero-copy views."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.ordered = reader.validated_entries()  # [RD-2], each entry checked once
        self.by_name = {info.name: info for info in self.ordered}

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def entry(self, name: str) -> TensorInfo:
        info = self.by_name.get(name)
        if info is None:
            raise TensorNotFoundError(name)
        return info

    def view(self, info: TensorInfo) -> Any:
        return self.reader.view(info)

    def tensor(self, name: str) -> Any:
        return self.reader.view(self.entry(name))


class Source:
    """What one worker reads: the opened weights, its rank, and how layers are cut."""

    def __init__(self, weights: Weights, reader: Any, rank: int, size: int) -> None:
        self.weights, self.reader, self.rank, self.size = weights, reader, rank, size
        # one file: its validated entries, and (when first needed) a private map of it
        self.checked = Checked(reader) if isinstance(reader, Reader) else None
        self._private: mmap.mmap | None = None
        self.bytes_read = 0
        self.tensors_read = 0

    @property
    def rank_set(self) -> bool:
        return self.weights.kind == "rank"

    def _rank_kw(self) -> dict[str, int]:
        """A rank set's own rank; a split set is one rank's worth (every worker reads rank 0
        of it and cuts its shard, as from a single file)."""
        return {"rank": self.rank} if self.rank_set else {}

    def entry(self, name: str) -> TensorInfo:
        if self.checked is not None:
            return self.checked.entry(name)
        return self.reader.entry(name, **self._rank_kw())

    def entries(self) -> list[TensorInfo]:
        if self.checked is not None:
            return list(self.checked.ordered)
        if not self.weights.stores_marlin:  # a checkpoint: its presented names [V1-1, CT-1]
            return [self.reader.entry(name) for name in self.reader.names()]
        return list(self.reader.entries(**self._rank_kw()))

    def linear(self, part: Part) -> Any:
        """The piece of a stored layer that ``part`` names: a rank set's layer as stored, or
        this rank's shard cut from the whole layer (of its columns ``start .. start + width``
        when the layer is stored fused [LAY-11])."""
        if self.rank_set:
            layer = self.reader.linear(part.prefix, tp_rank=self.rank)
            return columns(layer, part.start, part.start + part.width) if part.width else layer
        if not part.width:
            return self._linear(part.prefix, tp_rank=part.rank, tp_size=part.count,
                                parallel=part.parallel)  # fmt: skip
        piece = columns(self._linear(part.prefix), part.start, part.start + part.width)
        if part.parallel is None:
            return piece
        return shard(piece, tp_rank=part.rank, tp_size=part.count, parallel=part.parallel)

    def _linear(self, prefix: str, **cut: Any) -> Any:
        """One file's layer from its validated entries; anything else through its reader's own
        ``linear`` (a checkpoint's repacks to Marlin as it reads [V1-1, CT-1])."""
        if self.checked is not None:
            return read_linear(self.checked, prefix, **cut)
        return self.reader.linear(prefix, **cut)

    def read_into(self, info: TensorInfo, param: torch.Tensor) -> None:
        """A whole payload into a parameter of its dtype on the CPU: from one file, one copy
        out of the private map (torch's own copy, on its threads); from a set, positioned
        reads straight into the parameter's bytes."""
        if self.weights.kind == "file":
            param.copy_(self._mapped(info).view(param.shape))
        else:
            self.reader.read_into(info, bytes_of(param), **self._rank_kw())
        self.count(info)

    def lend(self, info: TensorInfo, param: torch.nn.Parameter) -> bool:
        """One file's payload *as* the parameter's data, no copy: the tensor over the private
        map replaces the storage vLLM allocated (never touched, so never faulted in).  Only
        for a layer the CPU build's processing replaces whole (:mod:`awq2_vllm.cpu` reads
        these tensors once and registers new parameters), so the file's pages are mapped
        from the load until that layer is processed, and a write would change this
        process's copy of a page, never the file.  False (nothing done) from a set."""
        if self.weights.kind != "file":
            return False
        param.data = self._mapped(info).view(param.shape)
        self.count(info)
        return True

    def tensors(self, infos: list[TensorInfo]) -> Iterator[tuple[str, torch.Tensor]]:
        if self.weights.kind == "file":
            arrays = (self._mapped(info) for info in infos)
        elif not self.weights.stores_marlin:
            arrays = (from_array(self.reader.tensor(info.name)) for info in infos)
        else:
            arrays = (self._read_one(info) for info in infos)
        for info, tensor in zip(infos, arrays, strict=True):
            self.count(info)
            yield info.name, tensor

    def _read_one(self, info: TensorInfo) -> torch.Tensor:
        out = torch.empty(info.shape, dtype=TORCH_DTYPES[info.dtype])
        self.reader.read_into(info, bytes_of(out), **self._rank_kw())
        return out

    def _mapped(self, info: TensorInfo) -> torch.Tensor:
        """The payload of ``info`` as a tensor over a private (copy-on-write) map of the file:
        no copy until the weight loader copies it into its parameter, and a loader that
        writes into it changes its own pages, never the file."""
        if self._private is None:
            self.reader.check_length()  # TRUNCATED, not SIGBUS, for a file cut since opening
            self._private = mmap.mmap(self.reader.fileno(), 0, access=mmap.ACCESS_COPY)
        dtype = TORCH_DTYPES[info.dtype]
        if not info.length:
            return torch.empty(info.shape, dtype=dtype)
        raw = torch.frombuffer(self._private, dtype=torch.uint8, count=info.length,
                               offset=info.offset)  # fmt: skip
        return raw.view(dtype).reshape(info.shape)

    def verify(self) -> None:
        """``AWQ2_VLLM_VERIFY=1``: every payload's CRC-32C [ENT-10], before any is copied."""
        if os.environ.get(VERIFY_ENV, "") == "1" and self.weights.stores_marlin:
            self.reader.verify()

    def count(self, info: TensorInfo) -> None:
        self.bytes_read += info.length
        self.tensors_read += 1

    def count_once(self, info: TensorInfo, counted: set[str]) -> None:
        if info.name not in counted:
            counted.add(info.name)
            self.count(info)

    def close(self) -> None:
        self._private = None  # unmapped once the last tensor over it is gone
        self.reader.close()

    def report(self) -> dict[str, Any]:
        files = opened_files(self.reader)
        stored = self.weights.path
        folder = stored if self.weights.kind == "checkpoint" else stored.parent
        return {"model": str(folder), "tp_rank": self.rank,
                "tp_size": self.size, "kind": self.weights.kind,
                "files": [f.name for f in files],
                "file_bytes": sum(os.stat(f).st_size for f in files),
                "tensors_read": self.tensors_read, "bytes_read": self.bytes_read}  # fmt: skip


def open_source(model: Any, rank: int, size: int) -> Source:
    """What the worker of ``rank`` of ``size`` reads of the model folder ``model``."""
    weights = find_weights(model)
    # one file: the opening checks here, its full validation in Checked, which keeps the entries
    reader = open_weights(weights, rank, size, validate=weights.kind != "file")
    try:
        return Source(weights, reader, rank, size)
    except BaseException:
        reader.close()
        raise


def load_layer(layer: torch.nn.Module, source: Source, where: str | None = None) -> list[str]:
    """Fill a module built with :class:`AWQv2LinearMethod` from ``source``; return the names
    of the tensors it used."""
    method = layer.quant_method
    assert isinstance(method, AWQv2LinearMethod)
    where = where or method.prefix
    parts = plan(layer, method.parts, as_stored=source.rank_set)
    if len({p.prefix for p in parts}) == 1 and all(p.parallel is None for p in parts):
        # one stored layer, as stored, fills the module: its bytes straight into the parameters
        whole = Part(parts[0].prefix, 0, sum(p.n for p in parts), 0, 1, None)
        lend = method.kernel_path == "cpu"  # the CPU build's processing replaces them
        return _load_part(layer, source, whole, where, whole=True, counted=set(), lend=lend)
    used: list[str] = []
    counted: set[str] = set()
    for part in parts:
        used += _load_part(layer, source, part, where, whole=False, counted=counted)
    return used


def _load_part(layer: Any, source: Source, part: Part, where: str, *, whole: bool,
               counted: set[str], lend: bool = False) -> list[str]:  # fmt: skip
    """Copy one piece of a stored layer into its columns of the module's parameters (a fused
    layer's entries are counted once in the load report, however many pieces it gives); a
    whole layer the CPU build will process is lent, not copied (:meth:`Source.lend`)."""
    stored = source.linear(part)
    if stored.layout != "MARLIN":
        raise PluginError("AWQ_LAYOUT", where, f"{part.prefix!r} in the MARLIN_* layouts",
                          "the AWQ_* layouts (Marlin's shape rules do not hold [LAY-8])"
                          )  # fmt: skip
    if stored.bits != 4:
        raise PluginError("BITS_UNSUPPORTED", where, f"{part.prefix!r} in 4 bits",
                          f"{stored.bits} bits")  # fmt: skip
    if (stored.k, stored.n) != (layer.awq2_k, part.n):
        raise PluginError("SHAPE_MISMATCH", where, f"{part.prefix!r} with k = {layer.awq2_k}, "
                          f"n = {part.n} (vLLM's shard on rank {source.rank} of {source.size})",
                          f"k = {stored.k}, n = {stored.n}")  # fmt: skip
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
        entry = source.entry(f"{part.prefix}.{name}")
        if (
            whole
            and source.weights.stores_marlin
            and TORCH_DTYPES[entry.dtype] == param.dtype
            and param.device.type == "cpu"
        ):
            if not (lend and source.lend(entry, param)):
                source.read_into(entry, param.data)  # one copy into the storage
        else:
            _copy_into(param.data[:, cols[name]], arrays[name])
            source.count_once(entry, counted)
    bias = getattr(layer, "bias", None)
    if bias is not None:
        if stored.bias is None:
            raise PluginError("BIAS_MISSING", where, f"{part.prefix}.bias", "no such tensor")
        target = (
            bias.data if part.parallel == "row" else bias.data[part.offset : part.offset + part.n]
        )
        _copy_into(target, stored.bias)
        source.count_once(source.entry(f"{part.prefix}.bias"), counted)
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


def built(model: torch.nn.Module, name: str) -> bool:
    """Whether this pipeline stage builds the module a tensor belongs to: no module on the
    way down its dotted name is a ``PPMissingLayer`` (names the model does not have, such as
    ``q_proj`` inside ``qkv_proj``, stop the walk and count as built)."""
    from vllm.model_executor.models.utils import PPMissingLayer

    module: Any = model
    for part in name.split(".")[:-1]:
        child = getattr(module, part, None)  # a ModuleList's items are attributes "0", "1"
        if child is None:
            return True
        if isinstance(child, PPMissingLayer):
            return False
        module = child
    return not isinstance(module, PPMissingLayer)


class AWQv2ModelLoader(BaseModelLoader):
    """``--load-format awq_v2``: the model folder's ``model.awq2`` or file set."""

    def download_model(self, model_config: Any) -> None:
        find_weights(model_config.model)

    def load_model(self, vllm_config: Any, model_config: Any, *args: Any, **kwargs: Any) -> Any:
        """Refuse a folder it cannot serve before the model is built, then vLLM's own."""
        weights = find_weights(model_config.model)
        check_tp(weights, vllm_config.parallel_config.tensor_parallel_size)
        model = super().load_model(vllm_config, model_config, *args, **kwargs)
        _trim_heap()
        return model

    def load_weights(self, model: torch.nn.Module, model_config: Any) -> None:
        from vllm.distributed import (
            get_tensor_model_parallel_rank,
            get_tensor_model_parallel_world_size,
        )

        rank, size = get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
        source = open_source(model_config.model, rank, size)
        started = time.perf_counter()
        try:
            source.verify()
            used: set[str] = set()
            for name, module in model.named_modules():
                method = getattr(module, "quant_method", None)
                if isinstance(method, AWQv2LinearMethod):
                    used.update(load_layer(module, source, name))
                elif isinstance(method, MOE_METHODS):
                    used.update(load_experts(module, source))
            rest = [i for i in source.entries() if i.name not in used and built(model, i.name)]
            if source.rank_set:
                _copy_cut(model, source, rest)
            else:
                model.load_weights(source.tensors(rest))  # type: ignore[operator]
            _report(source)
            if not source.weights.stores_marlin and rank == 0:
                _advise(source, time.perf_counter() - started)
        finally:
            source.close()


@cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None under another C library."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None


def _trim_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc only; elsewhere nothing)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _copy_cut(model: torch.nn.Module, source: Source, infos: list[TensorInfo]) -> None:
    """A rank set's other tensors, already this rank's cut: each into the parameter (or
    buffer) of the same name, which must have the same shape."""
    params = dict(model.named_parameters())
    for name, tensor in source.tensors(infos):
        param = params.get(name)
        if param is None:
            raise PluginError("RANK_TENSOR_UNPLACED", name, "a parameter of the same name in "
                              "vLLM's model (a rank set's dense tensors are copied as stored)",
                              "none")  # fmt: skip
        if tuple(param.shape) != tuple(tensor.shape):
            raise PluginError("SHAPE_MISMATCH", name, f"vLLM's shard {tuple(param.shape)} on "
                              f"rank {source.rank} of {source.size}",
                              tuple(tensor.shape))  # fmt: skip
        param.data.copy_(tensor)


def _advise(source: Source, seconds: float) -> None:
    """The fallback's one line: what was repacked, and the command that stores it repacked."""
    folder = source.weights.path
    layers = len(source.reader.layers())
    log.warning("awq2_vllm: %s is %s: its %d quantised layers were repacked to the Marlin layout "
                "while loading (%.2f s); `awq2-convert %s %s` stores them in that layout once, "
                "and that folder loads without repacking", folder,
                CHECKPOINTS[source.weights.quant_method], layers, seconds,
                shlex.quote(str(folder)), shlex.quote(f"{folder}-awq2"))  # fmt: skip


def _report(source: Source) -> None:
    report = source.report()
    log.info("awq2_vllm: TP rank %d/%d read %d tensors, %d bytes, from %s (%d bytes)",
             source.rank, source.size, report["tensors_read"], report["bytes_read"],
             ", ".join(report["files"]), report["file_bytes"])  # fmt: skip
    folder = os.environ.get(REPORT_ENV)
    if folder:
        out = Path(folder) / f"rank{source.rank}-pid{os.getpid()}.json"
        out.write_text(json.dumps(report))
