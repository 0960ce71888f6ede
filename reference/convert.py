"""``awq2-convert SRC DST`` (also ``python -m reference.convert``): convert an AWQ v1 or
compressed-tensors checkpoint to AWQ-v2, or reshard an AWQ-v2 model.

SRC is an AutoAWQ checkpoint folder (``config.json`` or ``quant_config.json``, and
``model.safetensors`` or shards with ``model.safetensors.index.json``), an llm-compressor
``pack-quantized`` checkpoint folder (``config.json`` with ``quant_method:
"compressed-tensors"``) [CT-1], or a single ``.safetensors`` file with its ``config.json``
beside it.  A checkpoint with no quantised layer is refused (``NOT_QUANTISED``) [CONV-4].

SRC may also be an AWQ-v2 model: a file, a model folder (``model.awq2`` or a set), a split
set or a rank set (:mod:`reference.sources.awq2`; a rank set's shards joined back by
:class:`reference.sets.tpsplit.RankJoin`).  Any layout then becomes any other (a single file,
a split set, a rank set of any T), byte-identical to converting the original checkpoint: the
stored provenance is carried over, not replaced.  Such a SRC is validated in full (a set's
SET-8, its members' records of their ranks SET-15 included) and verified (every payload
checksum, every member's SHA-256) before anything is written: a damaged or inconsistent model
is refused, never re-encoded under fresh checksums.  DST never names, holds or joins a file of
SRC (:func:`source_guard`).
The conversion:

* streams layer by layer: peak memory is about one layer (its v1 tensors, the
  unpacked codes and the Marlin result) plus the index, not the model;
* stores each layer in the Marlin layouts, or in the AWQ v1 layouts when it breaks
  Marlin's shape rules [LAY-8] (such layers are listed in the summary), and keeps
  ``modules_to_not_convert`` (compressed-tensors: ``ignore``) and every unquantised tensor
  as it is;
* writes ``config.json``, the quantisation config and the provenance (source file
  names, sizes and SHA-256) into the metadata [META-3];
* validates and verifies the finished file before it is renamed into place, unless
  ``--no-verify``; an interrupted or refused conversion leaves nothing at DST [V1-5, CT-6];
* is deterministic: the same input gives the same bytes [WR-1], with any number of
  ``--jobs`` threads repacking layers (default: the cores this process may use) [CONV-3].

Where it goes: a DST ending in ``.awq2`` is the single file to write; any other DST is a
servable model folder: ``model.awq2`` (or a set), ``config.json`` with ``quant_method:
"awq_v2"``, and the source's other files (:mod:`reference.sets.folder`), published by one
rename [CONV-1, CONV-2].  An existing DST is refused unless it is an empty folder, or
``--overwrite`` is given: then it is replaced once the new output is complete and verified.

Exit status: 0 converted (or planned, with ``--dry-run``), 1 refused (the error code
and the reason are printed; nothing is written), 2 usage error, 3 I/O error, 130, 143 or
129 interrupted by SIGINT (Ctrl-C), SIGTERM or SIGHUP (one line; nothing written, the
partial removed; :mod:`reference.write.publish`).  With ``--json`` every outcome is one JSON
document on stdout: ``{"status": "converted" | "planned" | "refused" | "error" |
"interrupted", "exit_status": N, ...}``, the summary's keys or an ``error`` object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from reference import __version__
from reference.format.layers import PARTS, StoredTensor, encode_linear
from reference.format.reader import Reader
from reference.ground import scratch
from reference.ground.cli import JsonUsageParser, emit_json
from reference.ground.errors import FormatError, error
from reference.ground.files import open_regular
from reference.ground.parallel import available_cores
from reference.ground.text import escape
from reference.opener import open as open_any
from reference.sets import folder
from reference.sets.fileset import FileSet, is_set_path
from reference.sets.setmanifest import read_manifest
from reference.sets.setwriter import RankSetWriter, SetWriter, parse_size
from reference.sets.tpsplit import (
    KINDS,
    Cut,
    RankJoin,
    SplitPlan,
    plan_for,
    read_rules,
    recorded_plan,
    split_stored,
)
from reference.sources.awq2 import Awq2Checkpoint, RankModel, WholeModel
from reference.sources.checkpoint import read_json
from reference.sources.legacy import Checkpoint as LegacyCheckpoint
from reference.sources.legacy import open_checkpoint
from reference.write import publish
from reference.write.partial import NAME_MAX
from reference.write.publish import Watched
from reference.write.writer import Writer, encode_metadata
from spec.algorithms import align_up, bucket_bits_for
from spec.constants import ALIGNMENT, MAGIC, MAX_NAME_LENGTH, SET_MANIFEST, SLAB_OFFSET
from spec.geometry import index_geometry
from spec.marlin import marlin_shape_ok
from spec.registry import DTYPE_BY_NAME
from spec.schema import HEADER_SIZE, TRAILER_SIZE

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_IO = 0, 1, 2, 3
#: What the converter reads: a checkpoint, or an AWQ-v2 model to reshard.
Checkpoint = LegacyCheckpoint | Awq2Checkpoint
EXIT_INTERRUPTED = 130  # 128 + SIGINT (SIGTERM 143, SIGHUP 129: publish.exit_status)
_WINDOW_PER_JOB = 2  # steps in flight per repacking thread (see _prepared) [CONV-3]


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


def natural_key(name: str) -> list[Any]:
    """``layers.10`` after ``layers.9``: digits compare as numbers."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


