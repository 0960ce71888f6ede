"""``python -m reference.demo [--out DIR]``: write a small AWQ-v2 file and explain it with
``dump``.

The README's first command runs this after installing, so a new user sees a file being
written, validated, verified and dumped in one step.  The file, ``demo.awq2``, holds the
dense tensors of a small decoder and one quantised linear layer, 4-bit with group size 128,
stored in the Marlin layouts [LAY-8]: ``dump`` shows its ``qweight``, ``scales`` and
``qzeros`` with their k, n, bits and group size.

Without ``--out`` the file is written into a temporary folder that is removed at the end,
whatever happens; with ``--out DIR`` it is kept in ``DIR`` (made if missing), and the last
line says where.

Exit status: that of ``dump --verify`` (0: the file is valid and every checksum matches), or
2 for a usage error, or 130 when interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import reference
from reference import dump
from reference.ground.text import escape

#: The file the demo writes, in ``--out`` or in a temporary folder.
DEMO_FILE = "demo.awq2"
#: The quantised layer: its name, bits and group size; k and n are the hidden size.
LAYER, BITS, GROUP_SIZE = "model.layers.0.self_attn.q_proj", 4, 128
HIDDEN, VOCAB = 256, 512
#: The exit status of an interrupted command (128 + SIGINT), as a shell reports it.
EXIT_INTERRUPTED = 130


def demo_tensors() -> dict[str, np.ndarray]:
    """A few tensors shaped like the unquantised parts of a small decoder."""
    rng = np.random.default_rng(0)
    return {
        "model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16),
        "model.layers.0.input_layernorm.weight": np.ones(HIDDEN, dtype=np.float16),
        "model.norm.weight": np.ones(HIDDEN, dtype=np.float16),
        "lm_head.weight": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float16),
    }


def demo_layer() -> dict[str, np.ndarray]:
    """The quantised layer's codes ``q`` (k x n), zero points ``z`` and fp16 ``scales`` (one
    row per group), and its bias: what :meth:`reference.Writer.add_linear` takes."""
    rng = np.random.default_rng(1)
    groups = HIDDEN // GROUP_SIZE
    return {
        "q": rng.integers(0, 2**BITS, size=(HIDDEN, HIDDEN), dtype=np.uint8),
        "z": rng.integers(0, 2**BITS, size=(groups, HIDDEN), dtype=np.uint8),
        "scales": (rng.random((groups, HIDDEN), dtype=np.float32) * 0.02 + 0.001).astype(
            np.float16
        ),
        "bias": np.zeros(HIDDEN, dtype=np.float16),
    }


def write_demo(path: Path) -> str:
    """Write the demo file at ``path``; returns the quantised layer's layout family
    (``"MARLIN"``: the shapes meet Marlin's rules)."""
    metadata = {"config": {"hidden_size": HIDDEN, "vocab_size": VOCAB}}
    with reference.Writer(path, metadata=metadata) as writer:
        for name, array in demo_tensors().items():
            writer.add(name, array)
        return writer.add_linear(LAYER, bits=BITS, group_size=GROUP_SIZE, **demo_layer())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m reference.demo",
        description="Write a small AWQ-v2 file (dense tensors and one 4-bit Marlin layer) and "
        "explain it with dump --verify.",
        epilog="exit status: that of dump --verify (0 valid and verified), 2 usage error, "
        "130 interrupted",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help=f"keep {DEMO_FILE} in this folder (made if missing); by default it is written "
        "to a temporary folder that is removed at the end",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            status = _write_and_dump(args.out / DEMO_FILE)
            print(f"\nkept {escape(str(args.out / DEMO_FILE))}")
            return status
        with tempfile.TemporaryDirectory(prefix="awq2-demo-") as folder:
            status = _write_and_dump(Path(folder) / DEMO_FILE)
        print(f"\nremoved the temporary folder {escape(folder)} (--out DIR keeps the file)")
        return status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _write_and_dump(path: Path) -> int:
    family = write_demo(path)
    layer = f"{LAYER} ({BITS}-bit, group size {GROUP_SIZE}, {family} layout, with a bias)"
    print(f"wrote {escape(str(path))}: {len(demo_tensors())} dense tensors and the quantised "
          f"layer {layer}\n")  # fmt: skip
    return dump.main([str(path), "--verify"])


if __name__ == "__main__":
    raise SystemExit(main())
