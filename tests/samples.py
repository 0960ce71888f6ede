"""Small valid files written by the reference writer, for tests that import them (a module
of its own: ``conftest`` is a name every test folder's conftest.py takes, so importing it
by name finds whichever was loaded first)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import reference


def sample_tensors() -> dict[str, np.ndarray]:
    """A few tensors of different dtypes, shapes and sizes (one over 64 KiB, one empty, one 0-d)."""
    rng = np.random.default_rng(1234)
    return {
        "model.embed_tokens.weight": rng.standard_normal((64, 32)).astype(np.float16),
        "model.norm.weight": np.ones(32, dtype=np.float32),
        "model.layers.0.mlp.big": rng.integers(-100, 100, size=(300, 100), dtype=np.int32),
        "empty": np.zeros((0, 7), dtype=np.int64),
        "scalar": np.array(2.5, dtype=np.float64),
        "flags": np.array([True, False, True]),
    }


SAMPLE_METADATA = {"config": {"hidden_size": 32, "architectures": ["Tiny"]}, "note": "ünïcode"}


def write(
    path: Path, tensors: dict[str, np.ndarray] | None = None, metadata=SAMPLE_METADATA
) -> Path:
    reference.save(path, sample_tensors() if tensors is None else tensors, metadata)
    return path