class _Stopped(Exception):
    """The hashing was stopped: the conversion gave up and will not ask for the digests."""


def sha256_of(path: Path, *, stop: threading.Event | None = None) -> str:
    """SHA-256 of a file, read through one 1 MiB buffer (no memory sized by the file).
    ``stop``, once set, ends the reading at the next buffer (raising :class:`_Stopped`)."""
    digest, buffer = hashlib.sha256(), bytearray(1 << 20)
    view = memoryview(buffer)
    with open_regular(path) as f:
        while got := f.readinto(buffer):  # type: ignore[attr-defined]  # a BufferedReader
            if stop is not None and stop.is_set():
                raise _Stopped(str(path))
            digest.update(view[:got])
    return digest.hexdigest()


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
    digests = [sha256_of(f) for f in src.files] if hash_sources else None
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
            "converter": f"reference.convert {__version__}",
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


def default_jobs() -> int:
    """The cores this process may use (:func:`reference.ground.parallel.available_cores`)."""
    return available_cores()


def convert(
    src_path: str | Path,
    dst_path: str | Path,
    *,
    verify: bool = True,
    progress: bool = False,
    jobs: int | None = None,
    max_shard_size: int | None = None,
    tp_size: int | None = None,
    tp_rules: Sequence[tuple[str, str]] = (),
    watched: Watched | None = None,
) -> dict[str, Any]:
    """Convert and return the summary (the same dict ``--json`` prints).

    ``progress`` shows two bars on stderr: the bytes converted (with the rate), then the
    bytes verified.

    ``jobs`` threads (default :func:`default_jobs`) read and repack layers; the file is
    written in plan order, so the bytes do not depend on ``jobs`` [CONV-3].  With
    ``max_shard_size``, ``dst_path`` is an existing empty folder that receives a set split
    at that size (:mod:`reference.sets.setwriter`) [SET-10]; with ``tp_size``, a rank set cut by
    :mod:`reference.sets.tpsplit` (``tp_rules`` first, then the architecture's table) [SET-11];
    with both, each rank's part split at that size.  ``watched``: what a single file's
    destination was when the run started (:func:`reference.write.publish.watch`); one
    changed since is refused, never overwritten."""
    started = time.perf_counter()
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    with open_source(src_path, check="verify") as src:  # refused, never laundered [SET-8]
        plan = make_plan(src, hash_sources=False)  # checked now, with placeholder digests
        split = None if tp_size is None else split_plan(src, plan, tp_size, tp_rules)
        payload = plan.sizes()["payload_bytes"]
        bars = _Bars(progress, payload, verify_total=None if split is not None else payload)
        check = bars.verify_file if verify else None
        sink: Writer | SetWriter | RankSetWriter
        if split is not None:
            sink = RankSetWriter(Path(dst_path), tp_size=split.plan.tp_size,
                                 max_size=max_shard_size, metadata=plan.metadata, check=check,
                                 writeback=jobs > 1, jobs=jobs)  # fmt: skip
        elif max_shard_size is None:
            sink = Writer(dst_path, metadata=plan.metadata, check=check, writeback=jobs > 1,
                          watched=watched)  # fmt: skip
        else:
            sink = SetWriter(Path(dst_path), max_size=max_shard_size, metadata=plan.metadata,
                             check=check, writeback=jobs > 1, jobs=jobs)  # fmt: skip
        with bars, _source_digests(src, background=jobs > 1) as digests, sink:
            steps = plan.steps
            if isinstance(sink, RankSetWriter):
                assert split is not None
                ranks = _prepared(src, steps, jobs, split.prepare)
                for step, per_rank in zip(steps, ranks, strict=True):
                    sink.add_ranks(per_rank)
                    bars.converted(step.nbytes)
            else:
                prepared = _prepared(src, steps, jobs, _prepare_step)
                for step, stored in zip(steps, prepared, strict=True):
                    if isinstance(sink, SetWriter):
                        sink.add_step(stored)
                    else:
                        for tensor in stored:
                            sink.add(tensor.name, tensor.array, **tensor.fields)
                    bars.converted(step.nbytes)
            plan.metadata = plan_metadata(src, digests())  # the same length [META-3]
            if split is not None:
                plan.metadata["tensor_parallel"] = split.plan.description()
            sink.set_metadata(plan.metadata)
            bars.converting_done()
    summary = _summary(plan, dst_path)
    _members_summary(summary, sink, split)
    if isinstance(sink, (SetWriter, RankSetWriter)) and max_shard_size is not None:
        summary["max_shard_size"] = max_shard_size
    summary["verified"] = verify
    summary["jobs"] = jobs
    summary["seconds"] = round(time.perf_counter() - started, 3)
    summary["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return summary


def _members_summary(summary: dict[str, Any], sink: object, split: Split | None) -> None:
    """A set's figures in ``summary``: its members, and the bytes on disk (the plan's sizes are
    one file's: a set adds a header, an index and padding per member)."""
    if not isinstance(sink, (SetWriter, RankSetWriter)):
        return
    summary["members"] = [{"name": p.name, "size": p.stat().st_size} for p in sink.members]
    if len(summary["members"]) > 1 or split is not None:
        summary["file_size"] = sum(m["size"] for m in summary["members"])
        del summary["index_bytes"], summary["padding_bytes"]
    if split is not None:  # the payload too: replicated tensors are in every rank
        del summary["payload_bytes"]
        summary["tp_size"] = split.plan.tp_size
        summary["tp_rule_family"] = split.plan.family


def convert_folder(
    src_path: str | Path,
    dst_dir: str | Path,
    *,
    verify: bool = True,
    progress: bool = False,
    jobs: int | None = None,
    max_shard_size: int | None = None,
    tp_size: int | None = None,
    tp_rules: Sequence[tuple[str, str]] = (),
    overwrite: bool = False,
    watched: Watched | None = None,
) -> dict[str, Any]:
    """Convert a checkpoint folder to a servable model folder (:mod:`reference.sets.folder`):
    ``model.awq2`` (or, with ``max_shard_size``, a set of members no larger than that and
    its manifest [SET-10]; with ``tp_size``, a rank set [SET-11]), ``config.json`` naming
    ``awq_v2``, and the source's other files, all published at once [CONV-1, CONV-2, SET-9].
    Returns :func:`convert`'s summary plus ``folder``, ``copied`` and ``not_copied``.
    ``overwrite`` lets a non-empty ``dst_dir`` be replaced, once the new folder is complete
    and verified [CONV-2]."""
    src, dst = Path(src_path), Path(dst_dir)
    files = folder.plan_folder(src)
    with folder.publishing(dst, replace=overwrite, watched=watched) as tmp:
        in_folder = max_shard_size is not None or tp_size is not None
        target = tmp if in_folder else tmp / folder.MODEL_FILE
        summary = convert(src, target, verify=verify, progress=progress, jobs=jobs,
                          max_shard_size=max_shard_size, tp_size=tp_size,
                          tp_rules=tp_rules)  # fmt: skip
        with open_source(src, check="none") as checkpoint:  # verified by convert() above
            family, config = checkpoint.family, checkpoint.config or {}
            if isinstance(checkpoint, Awq2Checkpoint):  # an AWQ-v2 folder's manifest is its own
                files.copies = [p for p in files.copies if p.name != SET_MANIFEST]
                config = _in_folder_order(src / folder.CONFIG_FILE, config)
        with open_any(tmp, rank=0) as written:  # every rank stores the same layers [SET-7]
            layers = {e.name[: -len(".qweight")]: (e.bits, e.group_size)
                      for e in written.entries() if e.layout.endswith("_QWEIGHT")}  # fmt: skip
        quantization = folder.servable_quantization_config(layers, family)
        text = json.dumps(folder.servable_config(config, quantization), indent=2,
                          ensure_ascii=False)  # fmt: skip
        folder.write_text(tmp / folder.CONFIG_FILE, text + "\n")
        for path in files.copies:
            folder.copy_file(path, tmp / path.name)
    is_set = len(summary.get("members", ())) > 1 or "tp_size" in summary
    summary["destination"] = str(dst / (SET_MANIFEST if is_set else folder.MODEL_FILE))
    summary["folder"] = str(dst)
    summary["copied"] = [folder.CONFIG_FILE, *(p.name for p in files.copies)]
    summary["not_copied"] = [{"name": n, "reason": r} for n, r in files.skipped]
    summary["quantization_config"] = quantization
    return summary


@contextmanager
def _source_digests(src: Checkpoint, *, background: bool) -> Iterator[Callable[[], list[str]]]:
    """The SHA-256 of each source file for the provenance [META-3], as a function that returns
    them.  With ``background`` they are computed on a thread of their own from the start,
    overlapping the repacking (hashlib releases the GIL); else when the function is called,
    on the caller's thread.  Leaving the block early stops the hashing at its next buffer.
    Digests the source already knows (a verified set's manifest) are taken as they are."""
    known = getattr(src, "digests", None)
    if known is not None:
        yield lambda: list(known)
        return
    if not background:
        yield lambda: [sha256_of(f) for f in src.files]
        return
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="convert-sha256") as pool:
        future = pool.submit(lambda: [sha256_of(f, stop=stop) for f in src.files])
        try:
            yield future.result
        finally:
            stop.set()  # a no-op once the digests are in


