"""Serving where vLLM's CPU build has no 4-bit kernel (issue 46): an x86 CPU without AVX-512.

Every run here starts with ``as_avx2/`` on ``PYTHONPATH`` (its ``sitecustomize`` makes torch
answer no for AVX-512 and AMX and dispatch its own kernels to AVX2), so vLLM loads
``_C_AVX2``, which has no ``cpu_gemm_wna16``, exactly as on an AVX2-only host; on such a host
the runs are what they would be anyway.  This runs on every host, in every CI run.

* vLLM's stock AWQ and compressed-tensors paths fail there: each run records the error, and
  the test checks it is the missing kernel (what makes the dense reference necessary);
* ``awq_v2`` serves through torch's int4 GEMM (``TorchInt4LinearKernel``), the weights 4-bit
  in memory (``uint8 [n, k // 2]``, checked in every quantised module);
* the reference is the same checkpoint dequantised to its dense dtype, served by vLLM's stock
  unquantised path on the same CPU; tokens and logprobs are compared as ``dense.compare``
  says (a near-tie may part a sequence; up to there every logprob within the bound);
* forms: the four real checkpoints converted to a file; one as a size-split set and through
  the seed's fallback (the checkpoint itself); the example Llama at TP 2 as a rank set and as
  one file (two CPU workers, each started with the same ``sitecustomize``); an AutoAWQ MoE
  checkpoint (experts with zero points) as a file at TP 1 and a rank set at TP 2, through the
  plugin's own MoE method.
"""

from __future__ import annotations

import os
import shutil

import pytest
from checkpoints import awq_moe
from dense import LOGPROB_BOUND, TIE_MARGIN, TOP, compare, dequantised
from serving import CHECKOUT, HERE, REAL, checkpoint, convert, generate

from reference.examples import LlamaShape, write_checkpoint

AS_AVX2 = HERE / "as_avx2"
MISSING = "cpu_gemm_wna16"


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(AS_AVX2), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, **(extra or {})}


@pytest.fixture(scope="module")
def avx2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("avx2")
    jobs = []
    for name in REAL:
        src = checkpoint(name, tmp / "src" / name)
        served = convert(src, tmp / "awq2" / name)
        dense = dequantised(served, tmp / "dense" / name, "float16")
        jobs += [
            {"name": f"{name}/stock", "model": str(src), "quantization": None,
             "record_errors": True},
            {"name": f"{name}/dense", "model": str(dense), "quantization": None,
             "top_logprobs": TOP},
            {"name": f"{name}/awq_v2", "model": str(served), "quantization": "awq_v2"},
        ]  # fmt: skip
    src = tmp / "src" / "autoawq_gemm_g128"
    split = convert(src, tmp / "split", "--max-shard-size", "200KB")
    for form, folder in (("split set", split), ("fallback", src)):
        jobs.append({"name": f"autoawq_gemm_g128/{form}", "model": str(folder),
                     "quantization": "awq_v2"})  # fmt: skip
    moe = awq_moe(CHECKOUT / "tests" / "fixtures" / "breadth" / "qwen3_moe", tmp / "moe-src")
    moe_file = convert(moe, tmp / "moe-file")
    moe_ranked = convert(moe, tmp / "moe-tp2", "--tp", "2")
    moe_dense = dequantised(moe_file, tmp / "moe-dense", "float16")
    for tp, form, folder in ((1, "file", moe_file), (2, "rank set", moe_ranked)):
        jobs.append({"name": f"moe/tp{tp}/dense", "model": str(moe_dense), "tp": tp,
                     "quantization": None, "top_logprobs": TOP, "ignore_eos": True})  # fmt: skip
        jobs.append({"name": f"moe/tp{tp}/{form}", "model": str(folder), "tp": tp,
                     "quantization": "awq_v2", "ignore_eos": True})  # fmt: skip
    run1 = tmp / "tp1"
    run1.mkdir()
    got = generate([j for j in jobs if j.get("tp", 1) == 1], run1, _env())

    v1 = write_checkpoint(tmp / "llama", LlamaShape())
    single = convert(v1, tmp / "llama-file")
    ranked = convert(v1, tmp / "llama-tp2", "--tp", "2")
    dense = dequantised(single, tmp / "llama-dense", "float16")
    jobs2 = [j for j in jobs if j.get("tp", 1) == 2]
    jobs2 += [{"name": "llama/dense", "model": str(dense), "quantization": None, "tp": 2,
               "top_logprobs": TOP},
              {"name": "llama/rank set", "model": str(ranked), "quantization": "awq_v2",
               "tp": 2},
              {"name": "llama/file", "model": str(single), "quantization": "awq_v2",
               "tp": 2}]  # fmt: skip
    run2 = tmp / "tp2"
    run2.mkdir()
    got2 = generate(jobs2, run2, _env({"VLLM_CPU_OMP_THREADS_BIND": "0|1"}))
    shutil.rmtree(tmp / "dense", ignore_errors=True)
    return {"results": {**got["results"], **got2["results"]}, "log": got["log"] + got2["log"]}


