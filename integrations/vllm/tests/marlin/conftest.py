"""The Marlin path's parameter tests, for vLLM 0.33 (the CUDA build) on its CPU platform.

``AWQ2_VLLM_KERNEL=marlin`` makes the plugin build the Marlin path's parameters although the
platform is the CPU (``awq2_vllm.config.kernel_path``): they load and are compared here; the
GEMM itself needs CUDA (``integrations/vllm/gpu_check.py``)."""

from __future__ import annotations

import os

os.environ.setdefault("AWQ2_VLLM_KERNEL", "marlin")