_Prepared = TypeVar("_Prepared")


@dataclass
class Split:
    """A rank set's plan: the rule tables' answer and every step's cuts, checked from shapes
    before anything is written [SET-11]."""

    plan: SplitPlan
    cuts: dict[str, list[Cut]]

    def prepare(self, src: Checkpoint, step: Step) -> list[list[StoredTensor]]:
        """Read and encode one step, then cut it: what each rank's file stores of it."""
        return split_stored(_prepare_step(src, step), self.cuts[step.name], layer=step.layer)


def split_plan(src: Checkpoint, plan: Plan, tp_size: int,
               user_rules: Sequence[tuple[str, str]] = ()) -> Split:  # fmt: skip
    """How every step of ``plan`` splits over ``tp_size`` ranks; refused (``TP_*``) with the
    layer named when a rule is missing or a shard cannot be stored [SET-11, SET-12]."""
    split = plan_for(src.config or {}, tp_size, user_rules=user_rules)
    cuts = {}
    for step in plan.steps:
        if step.layer:
            qi = src.entry(f"{step.name}.qweight")
            cuts[step.name] = split.check_layer(step.name, family=step.family, k=qi.k, n=qi.n,
                                                bits=qi.bits, group_size=qi.group_size)  # fmt: skip
        else:
            cuts[step.name] = split.check_dense(step.name, src.entry(step.name).shape)
    metadata = {**plan.metadata, "tensor_parallel": split.description()}
    try:  # user rules reach the metadata: what a reader would refuse is refused here
        encode_metadata(metadata)
    except ValueError as exc:
        message = "the tensor-parallel rules cannot be AWQ-v2 metadata"
        raise error("TP_BAD_CONFIG", message, expected="metadata a reader accepts",
                    found=str(exc)[:200]) from exc  # fmt: skip
    plan.metadata = metadata
    return Split(split, cuts)


