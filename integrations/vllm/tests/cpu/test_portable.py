"""The portable kernel (``awq2_vllm.portable.TorchInt4LinearKernel``, torch's int4 GEMM), layer
by layer, against dequantise-then-matmul in float32 (issue 46, item 3).

The bound, per output ``y[r, j]`` of ``x [m, k] @ w.T``, with ``u`` the unit roundoff of the
activation dtype (2^-11 for float16, 2^-8 for bfloat16)::

    |y - ref| <= u * (|ref| + sum_i |x[r, i]| * (|w[j, i]| + 8 * s[g(i), j]))
                 + k * 2^-22 * sum_i |x[r, i] * w[j, i]|

* ``u * |ref|``: the output is rounded once to the activation dtype;
* ``u * sum |x| * 8 s``: the kernel takes ``zero = (8 - z) * s`` in the activation dtype, rounded
  once, and ``|8 - z| <= 8``;
* ``u * sum |x| * |w|``: room for a kernel that rounds each dequantised weight to the
  activation dtype before it multiplies (torch's AVX-512 BF16 path may);
* the last term: float32 accumulation over ``k`` products (``k`` ulps at 2^-23, doubled).

Each layer is checked with the CPU's own dispatch and, in a second process, with torch's AVX2
kernels (``ATEN_CPU_CAPABILITY=avx2``), the ones an AVX2-only host runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

CASES = [  # (k, n, group size, symmetric, dtype)
    (256, 128, 128, False, "float16"),
    (512, 192, 64, False, "bfloat16"),
    (256, 64, 32, True, "float16"),
    (384, 128, -1, False, "bfloat16"),
    (1024, 256, 128, True, "bfloat16"),
]
UNIT = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


def check(k: int, n: int, gs: int, symmetric: bool, dtype: str, m: int = 7) -> dict:
    """The largest error over ``bound`` of one random layer, and whether the weights stayed
    4-bit."""
    from awq2_vllm.plain import packed_along
    from awq2_vllm.portable import TorchInt4LinearKernel
    from vllm.model_executor.kernels.linear import MPLinearLayerConfig
    from vllm.scalar_type import scalar_types

    act = getattr(torch, dtype)
    rng = np.random.default_rng(k + n + gs)
    groups = 1 if gs == -1 else k // gs
    codes = rng.integers(0, 16, (k, n), dtype=np.uint8)
    zeros = np.full((groups, n), 8, np.uint8) if symmetric else (
        rng.integers(0, 16, (groups, n), dtype=np.uint8))  # fmt: skip
    scales = torch.from_numpy(rng.uniform(0.001, 0.02, (groups, n)).astype(np.float32)).to(act)
    layer = torch.nn.Module()
    params = {"qweight": packed_along(codes, axis=0), "scales": scales.clone(),
              "qzeros": packed_along(zeros, axis=1)}  # fmt: skip
    for name, data in params.items():
        layer.register_parameter(name, torch.nn.Parameter(data, requires_grad=False))
    config = MPLinearLayerConfig(
        full_weight_shape=(k, n), partition_weight_shape=(k, n),
        weight_type=scalar_types.uint4b8 if symmetric else scalar_types.uint4, act_type=act,
        group_size=gs, zero_points=not symmetric)  # fmt: skip
    ok, why = TorchInt4LinearKernel.can_implement(config)
    assert ok, why
    kernel = TorchInt4LinearKernel(config, w_q_param_name="qweight", w_s_param_name="scales",
                                   w_zp_param_name="qzeros")  # fmt: skip
    kernel.process_weights_after_loading(layer)
    x = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).to(act)
    y = kernel.apply_weights(layer, x).float()

    per_row = gs if gs != -1 else k
    s = scales.float().repeat_interleave(per_row, 0)  # [k, n]
    z = torch.from_numpy(zeros.astype(np.float32)).repeat_interleave(per_row, 0)
    w = (torch.from_numpy(codes.astype(np.float32)) - z) * s  # [k, n], exact in float32
    xf = x.float()
    ref = xf @ w
    u = UNIT[dtype]
    bound = u * (ref.abs() + xf.abs() @ (w.abs() + 8 * s)) + k * 2.0**-22 * (xf.abs() @ w.abs())
    return {
        "ratio": float(((y - ref).abs() / bound).max()),
        "max_error": float((y - ref).abs().max()),
        "weight_bytes": layer.qweight.numel() * layer.qweight.element_size(),
        "weight_dtype": str(layer.qweight.dtype),
        "shape": list(y.shape),
    }


def _report(case: tuple, got: dict, where: str) -> None:
    k, n, gs, symmetric, dtype = case
    print(f"\nportable kernel ({where}): k {k} n {n} group {gs} "
          f"{'symmetric' if symmetric else 'zero points'} {dtype}: max error "
          f"{got['max_error']:.3g}, error / bound {got['ratio']:.3f}")  # fmt: skip
    assert got["shape"] == [7, n]
    assert got["weight_dtype"] == "torch.uint8" and got["weight_bytes"] == k * n // 2  # 4 bits
    assert got["ratio"] <= 1.0


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"k{c[0]}-n{c[1]}-g{c[2]}-{c[4]}")
def test_each_layer_is_within_the_bound_of_float32(case):
    _report(case, check(*case), torch.backends.cpu.get_cpu_capability())


def test_each_layer_is_within_the_bound_with_torchs_avx2_kernels(tmp_path):
    """A second process with ``ATEN_CPU_CAPABILITY=avx2``: the code an AVX2-only CPU runs."""
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2"}
    script = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
              "import torch; from test_portable import CASES, check; "
              "print(json.dumps([torch.backends.cpu.get_cpu_capability(), "
              "[check(*c) for c in CASES]]))")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    capability, results = json.loads(done.stdout.strip().splitlines()[-1])
    assert capability == "AVX2"
    for case, got in zip(CASES, results, strict=True):
        _report(case, got, capability)


def test_a_layer_no_cpu_kernel_takes_is_refused_with_the_reason():
    from awq2_vllm.portable import TorchInt4LinearKernel
    from vllm.model_executor.kernels.linear import MPLinearLayerConfig
    from vllm.scalar_type import scalar_types

    config = MPLinearLayerConfig(
        full_weight_shape=(256, 128), partition_weight_shape=(256, 128),
        weight_type=scalar_types.uint4, act_type=torch.float16, group_size=16,
        zero_points=True)  # fmt: skip
    ok, why = TorchInt4LinearKernel.can_implement(config)
    assert not ok and "group size 16" in why and "32, 64, 128, 256" in why
