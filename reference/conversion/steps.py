"""Each step of a plan read from the source and encoded (a quantised layer in the Marlin or
the AWQ layouts [LAY-8], a plain tensor as it is), on ``jobs`` threads in a bounded window,
in plan order [CONV-3]; for a rank set, each step cut into every rank's share [SET-11]."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from reference.conversion.plan import Checkpoint, Plan, Step
from reference.format.layers import StoredTensor, encode_linear
from reference.ground import scratch
from reference.ground.errors import error
from reference.sets.tpsplit import Cut, SplitPlan, plan_for, split_stored
from reference.write.writer import encode_metadata

WINDOW_PER_JOB = 2  # steps in flight per repacking thread (see prepared) [CONV-3]

_Prepared = TypeVar("_Prepared")


def prepare_step(src: Checkpoint, step: Step) -> list[StoredTensor]:
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


def prepared(
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
                if len(window) >= WINDOW_PER_JOB * jobs:
                    yield window.popleft().result()
            while window:
                yield window.popleft().result()
        finally:
            for future in window:  # a failure, or the writer gave up: start nothing more
                future.cancel()


@dataclass
class Split:
    """A rank set's plan: the rule tables' answer and every step's cuts, checked from shapes
    before anything is written [SET-11]."""

    plan: SplitPlan
    cuts: dict[str, list[Cut]]

    def prepare(self, src: Checkpoint, step: Step) -> list[list[StoredTensor]]:
        """Read and encode one step, then cut it: what each rank's file stores of it."""
        return split_stored(prepare_step(src, step), self.cuts[step.name], layer=step.layer)


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
