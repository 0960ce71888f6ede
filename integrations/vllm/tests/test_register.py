"""The entry point alone makes both names visible to vLLM, in a fresh process, and vLLM's
config objects accept them (``ModelConfig._verify_quantization``, ``vllm/config/model.py:1383``;
``LoadConfig.load_format``, ``vllm/config/load.py:30``, looked up by ``get_model_loader``,
``vllm/model_executor/model_loader/__init__.py:123``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from checkpoints import make

SCRIPT = r"""
import json, sys
import vllm.plugins
from vllm.model_executor.layers import quantization as q
from vllm.model_executor import model_loader as ml
before = "awq_v2" in q.QUANTIZATION_METHODS
vllm.plugins.load_general_plugins()
vllm.plugins.load_general_plugins()
import awq2_vllm
awq2_vllm.register()  # a direct second registration is harmless too
from vllm.config import ModelConfig
from vllm.config.load import LoadConfig
served = sys.argv[1]
named = ModelConfig(model=served, quantization="awq_v2", dtype="float16")
claimed = ModelConfig(model=served, dtype="float16")
v1 = sys.argv[2]
fallback = ModelConfig(model=v1, quantization="awq_v2", dtype="float16")
stock = ModelConfig(model=v1, dtype="float16")
print(json.dumps({
    "before": before,
    "methods": q.QUANTIZATION_METHODS.count("awq_v2"),
    "config": q.get_quantization_config("awq_v2").__name__,
    "loader": type(ml.get_model_loader(LoadConfig(load_format="awq_v2"))).__name__,
    "named": named.quantization,
    "claimed": claimed.quantization,
    "fallback": fallback.quantization,
    "stock": stock.quantization,
}))
"""


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return make(tmp_path_factory.mktemp("ckpt"))


def test_entry_point_registers_both_names_in_a_fresh_process(folders):
    """...and an AWQ v1 checkpoint is claimed by ``awq_v2`` only when asked for by name (the
    seed's fallback, ``test_fallback.py`` on the CPU build); left alone, vLLM's own method."""
    v1, served = folders
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(served), str(v1)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {
        "before": False,
        "methods": 1,
        "config": "AWQv2Config",
        "loader": "AWQv2ModelLoader",
        "named": "awq_v2",
        "claimed": "awq_v2",
        "fallback": "awq_v2",
        "stock": "awq",
    }
