"""The plugin's tests run with vLLM 0.33.0 installed (``integrations/vllm/ci.sh``).  Without
vLLM they skip, saying so, unless ``AWQ2_REQUIRE_VLLM=1``, where a missing vLLM fails.

vLLM's Python layers run on a machine without a GPU when its platform is the CPU one:
``VLLM_TARGET_DEVICE=cpu`` makes ``resolve_current_platform_cls_qualname``
(``vllm/platforms/__init__.py:240``) pick ``CpuPlatform`` at once (line 244).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
# vLLM 0.34's CPU platform refuses an x86 CPU when vLLM finds no usable Triton
# (``vllm/platforms/cpu.py:243``).  The CUDA build's Triton has no active driver without a GPU,
# and vLLM then disables it (``vllm/triton_utils/importing.py:64-75``) unless
# CUDA_VISIBLE_DEVICES is set and empty, which it reads as a distributed worker whose devices
# come later (line 56-68).  No test runs a Triton kernel; set here, every worker process
# inherits it.  vLLM 0.33 does not check.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
sys.path.insert(0, str(Path(__file__).parent))  # checkpoints.py, for tests in subfolders


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("vllm") is not None:
        return
    if os.environ.get("AWQ2_REQUIRE_VLLM") == "1":
        raise pytest.UsageError("AWQ2_REQUIRE_VLLM=1 but vllm is not installed")
    skip = pytest.mark.skip(reason="vllm is not installed (integrations/vllm/ci.sh installs it)")
    for item in items:
        item.add_marker(skip)
