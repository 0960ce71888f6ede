"""Shared fixtures: small valid files written by the reference writer (:mod:`samples`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from samples import write


@pytest.fixture
def sample_file(tmp_path: Path) -> Path:
    return write(tmp_path / "sample.awq2")


@pytest.fixture
def sample_bytes(sample_file: Path) -> bytes:
    return sample_file.read_bytes()
