"""A Python process started with this folder on ``PYTHONPATH`` sees an x86 CPU without AVX-512,
as vLLM's CPU build and torch see one: the AVX2 path tested on an AVX-512 host (issue 46).

* ``ATEN_CPU_CAPABILITY=avx2``: torch dispatches its own CPU kernels (the int4 GEMM among them)
  to their AVX2 builds, as it does on such a CPU;
* torch's instruction-set probes answer no for AVX-512, AVX-512 BF16 and AMX.  Every question
  vLLM 0.32's CPU build asks goes through them (``torch.cpu._is_avx512_supported`` and its
  siblings: ``platforms/cpu.py`` ``import_kernels``, the attention backend, the MoE and linear
  kernels), so vLLM loads ``_C_AVX2``, the library it loads on an AVX2 CPU, which has no
  ``cpu_gemm_wna16``.

Python imports ``sitecustomize`` at start-up (the ``site`` module), before any code of the
program, so the worker processes of a TP 2 run see the same CPU.  Nothing else is changed.
"""

import os

os.environ["ATEN_CPU_CAPABILITY"] = "avx2"

try:
    import torch
except ImportError:  # a Python without torch (a tool's venv): nothing to make believe
    torch = None

for _probe in ("_is_avx512_supported", "_is_avx512_bf16_supported", "_is_avx512_vnni_supported",
               "_is_amx_tile_supported", "_is_amx_fp16_supported"):  # fmt: skip
    if torch is not None and hasattr(torch.cpu, _probe):
        setattr(torch.cpu, _probe, lambda: False)
