"""Benchmark opening a file and looking up one tensor: AWQ-v2 against safetensors, 1k to 1M tensors.

Usage: ``python bench/bench_open.py [--quick] [--counts 1000,1000000] [--repeat N] [--plot PNG]``.

Part 1 writes, for each tensor count, an AWQ-v2 file (streaming ``reference.Writer``) and a
safetensors file (``safetensors.numpy.save_file``) holding the same empty tensors, named like
the layers of a large MoE model, and times ``reference.open`` + ``tensor(name)`` beside
``safe_open`` + ``get_tensor(name)``, with a different random name each repeat (median and best
of the repeats).  The writers are timed too.  safetensors caps its JSON header; the counts it
cannot store or open are reported, and the largest count it accepts is found by trying.
Targets: AWQ-v2 time at 1M / at 1k <= 2.0 (O(1) open and lookup), and safetensors / AWQ-v2
>= 100 at the largest count both formats handle.

Part 2 computes, from the layer shapes alone (no data written), the bytes a Llama-3-8B-shaped
and a Mixtral-8x7B-shaped AWQ checkpoint take in AWQ-v2 (every payload on a 64 KiB boundary)
and in safetensors (8-byte alignment): payload, padding, index or header, and padding as a
share of the file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

import numpy as np
import safetensors
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import reference
from spec.algorithms import align_up, bucket_bits_for
from spec.constants import ALIGNMENT, SLAB_OFFSET
from spec.geometry import index_geometry
from spec.schema import TRAILER_SIZE

DEFAULT_COUNTS = (1_000, 10_000, 100_000, 1_000_000)
QUICK_COUNTS = (1_000, 10_000)
SCALING_TARGET = 2.0  # AWQ-v2 open+lookup at the largest count / at the smallest
SPEEDUP_TARGET = 100.0  # safetensors / AWQ-v2 at the largest count both handle
ST_HEADER_HINT = 100_000_000  # safetensors' MAX_HEADER_SIZE: only where the cap search starts
ST_DTYPE = {"float16": "F16", "int32": "I32"}


# --------------------------------------------------------------------------- tensor lists


@dataclass(frozen=True)
class Spec:
    """One tensor: name, NumPy dtype name and shape (no data)."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def synthetic_names(experts: int = 128) -> Iterator[Spec]:
    """Endless empty tensors named like an MoE checkpoint, layer after layer."""
    yield Spec("model.embed_tokens.weight", "float16", (0, 4))
    quant = (("qweight", "int32"), ("scales", "float16"), ("qzeros", "int32"))
    layer = 0
    while True:
        p = f"model.layers.{layer}"
        yield Spec(f"{p}.input_layernorm.weight", "float16", (0,))
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            for suffix, dtype in quant:
                yield Spec(f"{p}.self_attn.{proj}.{suffix}", dtype, (0, 4))
        yield Spec(f"{p}.post_attention_layernorm.weight", "float16", (0,))
        yield Spec(f"{p}.mlp.gate.weight", "float16", (0, 4))
        for e in range(experts):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                for suffix, dtype in quant:
                    yield Spec(f"{p}.mlp.experts.{e}.{proj}.{suffix}", dtype, (0, 4))
        layer += 1


def synthetic_specs(count: int) -> list[Spec]:
    return list(islice(synthetic_names(), count))


