"""From file to tokens on vLLM's CPU build: the four real 4-bit checkpoints (written by
AutoAWQ and llm-compressor, asymmetric and symmetric), converted with ``convert SRC DST/``,
generate through ``quantization="awq_v2", load_format="awq_v2"`` exactly what vLLM's stock
path (``awq`` / ``compressed-tensors``) generates from the original checkpoint: the same 16
greedy tokens for both prompts and the same logprob of every one (difference 0), and the
kernels hold the same bytes (every parameter of the loaded model, compared by SHA-256).  A
size-split set of one of them is served the same.

All runs share one process (``generate.py``), so vLLM starts once; the whole module takes
about a minute on 2 cores."""

from __future__ import annotations

import pytest
from serving import REAL, needs_stock_4bit

pytestmark = needs_stock_4bit


def _max_logprob_difference(a: dict, b: dict) -> float:
    pairs = [(x, y) for pa, pb in zip(a["logprobs"], b["logprobs"], strict=True)
             for x, y in zip(pa, pb, strict=True)]  # fmt: skip
    return max(abs(x - y) for x, y in pairs)


@pytest.mark.parametrize("name", list(REAL))
def test_tokens_and_logprobs_equal_the_stock_path(runs, name):
    stock, ours = runs["results"][f"{name}/stock"], runs["results"][f"{name}/awq_v2"]
    diff = _max_logprob_difference(stock, ours) if stock["tokens"] == ours["tokens"] else None
    print(
        f"\n{name} ({REAL[name]}): path awq_v2 file, TP 1, tokens equal "
        f"{stock['tokens'] == ours['tokens']}, max logprob difference {diff}"
    )
    assert all(len(t) == 16 for t in stock["tokens"])
    assert ours["tokens"] == stock["tokens"]
    assert ours["logprobs"] == stock["logprobs"]  # exactly: difference 0


@pytest.mark.parametrize("name", list(REAL))
def test_the_kernels_hold_the_same_bytes(runs, name):
    stock = runs["results"][f"{name}/stock"]["tensors"]
    ours = runs["results"][f"{name}/awq_v2"]["tensors"]
    # compressed-tensors keeps weight_shape beside the kernel's tensors; no kernel reads it
    stock = {k: v for k, v in stock.items() if not k.endswith("/weight_shape")}
    quantised = [k for k in stock if k.endswith("/w_q")]
    assert len(quantised) == 2 * 4  # 2 layers x qkv, o, gate_up, down
    assert any(k.endswith("/isa_hint") for k in stock)
    different = sorted(k for k in stock.keys() | ours.keys() if stock.get(k) != ours.get(k))
    assert not different, [(k, stock.get(k), ours.get(k)) for k in different[:6]]


def test_symmetric_layers_get_vllms_symmetric_call(runs):
    """vLLM calls the kernel with uint4b8 and no zero points for a symmetric source: so does
    the plugin (no w_zp tensor is left in the layer)."""
    ours = runs["results"]["ct_w4a16_sym_g128/awq_v2"]["tensors"]
    asym = runs["results"]["autoawq_gemm_g128/awq_v2"]["tensors"]
    assert not [k for k in ours if k.endswith("/w_zp")]
    assert len([k for k in asym if k.endswith("/w_zp")]) == 8


def test_a_size_split_set_is_served(runs):
    members = sorted(p.name for p in runs["split"].glob("*.awq2"))
    assert len(members) > 1, members
    stock = runs["results"]["autoawq_gemm_g128/stock"]
    ours = runs["results"]["autoawq_gemm_g128/awq_v2 split"]
    print(
        f"\nsplit set of {len(members)} members: tokens equal {ours['tokens'] == stock['tokens']}"
    )
    assert ours["tokens"] == stock["tokens"] and ours["logprobs"] == stock["logprobs"]
    assert ours["tensors"] == runs["results"]["autoawq_gemm_g128/awq_v2"]["tensors"]


def test_the_cpu_kernel_is_the_one_vllm_chooses(runs):
    assert "Using CPUWNA16LinearKernel for AWQv2LinearMethod" in runs["log"]
    assert "awq2_vllm: TP rank 0/1 read" in runs["log"]
