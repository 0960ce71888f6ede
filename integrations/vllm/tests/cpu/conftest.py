"""The runs of ``generate.py`` that several modules compare, made once per session."""

from __future__ import annotations

import pytest
from serving import make_runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    return make_runs(tmp_path_factory.mktemp("generate"))