def _prepared(
    src: Checkpoint,
    steps: Iterable[Step],
    jobs: int,
    prepare: Callable[[Checkpoint, Step], _Prepared],
) -> Iterator[_Prepared]:
    """Each step, ``prepare``d (read and encoded; for a rank set, cut too), in plan order.
    With ``jobs > 1`` threads prepare them (NumPy releases the GIL) in a window of
    ``2 * jobs`` steps: while the caller writes one step, every thread still has a step to
    work on, and a step slower than the others (the embedding) does not idle them.  Memory
    is about ``jobs`` layers being repacked plus the finished ones waiting (their Marlin
    tensors, smaller than a repack's working set), whatever the model's size [CONV-3]."""
    if jobs == 1:
        with scratch.reusing():
            yield from (prepare(src, step) for step in steps)
        return
    # Each thread reuses its temporaries from one layer to the next (reference.ground.scratch).
    with ThreadPoolExecutor(jobs, thread_name_prefix="convert", initializer=scratch.keep) as pool:
        window: deque[Future[_Prepared]] = deque()
        try:
            for step in steps:
                window.append(pool.submit(prepare, src, step))
                if len(window) >= _WINDOW_PER_JOB * jobs:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            for future in window:  # a failure, or the writer gave up: start nothing more
                future.cancel()


def _prepare_step(src: Checkpoint, step: Step) -> list[StoredTensor]:
    """Read one step from the checkpoint and encode it: the tensors the writer adds."""
    if not step.layer:
        info = src.entry(step.name)
        return [StoredTensor(step.name, src.tensor(step.name), {"dtype": info.dtype})]
    qi = src.entry(f"{step.name}.qweight")
    scales_dtype = src.entry(f"{step.name}.scales").dtype
    has_bias = f"{step.name}.bias" in src
    bias = src.tensor(f"{step.name}.bias") if has_bias else None
    bias_dtype = src.entry(f"{step.name}.bias").dtype if has_bias else None
    _family, stored = encode_linear(
        step.name,
        qweight=src.tensor(f"{step.name}.qweight"),
        qzeros=src.tensor(f"{step.name}.qzeros"),
        scales=src.tensor(f"{step.name}.scales"),
        scale_dtype=scales_dtype,
        bias=bias,
        bias_dtype=bias_dtype,
        bits=qi.bits,
        group_size=qi.group_size,
    )
    return stored


#: How much of an AWQ-v2 source :func:`open_source` checks before it is read: nothing more
#: than the opening checks, full validation (SET-8 with SET-15, RD-2), or full validation
#: and every payload checksum and, for a set, every member's SHA-256 (``verify()``).
SourceCheck = Literal["none", "validate", "verify"]


def open_source(path: str | os.PathLike[str], *, check: SourceCheck = "validate") -> Checkpoint:
    """What SRC is read through: an AWQ-v2 file, model folder or set as a checkpoint
    (:class:`~reference.sources.awq2.Awq2Checkpoint`: a rank set's shards joined by the cuts
    its members record, :class:`~reference.sets.tpsplit.RankJoin`), or a checkpoint
    (:func:`~reference.sources.legacy.open_checkpoint`).

    An AWQ-v2 source is ``check``ed first, before any tensor is read: a set whose manifest
    contradicts its members (SET-15: a member's record of its rank), or a payload that is
    not its checksum, is refused with its code, never re-encoded under fresh checksums
    [SET-8, ENT-10].  ``"verify"`` reads the source once more; a set's SHA-256, then known
    right, serves the provenance too (no second hashing)."""
    p = Path(path)
    if not _is_awq2(p):
        return open_checkpoint(p)
    opened = open_any(p)
    try:
        _check_source(opened, check)
        if not isinstance(opened, FileSet):
            assert isinstance(opened, Reader)
            return Awq2Checkpoint(p, WholeModel(opened), kind="file", files=[opened.path])
        members = opened.manifest.members
        files = [opened.path / m.name for m in members]
        digests = [m.sha256 for m in members] if check == "verify" else None
        if opened.kind != "rank":
            return Awq2Checkpoint(p, WholeModel(opened), kind="split set", files=files,
                                  digests=digests)  # fmt: skip
        metadata = opened.metadata
        config = metadata.get("config")
        join = RankJoin(_recorded_plan(opened, metadata),
                        config if isinstance(config, dict) else None)  # fmt: skip
        return Awq2Checkpoint(p, RankModel(opened, join), kind="rank set", files=files,
                              digests=digests)  # fmt: skip
    except BaseException:
        opened.close()
        raise


def _check_source(opened: Reader | FileSet | object, check: SourceCheck) -> None:
    """Full validation (``"validate"``) or verification (``"verify"``) of an opened AWQ-v2
    source; an error in a single file names it, as a set's errors name their member."""
    if check == "none":
        return
    assert isinstance(opened, (Reader, FileSet))
    try:
        if check == "verify":
            opened.verify()
        else:
            opened.validate()
    except FormatError as exc:
        if exc.path is None and isinstance(opened, Reader):
            exc.path = str(opened.path)
            exc.message = f"{opened.path.name}: {exc.message}"
        raise


