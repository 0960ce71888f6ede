"""Benchmark the reference codec's Marlin swizzle against a plain copy of the same bytes.

Usage: ``python bench/bench_codec.py [--quick] [--repeat N]``.

For each layer it times ``swizzle_qweight`` and ``unswizzle_qweight`` (best of N runs, a fresh
output each call, and again writing into a preallocated ``out=``) beside ``np.copyto`` of the
packed bytes into a preallocated array, in the same run, and prints GB/s of packed bytes and
the ratio codec time / copy time. Then scales and zeros, and a breakdown of the 4-bit swizzle
into its steps, which shows what limits the speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference.quant import codec


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    """Best wall time of ``repeat`` calls, in milliseconds (``time.perf_counter``)."""
    fn()  # warm caches and the codec's cached index plans
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times) * 1e3


def row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(
        c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )


def bench_layer(bits: int, k: int, n: int, repeat: int) -> list[list[str]]:
    rng = np.random.default_rng(0)
    q = rng.integers(0, 2**bits, size=(k, n), dtype=np.uint8)
    mq = codec.swizzle_qweight(q, bits)
    src, dst = mq.copy(), np.empty_like(mq)
    q_out = np.empty_like(q)
    nbytes = mq.nbytes
    copy = best_ms(lambda: np.copyto(dst, src), repeat)
    runs = [
        ("np.copyto", copy),
        ("swizzle", best_ms(lambda: codec.swizzle_qweight(q, bits), repeat)),
        ("swizzle out=", best_ms(lambda: codec.swizzle_qweight(q, bits, out=dst), repeat)),
        ("unswizzle", best_ms(lambda: codec.unswizzle_qweight(mq, k, n, bits), repeat)),
        (
            "unswizzle out=",
            best_ms(lambda: codec.unswizzle_qweight(mq, k, n, bits, out=q_out), repeat),
        ),
    ]
    layer = f"{bits}-bit {k}x{n}"
    return [
        [
            layer,
            op,
            f"{nbytes / 2**20:.1f}",
            f"{ms:.2f}",
            f"{nbytes / ms / 1e6:.2f}",
            f"{ms / copy:.1f}x",
        ]
        for op, ms in runs
    ]


def bench_small(k: int, n: int, group_size: int, repeat: int) -> list[list[str]]:
    rng = np.random.default_rng(1)
    g = codec.num_groups(k, group_size)
    s = rng.standard_normal((g, n)).astype(np.float16)
    z = rng.integers(0, 16, size=(g, n), dtype=np.uint8)
    mz = codec.swizzle_zeros(z, 4)
    tag = f"{k}x{n} g={group_size}"
    runs = [
        (
            "swizzle_scales",
            s.nbytes,
            best_ms(lambda: codec.swizzle_scales(s, k, group_size), repeat),
        ),
        ("swizzle_zeros", mz.nbytes, best_ms(lambda: codec.swizzle_zeros(z, 4), repeat)),
        ("unswizzle_zeros", mz.nbytes, best_ms(lambda: codec.unswizzle_zeros(mz, n, 4), repeat)),
    ]
    return [[tag, op, f"{nb / 2**10:.0f} KiB", f"{ms:.3f}"] for op, nb, ms in runs]


def breakdown(k: int, n: int, repeat: int) -> list[tuple[str, float]]:
    """The 4-bit swizzle's steps, timed one by one on preallocated buffers."""
    rng = np.random.default_rng(2)
    q = rng.integers(0, 16, size=(k, n), dtype=np.uint8)
    rows, half = k // 16, n // 2
    x = q.reshape(rows, 16 * n).view(np.dtype("<u8"))
    lo = x[:, :n].reshape(rows, half, 2).transpose(0, 2, 1)
    hi = x[:, n:].reshape(rows, half, 2).transpose(0, 2, 1)
    pre = np.empty((rows, 2, half), dtype=np.dtype("<u8"))
    tmp = np.empty((rows, half), dtype=np.dtype("<u8"))
    out = np.empty((rows, 2 * n), dtype=np.int32)
    gather = codec._u16_gather(4, n)

    def merge() -> None:
        np.left_shift(hi, np.uint64(4), out=pre)
        np.bitwise_or(pre, lo, out=pre)

    def swap() -> None:
        codec._byte_swap_pairs(pre[:, 0], pre[:, 1], pre[:, 0], pre[:, 1], tmp)

    def take() -> None:
        units = pre.reshape(rows, -1).view(np.dtype("<u2"))
        np.take(units, gather, axis=1, out=out.view(np.dtype("<u2")), mode="clip")

    src, dst = out.copy(), np.empty_like(out)
    return [
        ("np.copyto of the packed bytes", best_ms(lambda: np.copyto(dst, src), repeat)),
        ("range check (q.max)", best_ms(lambda: q.max(), repeat)),
        ("merge nibble pairs (2 ufuncs, strided)", best_ms(merge, repeat)),
        ("SWAR byte swap (6 ufuncs)", best_ms(swap, repeat)),
        ("gather 16-bit units (np.take)", best_ms(take, repeat)),
        (
            "allocate + first touch 2 x packed",
            best_ms(lambda: np.ones((2, rows, 2 * n), np.int32), repeat),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one 4-bit layer, 3 runs each")
    parser.add_argument("--repeat", type=int, default=None, help="runs per timing (best kept)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (3 if args.quick else 7)
    shapes = (
        [(4, 4096, 4096)] if args.quick else [(4, 4096, 4096), (4, 4096, 14336), (8, 4096, 4096)]
    )

    head = ["layer", "op", "MiB", "ms", "GB/s", "vs copy"]
    lines = [r for bits, k, n in shapes for r in bench_layer(bits, k, n, repeat)]
    widths = [max(len(x) for x in col) for col in zip(head, *lines, strict=True)]
    print(row(head, widths))
    print(row(["-" * w for w in widths], widths))
    for line in lines:
        print(row(line, widths))

    print()
    head2 = ["scales / zeros", "op", "size", "ms"]
    small = [
        r
        for k, n, g in [(4096, 4096, 128), (4096, 14336, 128)]
        for r in bench_small(k, n, g, repeat)
    ]
    widths2 = [max(len(x) for x in col) for col in zip(head2, *small, strict=True)]
    print(row(head2, widths2))
    print(row(["-" * w for w in widths2], widths2))
    for line in small:
        print(row(line, widths2))

    print()
    steps = breakdown(4096, 4096, repeat)
    copy = steps[0][1]
    print("4-bit 4096x4096 swizzle, step by step (what limits the speed):")
    w = max(len(name) for name, _ in steps)
    for name, ms in steps:
        print(f"  {name.ljust(w)}  {ms:7.2f} ms  {ms / copy:5.1f}x copy")
    print(
        "  Each step is a memory-bound NumPy pass; the strided merge and the 16-bit gather\n"
        "  (np.take moves 2-byte units, no SIMD) dominate. A fresh output also pays page\n"
        "  faults on first touch, which out= avoids."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
