"""The conversion run: a plan's steps read, encoded and written to a single file, a split set
or a rank set, or to a servable model folder, each published whole and verified first
[CONV-1, CONV-2, WR-2]; and the summary the command prints (``--json`` its keys)."""

from __future__ import annotations

import json
import resource
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reference.conversion import steps
from reference.conversion.plan import Checkpoint, Plan, make_plan, plan_metadata
from reference.conversion.progress import Bars
from reference.conversion.source import in_folder_order, open_source
from reference.ground import hashing
from reference.ground.parallel import available_cores
from reference.sets import folder
from reference.sets.model import open_model
from reference.sets.setwriter import RankSetWriter, SetWriter
from reference.sources.awq2 import Awq2Checkpoint
from reference.write.publish import Watched
from reference.write.writer import Writer
from spec.constants import SET_MANIFEST


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
        split = None if tp_size is None else steps.split_plan(src, plan, tp_size, tp_rules)
        payload = plan.sizes()["payload_bytes"]
        bars = Bars(progress, payload, verify_total=None if split is not None else payload)
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
            _write(src, plan, split, sink, bars, jobs)
            plan.metadata = plan_metadata(src, digests())  # the same length [META-3]
            if split is not None:
                plan.metadata["tensor_parallel"] = split.plan.description()
            sink.set_metadata(plan.metadata)
            bars.converting_done()
    summary = plan.summary(dst_path)
    _members_summary(summary, sink, split)
    if isinstance(sink, (SetWriter, RankSetWriter)) and max_shard_size is not None:
        summary["max_shard_size"] = max_shard_size
    summary["verified"] = verify
    summary["jobs"] = jobs
    summary["seconds"] = round(time.perf_counter() - started, 3)
    summary["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return summary


def plan_only(src_path: str | Path, dst: str | Path | None, *, tp_size: int | None = None,
              tp_rules: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:  # fmt: skip
    """What :func:`convert` would write, refused as it would refuse it, with nothing written:
    the summary from the plan's shapes alone, plus ``plan`` (each step's layout and
    tensors).  The source is validated, not verified."""
    with open_source(src_path, check="validate") as src:
        plan = make_plan(src, hash_sources=False)
        if tp_size is not None:  # refused now, as the conversion would refuse it
            steps.split_plan(src, plan, tp_size, tp_rules)
    summary = plan.summary(dst or "(none)")
    summary["plan"] = [
        {"name": s.name, "layout": s.family, "tensors": [t[0] for t in s.tensors]}
        for s in plan.steps
    ]
    return summary


def _write(src: Checkpoint, plan: Plan, split: steps.Split | None,
           sink: Writer | SetWriter | RankSetWriter, bars: Bars, jobs: int) -> None:  # fmt: skip
    """Every step of ``plan``, prepared on ``jobs`` threads, added to ``sink`` in plan order."""
    if isinstance(sink, RankSetWriter):
        assert split is not None
        ranks = steps.prepared(src, plan.steps, jobs, split.prepare)
        for step, per_rank in zip(plan.steps, ranks, strict=True):
            sink.add_ranks(per_rank)
            bars.converted(step.nbytes)
        return
    prepared = steps.prepared(src, plan.steps, jobs, steps.prepare_step)
    for step, stored in zip(plan.steps, prepared, strict=True):
        if isinstance(sink, SetWriter):
            sink.add_step(stored)
        else:
            for tensor in stored:
                sink.add(tensor.name, tensor.array, **tensor.fields)
        bars.converted(step.nbytes)


def _members_summary(summary: dict[str, Any], sink: object, split: steps.Split | None) -> None:
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
                config = in_folder_order(src / folder.CONFIG_FILE, config)
        with open_model(tmp, rank=0) as written:  # every rank stores the same layers [SET-7]
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
        yield lambda: [hashing.sha256_of(f) for f in src.files]
        return
    stop = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="convert-sha256") as pool:
        future = pool.submit(lambda: [hashing.sha256_of(f, stop=stop) for f in src.files])
        try:
            yield future.result
        finally:
            stop.set()  # a no-op once the digests are in