def _recorded_plan(opened: FileSet, metadata: dict[str, Any]) -> SplitPlan:
    """The split a rank set's members record, for the degree its manifest lists
    (``TP_BAD_CONFIG`` when they differ: the ranks of another conversion)."""
    plan = recorded_plan(metadata.get("tensor_parallel"))
    if plan.tp_size != opened.tp_size:
        raise error("TP_BAD_CONFIG", f"the members record a split over {plan.tp_size} ranks; "
                    f"{SET_MANIFEST} lists {opened.tp_size}", expected=opened.tp_size,
                    found=plan.tp_size, path=str(opened.manifest_path))  # fmt: skip
    return plan


def _in_folder_order(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration an AWQ-v2 model folder's ``config.json`` shows, when it is the one
    its metadata holds but for ``quantization_config``: in that file's order, which the
    metadata (canonical JSON, sorted keys [WR-1]) does not keep, so that the folder written
    is the one a conversion of the checkpoint writes; else ``config`` itself."""
    try:
        shown = read_json(path)
    except FormatError:
        return config
    key = "quantization_config"
    same = {k: v for k, v in shown.items() if k != key} == {
        k: v for k, v in config.items() if k != key
    }
    return shown if same else config


def _has_layers(path: Path) -> bool:
    """An AWQ-v2 file holding a quantised layer (one that cannot be opened: True, so that
    the conversion says why)."""
    try:
        with Reader(path) as reader:
            return bool(reader.layers())
    except (FormatError, OSError):
        return True


def _is_awq2(path: Path) -> bool:
    """A set, a model folder holding ``model.awq2``, or a file that starts with the magic."""
    if is_set_path(path) or (path.is_dir() and os.path.lexists(path / folder.MODEL_FILE)):
        return True
    if not path.is_file():
        return False
    with open_regular(path) as f:
        return bool(f.read(len(MAGIC)) == MAGIC)


def _verify_file(path: Path, progress: Callable[[int], object] | None = None) -> None:
    with Reader(path, validate=True) as reader:
        reader.verify(progress)


class _Bars:
    """The progress a terminal shows on stderr: payload bytes converted, with the rate, then
    payload bytes verified (every member of a set, as each is checked before publication).
    Disabled, every method does nothing but the verification itself."""

    def __init__(self, enabled: bool, total: int, *, verify_total: int | None) -> None:
        self._enabled, self._verify_total = enabled, verify_total
        self._lock = threading.Lock()  # a set's members may be verified on several threads
        self._converting: Any = None
        self._verifying: Any = None
        if enabled:
            self._converting = self._bar("converting", total)

    @staticmethod
    def _bar(desc: str, total: int | None) -> Any:
        from tqdm import tqdm

        width = shutil.get_terminal_size((100, 24)).columns or 100  # 0 on a sizeless pty
        return tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr,
                    ncols=width, leave=True)  # fmt: skip

    def converted(self, nbytes: int) -> None:
        if self._converting is not None:
            self._converting.update(nbytes)

    def converting_done(self) -> None:
        if self._converting is not None:
            self._converting.close()
            self._converting = None

    def verify_file(self, path: Path) -> None:
        """The writer's check [WR-2]: full validation and every checksum, shown as it goes."""
        if not self._enabled:
            _verify_file(path)
            return
        with self._lock:
            self.converting_done()
            if self._verifying is None:
                self._verifying = self._bar("verifying", self._verify_total)
        _verify_file(path, self._verified)

    def _verified(self, nbytes: int) -> None:
        with self._lock:
            self._verifying.update(nbytes)

    def __enter__(self) -> _Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        self.converting_done()
        if self._verifying is not None:
            self._verifying.close()
            self._verifying = None


def _summary(plan: Plan, dst: str | Path) -> dict[str, Any]:
    layers = [s for s in plan.steps if s.layer]
    return {
        "destination": str(dst),
        "tensors": plan.tensor_count,
        "layers": len(layers),
        "marlin_layers": sum(s.family == "MARLIN" for s in layers),
        "awq_layout_layers": [s.name for s in layers if s.family == "AWQ"],
        **plan.sizes(),
    }


def _print_summary(summary: dict[str, Any], *, dry_run: bool) -> None:
    verb = "would write" if dry_run else "wrote"
    members = summary.get("members", ())
    files = f" in {len(members)} files" if len(members) > 1 else ""
    each = " in each rank" if "tp_size" in summary else ""
    print(f"{verb} {escape(str(summary['destination']))}: {summary['file_size']:,} bytes{files}, "
          f"{summary['tensors']} tensors{each}, {summary['layers']} quantised layers "
          f"({summary['marlin_layers']} Marlin)")  # fmt: skip
    if "padding_bytes" in summary:
        pad = summary["padding_bytes"] / max(summary["file_size"], 1)
        print(f"  payload {summary['payload_bytes']:,} B, index {summary['index_bytes']:,} B, "
              f"padding {summary['padding_bytes']:,} B ({pad:.2%})")  # fmt: skip
    elif "payload_bytes" in summary:
        rest = summary["file_size"] - summary["payload_bytes"]
        print(f"  payload {summary['payload_bytes']:,} B; each file's header, index and "
              f"alignment padding {rest:,} B in all")  # fmt: skip
    odd = summary["awq_layout_layers"]
    if odd:
        print(f"  {len(odd)} layers break Marlin's shape rules and keep the AWQ v1 layout (LAY-8):")
        for name in odd:
            print(f"    {escape(name)}")
    if "tp_size" in summary:
        family = summary["tp_rule_family"] or "given by --tp-rules"
        limit = summary.get("max_shard_size")
        each = "" if limit is None else f", each rank in files of at most {limit:,} bytes"
        print(f"  a rank set for tensor parallelism {summary['tp_size']} (rules: {family}){each}, "
              f"listed by {SET_MANIFEST}:")  # fmt: skip
        for m in members:
            print(f"    {escape(m['name'])}  {m['size']:,} bytes")
    elif len(members) > 1:
        print(f"  a set of {len(members)} files of at most {summary['max_shard_size']:,} bytes "
              f"(apart from a single larger layer), listed by {SET_MANIFEST}:")  # fmt: skip
        for m in members:
            print(f"    {escape(m['name'])}  {m['size']:,} bytes")
    if "folder" in summary:
        copied = ", ".join(escape(name) for name in summary["copied"])
        weights = "the set" if len(members) > 1 or "tp_size" in summary else "model.awq2"
        print(f"  folder {escape(summary['folder'])}: {copied} copied beside {weights}")
    if not dry_run:
        print(f"  verified: {'yes' if summary['verified'] else 'no (--no-verify)'}; "
              f"{summary['seconds']} s; peak RSS {summary['peak_rss_mib']} MiB, "
              "mapped file pages included")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = JsonUsageParser(
        prog="awq2-convert",
        description="Convert an AWQ v1 (AutoAWQ GEMM) or compressed-tensors pack-quantized "
        "(llm-compressor W4A16) checkpoint to AWQ-v2. Layers are stored "
        "pre-swizzled in vLLM's Marlin layout; the conversion streams tensor by tensor, so its "
        "own memory is about the largest tensor or layer plus the index, not the model. "
        "The output is validated and every checksum "
        "verified before it is renamed into place; a refused or interrupted conversion leaves "
        "nothing at DST. (python -m reference.convert is the same command.)",
        epilog="exit status: 0 done, 1 refused (nothing written), 2 usage error, 3 I/O error, "
        "130/143/129 interrupted by SIGINT/SIGTERM/SIGHUP (nothing written)",
    )
    parser.add_argument(
        "src",
        type=Path,
        help="AWQ v1 or compressed-tensors checkpoint folder or .safetensors "
        "file; or an AWQ-v2 file, model folder, split set or rank set to reshard (the output "
        "is byte-identical to converting the original checkpoint)",
    )
    parser.add_argument("dst", nargs="?",
                        help="a name ending in .awq2: the single file to write; any other name: "
                        "the servable model folder to write (model.awq2 or a set, config.json "
                        "with quant_method awq_v2 and a copy of every other file of SRC except "
                        "the weights). An existing DST is refused unless it is an empty folder "
                        "or --overwrite is given")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing DST file or folder, only once the new "
                        "output is complete and verified (a failure leaves the old one as it "
                        "was)")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="threads that repack layers (default: the cores this process may "
                        "use); the output is byte-identical for every N")  # fmt: skip
    parser.add_argument("--max-shard-size", type=_size, default=None, metavar="SIZE",
                        help="with a folder DST: split the weights into files of at most SIZE "
                        "(5GB, 500MB, 2GiB or bytes; KB/MB/GB/TB are powers of 1000) listed by "
                        f"{SET_MANIFEST}; a single layer larger than SIZE gets a file of its "
                        "own; if everything fits in one file, it is model.awq2")  # fmt: skip
    parser.add_argument("--tp", type=int, default=None, metavar="T",
                        help="with a folder DST: write a rank set, one file per "
                        "tensor-parallel rank holding that rank's shard of every layer (column, "
                        "row, head and vocabulary splits as vLLM makes them, from the "
                        "architecture's rule table)")  # fmt: skip
    parser.add_argument("--tp-rules", type=Path, default=None, metavar="FILE",
                        help="with --tp: a JSON list of [pattern, kind] rules tried before the "
                        f"architecture's table (kind: {', '.join(KINDS)}; the pattern "
                        "matches a whole module name)")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the plan; write nothing")
    parser.add_argument("--no-verify", action="store_true", help="skip the final validation of the "
                        "output (an AWQ-v2 SRC is still validated and verified first)")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar, no summary")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON document on stdout whatever the outcome: the "
                        "summary, or the error (its code, message, expected and "
                        "found)")  # fmt: skip
    return parser


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def check_paths(
    src: Path, dst: Path | None, *, to_folder: bool = False, overwrite: bool = False
) -> tuple[int, str] | None:
    """What is wrong with SRC and DST before anything is read or written: ``(exit status,
    message)``, or None.  A missing or unreadable SRC, and a DST whose folder does not exist,
    are I/O errors; an existing DST without ``overwrite`` (but an empty folder for a model
    folder), a DST file that is a folder, would replace a file of the source, or has a name
    too long to write, and a DST folder that :func:`reference.sets.folder.check_folder_paths`
    refuses, are usage errors [CONV-2]."""
    if not src.exists():
        return EXIT_IO, f"cannot read {escape(str(src))}: no such file or folder"
    if not src.is_dir():
        try:
            with open_regular(src) as f:
                head = f.read(len(MAGIC))
        except OSError as exc:
            return EXIT_IO, f"cannot read {escape(str(src))}: {exc.strerror or exc}"
        if head == MAGIC and not _has_layers(src):  # nothing to reshard
            return EXIT_USAGE, (
                f"{escape(str(src))} is already an AWQ-v2 file, with no quantised layer to "
                "reshard (awq2-dump explains it)"
            )
    if dst is None:
        return None
    if not dst.parent.is_dir():  # said with the user's path, not a hidden partial name's
        why = "does not exist" if not dst.parent.exists() else "is not a folder"
        return EXIT_IO, (
            f"cannot write {escape(str(dst))}: its folder {escape(str(dst.parent))} {why} "
            "(create it first)"
        )
    if len(dst.name.encode("utf-8", "surrogateescape")) > NAME_MAX:
        return EXIT_USAGE, f"DST's file name is longer than {NAME_MAX} bytes"
    if to_folder:
        problem = folder.check_folder_paths(src, dst, overwrite=overwrite)
        problem = problem or source_guard(src, dst, to_folder=True)
        return None if problem is None else (EXIT_USAGE, escape(problem))
    if dst.is_dir():
        return EXIT_USAGE, (
            f"DST {escape(str(dst))} is a folder; a DST ending in .awq2 names the file to write"
        )
    problem = source_guard(src, dst, to_folder=False)
    if problem is not None:
        return EXIT_USAGE, escape(problem)
    if (dst.exists() or dst.is_symlink()) and not overwrite:
        return EXIT_USAGE, (
            f"DST {escape(str(dst))} exists; pass --overwrite to replace it (only once the new "
            "file is complete and verified)"
        )
    return None