def _check(avx2, dense_name: str, ours_name: str) -> None:
    dense, ours = avx2["results"][dense_name], avx2["results"][ours_name]
    verdicts = compare(dense, ours)
    for p, v in enumerate(verdicts):
        parted = "no" if v["parted_at"] is None else (
            f"at step {v['parted_at']} (a near-tie: gap {v['gap']:.4g} nats)")  # fmt: skip
        print(f"\n{ours_name} vs {dense_name}, prompt {p}: {v['steps']} tokens compared, parted "
              f"{parted}, max logprob difference {v['max_difference']:.4g} "
              f"(bound {LOGPROB_BOUND}, tie margin {TIE_MARGIN})")  # fmt: skip
    assert all(len(t) == 16 for t in ours["tokens"])
    assert [v["why"] for v in verdicts if not v["ok"]] == []


def test_the_runs_saw_a_cpu_without_avx512_and_vllms_avx2_library(avx2):
    log = avx2["log"]
    assert (
        "Using TorchInt4LinearKernel for AWQv2LinearMethod on an x86 CPU without AVX-512 "
        "(avx2), vLLM's library _C_AVX2" in log
    ), log[-3000:]
    assert f"CPUWNA16LinearKernel calls torch.ops._C.{MISSING}, absent from _C_AVX2" in log


@pytest.mark.parametrize("name", list(REAL))
def test_stock_cannot_serve_the_checkpoint_there(avx2, name):
    stock = avx2["results"][f"{name}/stock"]
    assert "error" in stock, "stock served a 4-bit checkpoint without cpu_gemm_wna16"
    assert MISSING in stock["error"], stock["error"][-1500:]


@pytest.mark.parametrize("name", list(REAL))
def test_a_converted_file_generates_what_its_dense_model_generates(avx2, name):
    _check(avx2, f"{name}/dense", f"{name}/awq_v2")


@pytest.mark.parametrize("name", list(REAL))
def test_the_weights_stay_4_bit_in_memory(avx2, name):
    tensors = avx2["results"][f"{name}/awq_v2"]["tensors"]
    dense = avx2["results"][f"{name}/dense"]["tensors"]
    quantised = [k.removesuffix("/w_q") for k in tensors if k.endswith("/w_q")]
    assert len(quantised) == 2 * 4, quantised  # 2 layers x qkv, o, gate_up, down
    for module in quantised:
        dtype, shape, _ = tensors[f"{module}/w_q"]
        n, k = dense[f"{module}/weight"][1]
        assert (dtype, shape) == ("torch.uint8", [n, k // 2]), (module, dtype, shape)
        assert f"{module}/weight" not in tensors


@pytest.mark.parametrize("form", ["split set", "fallback"])
def test_a_split_set_and_the_fallback_are_served_the_same(avx2, form):
    _check(avx2, "autoawq_gemm_g128/dense", f"autoawq_gemm_g128/{form}")
    ours = avx2["results"][f"autoawq_gemm_g128/{form}"]
    assert ours["tokens"] == avx2["results"]["autoawq_gemm_g128/awq_v2"]["tokens"]
    assert ours["logprobs"] == avx2["results"]["autoawq_gemm_g128/awq_v2"]["logprobs"]


@pytest.mark.parametrize("form", ["rank set", "file"])
def test_tp_2_generates_what_the_dense_model_generates(avx2, form):
    _check(avx2, "llama/dense", f"llama/{form}")


@pytest.mark.parametrize(("tp", "form"), [(1, "file"), (2, "rank set")])
def test_moe_experts_with_zero_points_generate_what_the_dense_model_generates(avx2, tp, form):
    """An AutoAWQ Qwen3-MoE checkpoint (random 4-bit experts with zero points): its experts go
    through the plugin's own MoE method on torch's int4 GEMM (vLLM's CPU build has no WNA16
    MoE backend without AMX)."""
    _check(avx2, f"moe/tp{tp}/dense", f"moe/tp{tp}/{form}")
    assert "Using AWQv2PortableMoEMethod (torch's int4 GEMM) for the experts" in avx2["log"]