def quantized_linear(prefix: str, k: int, n: int, bits: int, group: int) -> list[Spec]:
    """AWQ linear layer ``k`` in x ``n`` out: Marlin qweight, fp16 scales, packed qzeros."""
    pack = 32 // bits
    assert k % 16 == 0 and k % group == 0 and (16 * n) % pack == 0 and n % pack == 0
    return [
        Spec(f"{prefix}.qweight", "int32", (k // 16, 16 * n // pack)),
        Spec(f"{prefix}.scales", "float16", (k // group, n)),
        Spec(f"{prefix}.qzeros", "int32", (k // group, n // pack)),
    ]


@dataclass(frozen=True)
class ModelShape:
    """The dimensions a decoder-only checkpoint's tensor shapes follow from."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    experts: int = 0  # 0: a dense MLP
    bits: int = 4
    group: int = 128


def attention(m: ModelShape, p: str) -> list[Spec]:
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    dims = {"q_proj": (m.hidden, q), "k_proj": (m.hidden, kv), "v_proj": (m.hidden, kv)}
    dims["o_proj"] = (q, m.hidden)
    return [
        spec
        for proj, (k, n) in dims.items()
        for spec in quantized_linear(f"{p}.self_attn.{proj}", k, n, m.bits, m.group)
    ]


def llama_mlp(m: ModelShape, p: str) -> list[Spec]:
    h, i = m.hidden, m.intermediate
    dims = {"gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    return [
        spec
        for proj, (k, n) in dims.items()
        for spec in quantized_linear(f"{p}.mlp.{proj}", k, n, m.bits, m.group)
    ]


def mixtral_moe(m: ModelShape, p: str) -> list[Spec]:
    h, i = m.hidden, m.intermediate
    out = [Spec(f"{p}.block_sparse_moe.gate.weight", "float16", (m.experts, h))]  # router, fp16
    for e in range(m.experts):
        for proj, (k, n) in {"w1": (h, i), "w2": (i, h), "w3": (h, i)}.items():
            out += quantized_linear(
                f"{p}.block_sparse_moe.experts.{e}.{proj}", k, n, m.bits, m.group
            )
    return out


def decoder(m: ModelShape, mlp: Callable[[ModelShape, str], list[Spec]]) -> list[Spec]:
    """Embedding, layers (norms, attention, MLP), final norm and an fp16 lm_head."""
    specs = [Spec("model.embed_tokens.weight", "float16", (m.vocab, m.hidden))]
    for layer in range(m.layers):
        p = f"model.layers.{layer}"
        specs.append(Spec(f"{p}.input_layernorm.weight", "float16", (m.hidden,)))
        specs += attention(m, p)
        specs.append(Spec(f"{p}.post_attention_layernorm.weight", "float16", (m.hidden,)))
        specs += mlp(m, p)
    specs.append(Spec("model.norm.weight", "float16", (m.hidden,)))
    specs.append(Spec("lm_head.weight", "float16", (m.vocab, m.hidden)))
    return specs


def llama3_8b() -> tuple[ModelShape, list[Spec]]:
    m = ModelShape("Llama-3-8B AWQ", 4096, 14336, 32, 32, 8, 128, 128256)
    return m, decoder(m, llama_mlp)


def mixtral_8x7b() -> tuple[ModelShape, list[Spec]]:
    m = ModelShape("Mixtral-8x7B AWQ", 4096, 14336, 32, 32, 8, 128, 32000, experts=8)
    return m, decoder(m, mixtral_moe)


# --------------------------------------------------------------------------- file layouts


@dataclass(frozen=True)
class Layout:
    """Where a file's bytes go."""

    payload: int
    padding: int  # alignment filler between and after payloads (safetensors: header spaces)
    overhead: int  # header, index or JSON, trailer, and the zero gap before the AWQ-v2 slab

    @property
    def file_size(self) -> int:
        return self.payload + self.padding + self.overhead


def awq2_index_bytes(specs: Sequence[Spec]) -> int:
    """Bucket table, entries, dims and name pool of the AWQ-v2 index (no metadata)."""
    return index_geometry(
        index_offset=0,
        bucket_bits=bucket_bits_for(len(specs)),
        tensor_count=len(specs),
        dims_count=sum(len(s.shape) for s in specs),
        names_length=sum(len(s.name.encode()) for s in specs),
        metadata_length=0,
    ).length


def awq2_layout(specs: Sequence[Spec]) -> Layout:
    payload = sum(s.nbytes for s in specs)
    slab = sum(align_up(s.nbytes, ALIGNMENT) for s in specs)
    overhead = SLAB_OFFSET + awq2_index_bytes(specs) + TRAILER_SIZE
    return Layout(payload, slab - payload, overhead)


def st_entry_bytes(spec: Spec, start: int = 0) -> int:
    """Length of ``"name":{...},`` in a safetensors JSON header, comma included."""
    body = {
        "dtype": ST_DTYPE[spec.dtype],
        "shape": list(spec.shape),
        "data_offsets": [start, start + spec.nbytes],
    }
    return len(json.dumps({spec.name: body}, separators=(",", ":")).encode()) - 1


def st_header_bytes(json_bytes: int) -> int:
    """The header length safetensors stores (and caps): ``{}``, padded with spaces to 8."""
    return align_up(json_bytes + 1, 8)  # entries' commas minus the last, plus the braces


def st_layout(specs: Sequence[Spec]) -> Layout:
    """safetensors: u64 length, JSON header padded to 8, payloads back to back."""
    order = sorted(specs, key=lambda s: (-np.dtype(s.dtype).itemsize, s.name))
    start, json_bytes = 0, 0
    for s in order:
        json_bytes += st_entry_bytes(s, start)
        start += s.nbytes
    header = st_header_bytes(json_bytes)
    return Layout(start, header - (json_bytes + 1), 8 + json_bytes + 1)


# --------------------------------------------------------------------------- writing files


def empty_arrays(specs: Sequence[Spec]) -> dict[tuple[str, tuple[int, ...]], np.ndarray]:
    """One shared empty array per (dtype, shape): the files hold no data."""
    return {(s.dtype, s.shape): np.zeros(s.shape, s.dtype) for s in specs}


def write_awq2(path: Path, specs: Sequence[Spec]) -> float:
    """Seconds to stream the tensors through ``reference.Writer``, close included."""
    arrays = empty_arrays(specs)
    t0 = time.perf_counter()
    with reference.Writer(path) as writer:
        for s in specs:
            writer.add(s.name, arrays[s.dtype, s.shape])
    return time.perf_counter() - t0


def write_safetensors(path: Path, specs: Sequence[Spec]) -> tuple[float, str | None]:
    """Seconds for ``save_file``, and its error message when safetensors refuses."""
    arrays = empty_arrays(specs)
    tensors = {s.name: arrays[s.dtype, s.shape] for s in specs}
    t0 = time.perf_counter()
    try:
        save_file(tensors, path)
    except SafetensorError as exc:
        return time.perf_counter() - t0, f"save_file: {exc}"
    return time.perf_counter() - t0, None


def stored_st_header(path: Path) -> int:
    with path.open("rb") as f:
        return int.from_bytes(f.read(8), "little")


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    median: float
    best: float
    repeats: int


def awq2_lookup(path: Path) -> Callable[[str], tuple[int, ...]]:
    def run(name: str) -> tuple[int, ...]:
        with reference.open(path) as f:
            return f.tensor(name).shape

    return run


def st_lookup(path: Path) -> Callable[[str], tuple[int, ...]]:
    def run(name: str) -> tuple[int, ...]:
        with safe_open(path, framework="numpy") as f:
            return f.get_tensor(name).shape

    return run


def time_lookups(
    run: Callable[[str], tuple[int, ...]],
    picks: Sequence[Spec],
    budget_s: float,
    min_repeats: int = 3,
) -> Timing:
    """Open + one lookup per pick (one untimed warm-up first); stops early past ``budget_s``."""
    run(picks[-1].name)
    times: list[float] = []
    spent = 0.0
    for spec in picks:
        t0 = time.perf_counter()
        shape = run(spec.name)
        dt = time.perf_counter() - t0
        if shape != spec.shape:
            raise AssertionError(f"{spec.name}: read shape {shape}, wrote {spec.shape}")
        times.append(dt)
        spent += dt
        if spent > budget_s and len(times) >= min_repeats:
            break
    return Timing(statistics.median(times), min(times), len(times))


# --------------------------------------------------------------------------- one count


@dataclass(frozen=True)
class Row:
    count: int
    awq2: Timing
    st: Timing | None
    st_error: str | None
    note: str = ""


@dataclass(frozen=True)
class Settings:
    workdir: Path
    repeat: int
    budget_s: float
    seed: int


def random_picks(specs: Sequence[Spec], repeat: int, seed: int) -> list[Spec]:
    """A different random tensor each repeat (plus one spare for the warm-up)."""
    rng = np.random.default_rng(seed)
    return [specs[int(i)] for i in rng.integers(0, len(specs), size=repeat + 1)]


def bench_awq2(specs: Sequence[Spec], picks: Sequence[Spec], cfg: Settings) -> Timing:
    path = cfg.workdir / f"n{len(specs)}.awq2"
    write_s = write_awq2(path, specs)
    size = path.stat().st_size
    expected = awq2_layout(specs).file_size
    check = "= layout formula" if size == expected else f"!= layout formula {expected:,}"
    print(
        f"  awq2        n={len(specs):>9,}: reference.Writer {write_s:7.2f} s "
        f"({len(specs) / write_s:,.0f} tensors/s), {size:,} bytes {check}"
    )
    try:
        return time_lookups(awq2_lookup(path), picks[1:], cfg.budget_s)
    finally:
        path.unlink()


def bench_st(
    specs: Sequence[Spec], picks: Sequence[Spec], cfg: Settings
) -> tuple[Timing | None, str | None]:
    path = cfg.workdir / f"n{len(specs)}.safetensors"
    write_s, err = write_safetensors(path, specs)
    try:
        if err is None:
            size, expected = path.stat().st_size, st_layout(specs).file_size
            check = "= layout formula" if size == expected else f"!= layout formula {expected:,}"
            print(
                f"  safetensors n={len(specs):>9,}: save_file        {write_s:7.2f} s, "
                f"{size:,} bytes {check} (JSON header {stored_st_header(path):,})"
            )
            try:
                return time_lookups(st_lookup(path), picks[1:], cfg.budget_s), None
            except SafetensorError as exc:
                err = f"safe_open: {exc}"
        print(f"  safetensors n={len(specs):>9,}: FAILED after {write_s:.2f} s: {err}")
        return None, err
    finally:
        path.unlink(missing_ok=True)


def bench_count(specs: Sequence[Spec], cfg: Settings, note: str = "") -> Row:
    picks = random_picks(specs, cfg.repeat, cfg.seed + len(specs))
    awq2 = bench_awq2(specs, picks, cfg)
    st, err = bench_st(specs, picks, cfg)
    return Row(len(specs), awq2, st, err, note)


# --------------------------------------------------------------------------- safetensors cap


def st_accepts(specs: Sequence[Spec], workdir: Path) -> bool:
    """Does safetensors store, open and read a file of these tensors?"""
    path = workdir / f"try{len(specs)}.safetensors"
    _, err = write_safetensors(path, specs)
    try:
        if err is None:
            st_lookup(path)(specs[-1].name)
        return err is None
    except SafetensorError:
        return False
    finally:
        path.unlink(missing_ok=True)


def predicted_st_cap(specs: Sequence[Spec], limit: int) -> int:
    """Largest prefix whose JSON header (as :func:`st_layout` counts it) fits ``limit``."""
    json_bytes = np.cumsum(np.fromiter((st_entry_bytes(s) for s in specs), np.int64, len(specs)))
    headers = -(-(json_bytes + 1) // 8) * 8  # st_header_bytes of every prefix
    return int(np.searchsorted(headers, limit, side="right"))


def find_st_cap(specs: Sequence[Spec], ok: int, bad: int, workdir: Path) -> tuple[int, list[str]]:
    """Largest count in [ok, bad) safetensors accepts, by trying: first the count the
    header size formula predicts and the one after it, then bisection."""
    candidates = [predicted_st_cap(specs[:bad], ST_HEADER_HINT)]
    candidates.append(candidates[0] + 1)
    tries = []
    while bad - ok > 1:
        n = next((c for c in candidates if ok < c < bad), (ok + bad) // 2)
        t0 = time.perf_counter()
        accepted = st_accepts(specs[:n], workdir)
        verdict = "accepted" if accepted else "refused"
        tries.append(f"{n:,} {verdict} ({time.perf_counter() - t0:.1f} s)")
        print(f"  cap search: {tries[-1]}")
        ok, bad = (n, bad) if accepted else (ok, n)
    return ok, tries


# --------------------------------------------------------------------------- reporting


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def print_table(head: list[str], lines: list[list[str]]) -> None:
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=True)]
    for cells in [head, ["-" * w for w in widths], *lines]:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
        )


def timing_cell(t: Timing | None) -> str:
    if t is None:
        return "n/a"
    return f"{fmt_time(t.median)}, {fmt_time(t.best)} (n={t.repeats})"


def print_open_table(rows: Sequence[Row]) -> None:
    head = ["tensors", "awq2 open+lookup (median, best)", "safetensors open+get (median, best)"]
    head.append("safetensors/awq2")
    lines = []
    for r in rows:
        ratio = f"{r.st.median / r.awq2.median:,.1f}x" if r.st else "n/a"
        count = f"{r.count:,}{r.note}"
        lines.append([count, timing_cell(r.awq2), timing_cell(r.st), ratio])
    print_table(head, lines)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def print_targets(rows: Sequence[Row]) -> None:
    by_count = sorted(rows, key=lambda r: r.count)
    small, large = by_count[0], by_count[-1]
    scaling = large.awq2.median / small.awq2.median
    print(
        f"scaling   awq2({large.count:,}) / awq2({small.count:,}) = {scaling:.2f} "
        f"(medians; best: {large.awq2.best / small.awq2.best:.2f})  "
        f"target <= {SCALING_TARGET}: {verdict(scaling <= SCALING_TARGET)}"
    )
    if (small.count, large.count) != (1_000, 1_000_000):
        print("          (the target is defined for 1,000,000 / 1,000 tensors)")
    both = [r for r in by_count if r.st is not None]
    if not both:
        print("speed-up  safetensors handled none of the counts: n/a")
        return
    top = both[-1]
    assert top.st is not None
    speedup = top.st.median / top.awq2.median
    print(
        f"speed-up  safetensors / awq2 at {top.count:,} tensors (largest both handle) = "
        f"{speedup:,.0f}x (medians)  target >= {SPEEDUP_TARGET:.0f}: "
        f"{verdict(speedup >= SPEEDUP_TARGET)}"
    )
    failed = [f"{r.count:,} ({r.st_error})" for r in by_count if r.st_error]
    if failed:
        print("safetensors could not handle: " + "; ".join(failed))


def padding_by_kind(specs: Sequence[Spec]) -> list[list[str]]:
    """AWQ-v2 padding per tensor kind (last name component, plus norm / router / embedding)."""
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for s in specs:
        last = s.name.rsplit(".", 2)
        kind = last[-1] if last[-1] != "weight" else f"{last[-2]}.weight"
        cell = kinds[kind]
        cell[0] += 1
        cell[1] += s.nbytes
        cell[2] += align_up(s.nbytes, ALIGNMENT) - s.nbytes
    rows = sorted(kinds.items(), key=lambda kv: -kv[1][2])
    return [[k, f"{c:,}", fmt_bytes(b), fmt_bytes(p)] for k, (c, b, p) in rows]


def print_padding(families: Sequence[tuple[ModelShape, list[Spec]]]) -> None:
    head = ["model", "format", "tensors", "payload", "padding", "index/header", "file", "pad %"]
    lines = []
    for m, specs in families:
        for fmt, layout in (("awq2", awq2_layout(specs)), ("safetensors", st_layout(specs))):
            lines.append(
                [
                    m.name,
                    fmt,
                    f"{len(specs):,}",
                    f"{layout.payload:,}",
                    f"{layout.padding:,}",
                    f"{layout.overhead:,}",
                    f"{layout.file_size:,}",
                    f"{100 * layout.padding / layout.file_size:.3f}%",
                ]
            )
    print_table(head, lines)
    for m, specs in families:
        print(f"\nawq2 padding of {m.name} by tensor kind:")
        print_table(["kind", "tensors", "payload", "padding"], padding_by_kind(specs))


def print_environment() -> None:
    print(f"python {platform.python_version()} ({platform.python_implementation()})")
    print(f"numpy {np.__version__}, safetensors {safetensors.__version__}")
    print(f"machine {platform.machine()} {platform.system()} {platform.release()}, ", end="")
    print(f"os.cpu_count() = {os.cpu_count()}")


# --------------------------------------------------------------------------- main


def parse_counts(text: str) -> list[int]:
    counts = sorted({int(c.replace("_", "")) for c in text.split(",") if c.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("counts are positive integers, e.g. 1000,1000000")
    return counts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="1k and 10k tensors, 20 repeats")
    parser.add_argument("--counts", type=parse_counts, help="comma-separated tensor counts")
    parser.add_argument("--repeat", type=int, help="open+lookup repeats per format and count")
    parser.add_argument(
        "--budget", type=float, default=10.0, help="seconds per timing before fewer repeats"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random names")
    parser.add_argument(
        "--no-cap-search", action="store_true", help="skip finding safetensors' largest count"
    )
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="PNG",
        help="also draw open+lookup time against tensor count, log-log (needs matplotlib: "
        "the bench extra)",
    )
    return parser.parse_args(argv)


def plot_open(rows: Sequence[Row], path: Path) -> None:
    """Median and best open+lookup time against tensor count, both formats, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    series = [("AWQ-v2", [(r.count, r.awq2) for r in rows], "o-", "#3f51b5")]
    st = [(r.count, r.st) for r in rows if r.st is not None]
    series.append(("safetensors", st, "s-", "#e91e63"))  # type: ignore[arg-type]
    for label, points, style, colour in series:
        if not points:
            continue
        counts = [c for c, _ in points]
        ax.plot(counts, [t.median for _, t in points], style, color=colour, label=label)
        ax.fill_between(counts, [t.best for _, t in points], [t.median for _, t in points],
                        color=colour, alpha=0.15, linewidth=0)  # fmt: skip
    refused = [r.count for r in rows if r.st is None]
    if refused:
        ax.axvline(min(refused), color="#e91e63", linestyle=":", linewidth=1)
        ax.text(min(refused), ax.get_ylim()[1], "safetensors refuses the file ", color="#e91e63",
                va="top", ha="right", fontsize=8)  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tensors in the file")
    ax.set_ylabel("open + one lookup (s, median; band: best)")
    ax.set_title("Opening a file and reading one tensor")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    print(f"plot written to {path}")


def run_open_bench(counts: Sequence[int], cfg: Settings, cap_search: bool) -> list[Row]:
    specs = synthetic_specs(max(counts))
    rows = []
    for count in counts:
        t0 = time.perf_counter()
        rows.append(bench_count(specs[:count], cfg))
        print(f"  ({count:,} tensors done in {time.perf_counter() - t0:.1f} s)")
    ok = max((r.count for r in rows if r.st is not None), default=0)
    bad = min((r.count for r in rows if r.st is None and r.count > ok), default=0)
    if cap_search and bad:
        cap, _ = find_st_cap(specs, ok, bad, cfg.workdir)
        if cap > ok:
            print(f"  safetensors' largest count: {cap:,}; timing both there")
            rows.append(bench_count(specs[:cap], cfg, note=" (cap)"))
    return sorted(rows, key=lambda r: r.count)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = args.counts or (QUICK_COUNTS if args.quick else DEFAULT_COUNTS)
    repeat = args.repeat or (20 if args.quick else 101)
    print_environment()
    print(f"\n== 1. open + one lookup, random name per repeat; repeats {repeat} ==")
    with tempfile.TemporaryDirectory(prefix="bench_open.") as tmp:
        cfg = Settings(Path(tmp), repeat, args.budget, args.seed)
        rows = run_open_bench(counts, cfg, cap_search=not args.no_cap_search)
    print()
    print_open_table(rows)
    print()
    print_targets(rows)
    if args.plot is not None:
        plot_open(rows, args.plot)
    print("\n== 2. padding overhead from the shapes (no data written) ==")
    print_padding([llama3_8b(), mixtral_8x7b()])
    return 0


if __name__ == "__main__":
    sys.exit(main())