def source_files(src: Path) -> tuple[list[Path], Path | None]:
    """Every file SRC consists of, and the folder of the set it is (None if it is not one):
    a folder's regular files (links followed); a set's manifest and every member it lists
    (whether or not they are in the folder: a member may be a link elsewhere) and every
    ``.awq2`` file of its folder [SET-8]; a file itself."""
    if src.is_dir():
        files = [p for p in src.iterdir() if p.is_file()]
        set_folder = src if os.path.lexists(src / SET_MANIFEST) else None
    elif is_set_path(src):
        files, set_folder = [src], src.parent
    else:
        return [src], None
    if set_folder is not None:
        manifest = set_folder / SET_MANIFEST if src.is_dir() else src
        try:
            listed = [set_folder / m.name for m in read_manifest(manifest).members]
        except (FormatError, OSError):  # refused later, when it is read; its folder still counts
            listed = []
        files += [*listed, *set_folder.glob("*.awq2")]
    return files, set_folder


def source_guard(src: Path, dst: Path, *, to_folder: bool) -> str | None:
    """The one check that DST never replaces, deletes or joins the source, whatever form
    names them (a folder, a manifest, a member, a link to one): a message naming DST, or None.

    Refused: a file DST that is any file of SRC (:func:`source_files`, links resolved); a
    file DST inside the folder of a set SRC (a new ``.awq2`` there joins the set,
    ``SET_EXTRA_FILE``, and a member's name replaces it); a folder DST that holds any file of
    SRC, links resolved (``--overwrite`` would delete it) [CONV-2]."""
    files, set_folder = source_files(src)
    real = {Path(os.path.realpath(f)) for f in files if os.path.exists(f)}
    shown = escape(str(dst))
    if to_folder:
        target = Path(os.path.realpath(dst))
        held = sorted(f for f in real if f == target or target in f.parents)
        if held:
            return (f"DST {shown} holds {escape(str(held[0]))}, a file of the source; replacing "
                    "DST would delete it")  # fmt: skip
        return None
    if os.path.exists(dst) and Path(os.path.realpath(dst)) in real:
        return f"DST {shown} is a file of the source; it would be lost"
    if set_folder is not None and os.path.realpath(dst.parent) == os.path.realpath(set_folder):
        return (f"DST {shown} is inside the folder of the source set {escape(str(set_folder))}: "
                "a new .awq2 file there joins the set (SET_EXTRA_FILE) and a member's name "
                "replaces it; write DST elsewhere")  # fmt: skip
    return None


