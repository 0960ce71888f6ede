"""Which CPU kernel runs a 4-bit layer, chosen the way vLLM chooses its own
(``choose_mp_linear_kernel``, ``vllm/model_executor/kernels/linear/__init__.py``): an ordered
list, each kernel's ``can_implement`` answering with a reason, the first that can wins.

The list, best first:

1. the kernel vLLM's own AWQ and compressed-tensors paths would choose for the same
   ``MPLinearLayerConfig`` (from ``_POSSIBLE_KERNELS[CPU]``: ``Dynamic4bitLinearKernel``,
   signed int4 only; ``ZentorchWNA16LinearKernel``, with the ``zentorch`` package;
   ``CPUWNA16LinearKernel``), where the operator it calls is present.  vLLM's choice does not
   ask that: ``CPUWNA16LinearKernel.can_implement`` says yes on a CPU without AVX-512, whose
   library (``_C_AVX2``) has no ``cpu_gemm_wna16``, and the layer fails at its first forward.
   :data:`NEEDS` names the operator each calls;
2. :class:`awq2_vllm.portable.TorchInt4LinearKernel`, torch's own int4 GEMM, on any CPU.

``AWQ2_VLLM_KERNEL=portable`` skips the first (to compare the two on one host).  The first
layer logs one line naming the kernel and why the ones before it declined; when none can, the
error names the CPU, the library vLLM loaded, what is missing and what would serve.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from awq2_vllm import host
from awq2_vllm.errors import PluginError

log = logging.getLogger("vllm.awq2_vllm")  # a child of vLLM's logger: printed as vLLM's lines are
KERNEL_ENV = "AWQ2_VLLM_KERNEL"
#: The operator each of vLLM's CPU kernels calls, where its ``can_implement`` does not ask.
NEEDS = {"CPUWNA16LinearKernel": ("_C", "cpu_gemm_wna16")}
_logged: set[str] = set()


def _vllm_choice(config: Any) -> tuple[Any, str | None]:
    """vLLM's own kernel for ``config`` and None, or None and why it cannot run here."""
    from vllm.model_executor.kernels.linear import choose_mp_linear_kernel

    try:
        kernel = choose_mp_linear_kernel(config)
    except ValueError as e:
        return None, f"vLLM's own choice failed ({' '.join(str(e).split())})"
    need = NEEDS.get(kernel.__name__)
    if need is not None and not host.has_op(*need):
        library = host.vllm_library() or "no kernel library"
        return None, (f"{kernel.__name__} calls torch.ops.{need[0]}.{need[1]}, absent from "
                      f"{library}, the library vLLM loaded on {host.describe()}")  # fmt: skip
    return kernel, None


def choose(config: Any) -> Any:
    """The kernel class for ``config`` (an ``MPLinearLayerConfig``); ``NO_CPU_KERNEL`` when no
    kernel of the list can run it."""
    from awq2_vllm.portable import TorchInt4LinearKernel

    declined = []
    forced = os.environ.get(KERNEL_ENV) == "portable"
    if forced:
        declined.append(f"vLLM's own kernels: skipped ({KERNEL_ENV}=portable)")
    else:
        kernel, why = _vllm_choice(config)
        if kernel is not None:
            return _chosen(kernel, declined)
        declined.append(str(why))
    ok, why = TorchInt4LinearKernel.can_implement(config)
    if ok:
        return _chosen(TorchInt4LinearKernel, declined)
    declined.append(f"TorchInt4LinearKernel: {why}")
    raise PluginError(
        "NO_CPU_KERNEL", "vllm", "a CPU kernel for 4-bit layers: vLLM's CPUWNA16LinearKernel "
        "(vLLM's CPU build on a CPU with AVX-512) or torch's int4 GEMM "
        "(torch.ops.aten._weight_int4pack_mm_for_cpu, torch's CPU build, any x86 CPU)",
        f"on {host.describe()}: " + "; ".join(declined))  # fmt: skip


def _chosen(kernel: Any, declined: list[str]) -> Any:
    if kernel.__name__ not in _logged:
        _logged.add(kernel.__name__)
        because = f" ({'; '.join(declined)})" if declined else ""
        log.info("awq2_vllm: Using %s for AWQv2LinearMethod on %s, vLLM's library %s%s",
                 kernel.__name__, host.describe(), host.vllm_library(), because)  # fmt: skip
    return kernel
