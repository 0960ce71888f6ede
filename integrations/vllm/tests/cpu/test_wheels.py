"""``ci.sh cpu`` installs the project and the plugin from the wheels ``pip wheel`` builds and
runs these tests from a copy outside the checkout (``AWQ2_FROM_WHEELS=1``): then everything
the other tests serve came from the wheels."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

FROM_WHEELS = os.environ.get("AWQ2_FROM_WHEELS") == "1"


@pytest.mark.skipif(not FROM_WHEELS, reason="run from the checkout (ci.sh cpu runs the wheels)")
def test_the_project_and_the_plugin_come_from_installed_wheels():
    import awq2_vllm

    import reference

    checkout = Path(os.environ["AWQ2_CHECKOUT"]).resolve()
    for module in (reference, awq2_vllm):
        where = Path(module.__file__).resolve()
        assert checkout not in where.parents, where
        assert "site-packages" in where.parts, where
    for dist in ("awq-v2", "awq2-vllm"):
        direct = importlib.metadata.distribution(dist).read_text("direct_url.json") or ""
        assert ".whl" in direct and '"editable"' not in direct, (dist, direct)
    entry = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins")
             if e.name == "awq_v2"]  # fmt: skip
    assert [e.value for e in entry] == ["awq2_vllm:register"]