def _usage(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str | None:
    """What the options ask for that cannot be done, or None."""
    if args.dst is None and not args.dry_run:
        return "DST is required unless --dry-run"
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs must be at least 1, got {args.jobs}"
    to_folder = args.dst is not None and folder.is_folder_destination(args.dst)
    if args.max_shard_size is not None and args.dst is not None and not to_folder:
        return "--max-shard-size writes a set, which is a folder: DST must not end in .awq2"
    if args.tp is not None and args.tp < 1:
        return f"--tp must be at least 1, got {args.tp}"
    if args.tp is not None and args.dst is not None and not to_folder:
        return "--tp writes a rank set, which is a folder: DST must not end in .awq2"
    if args.tp_rules is not None and args.tp is None:
        return "--tp-rules needs --tp"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status.  Every outcome is said once: a summary on
    stdout, or one error line (and its details) on stderr; with ``--json``, one JSON document
    on stdout either way."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    assert isinstance(parser, JsonUsageParser)
    parser.json_errors = "--json" in argv
    args = parser.parse_args(argv)
    problem = _usage(parser, args)
    if problem is not None:
        parser.error(problem)
    try:
        tp_rules = [] if args.tp_rules is None else read_rules(args.tp_rules)
    except (OSError, ValueError) as exc:
        parser.error(f"--tp-rules: {exc}")
    report = _Report(json_output=args.json)
    try:
        with publish.interruptible():  # SIGTERM and SIGHUP clean up as Ctrl-C does
            return _run(args, tp_rules, report)
    except (KeyboardInterrupt, publish.Interrupted) as exc:
        where = "" if args.dst is None else f"; nothing was written to {args.dst}"
        return report.error(publish.exit_status(exc),
                            f"interrupted by {publish.signal_name(exc)}{where}",
                            status="interrupted")  # fmt: skip


class _Report:
    """Says the outcome: text on stdout and stderr, or one JSON document on stdout."""

    def __init__(self, *, json_output: bool) -> None:
        self.json = json_output

    def note(self, text: str) -> None:
        """A remark on stderr that is not the outcome (left out of JSON output)."""
        if not self.json:
            print(escape(text), file=sys.stderr)

    def error(self, exit_status: int, message: str, *, status: str = "error") -> int:
        if self.json:
            emit_json({"status": status, "exit_status": exit_status, "error": {"message": message}})
        else:
            print(f"{'' if status == 'interrupted' else 'error: '}{message}", file=sys.stderr)
        return exit_status

    def refused(self, exc: FormatError) -> int:
        if self.json:
            detail = {"code": exc.code, "message": exc.message, "offset": exc.offset,
                      "expected": _jsonable(exc.expected), "found": _jsonable(exc.found),
                      "path": exc.path}  # fmt: skip
            emit_json({"status": "refused", "exit_status": EXIT_REFUSED, "error": detail})
            return EXIT_REFUSED
        print(f"refused: [{exc.code}] {escape(exc.message)}", file=sys.stderr)
        if exc.expected is not None or exc.found is not None:
            print(f"  expected {escape(str(exc.expected))}, found {escape(str(exc.found))}",
                  file=sys.stderr)  # fmt: skip
        if exc.path:
            print(f"  in {escape(exc.path)}", file=sys.stderr)
        return EXIT_REFUSED


#: Files one of which a tokenizer that transformers' AutoTokenizer loads needs: a fast
#: tokenizer, a SentencePiece model, or a BPE or WordPiece vocabulary.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt")


def _has_tokenizer(src: Path) -> bool:
    """Whether the source's folder (a file source's own folder) holds tokenizer files, which
    the converted folder then gets too [CONV-2]."""
    folder_of = src if src.is_dir() else src.parent
    return any((folder_of / name).is_file() for name in TOKENIZER_FILES) or any(
        folder_of.glob("*.tiktoken")
    )


def _jsonable(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


def _run(args: argparse.Namespace, tp_rules: list[tuple[str, str]], report: _Report) -> int:
    to_folder = args.dst is not None and folder.is_folder_destination(args.dst)
    args.dst = None if args.dst is None else Path(args.dst)
    if to_folder and os.path.islink(args.dst):  # a link to a folder elsewhere: publish there
        args.dst = Path(os.path.realpath(args.dst))
    refusal = check_paths(args.src, args.dst, to_folder=to_folder, overwrite=args.overwrite)
    if refusal is not None:
        status, message = refusal
        return report.error(status, message)
    watched = None if args.dst is None else publish.watch(args.dst)  # before SRC is read
    try:
        if args.dst is not None:
            publish.remove_stale(args.dst, report.note)
        if args.dry_run:
            with open_source(args.src, check="validate") as src:
                plan = make_plan(src, hash_sources=False)
                if args.tp is not None:  # refused now, as the conversion would refuse it
                    split_plan(src, plan, args.tp, tp_rules)
            summary = _summary(plan, args.dst or "(none)")
            summary["plan"] = [
                {"name": s.name, "layout": s.family, "tensors": [t[0] for t in s.tensors]}
                for s in plan.steps
            ]
        else:
            progress = not args.quiet and not args.json and sys.stderr.isatty()
            if to_folder:
                summary = convert_folder(args.src, args.dst, verify=not args.no_verify,
                                         jobs=args.jobs, progress=progress,
                                         max_shard_size=args.max_shard_size, tp_size=args.tp,
                                         tp_rules=tp_rules, overwrite=args.overwrite,
                                         watched=watched)  # fmt: skip
            else:
                summary = convert(args.src, args.dst, verify=not args.no_verify, jobs=args.jobs,
                                  progress=progress, watched=watched)  # fmt: skip
    except FormatError as exc:
        return report.refused(exc)
    except OSError as exc:
        return report.error(EXIT_IO, escape(str(exc)))
    for skipped in summary.get("not_copied", ()):  # said even with --quiet
        report.note(f"not copied: {skipped['name']} ({skipped['reason']})")
    if to_folder and not args.dry_run and not _has_tokenizer(Path(args.src)):  # even --quiet
        report.note(f"warning: {args.src} has no tokenizer files ({', '.join(TOKENIZER_FILES)}):"
                    f" {args.dst} serves only prompts given as token ids (vLLM's "
                    "skip_tokenizer_init=True), or with a tokenizer named apart (vLLM's "
                    "--tokenizer, the original model's name or folder)")  # fmt: skip
    if args.json:
        emit_json({"status": "planned" if args.dry_run else "converted", "exit_status": EXIT_OK,
               **summary})  # fmt: skip
    elif not args.quiet:
        _print_summary(summary, dry_run=args.dry_run)
        if args.dry_run:
            for step in summary["plan"]:
                print(f"    {step['layout']:<6} {escape(step['name'])}")
    return EXIT_OK


def _entry_point() -> int:
    """Console-script entry (``awq2-convert``): like main(), but quiet when stdout is closed
    early (``| head``)."""
    try:
        return main()
    except BrokenPipeError:
        sys.stdout = None  # type: ignore[assignment]  # no flush error at exit
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(_entry_point())
