"""MoE checkpoints beyond the breadth matrix's symmetric ones [LAY-12]: AutoAWQ MoE
checkpoints (zero points) are served as vLLM serves them, through vLLM's AutoAWQ MoE method,
with the same tokens and logprobs from a file and a rank set at TP 1 and 2; a compressed-tensors
MoE checkpoint with zero points, which vLLM's CPU build does not serve (its compressed-tensors
MoE method finds no backend), is served through the same AutoAWQ method."""

from __future__ import annotations

import json
import shutil

import pytest
from checkpoints import awq_moe
from serving import CHECKOUT, convert, generate, needs_amx

pytestmark = needs_amx
BREADTH = CHECKOUT / "tests" / "fixtures" / "breadth"
MOE = ("mixtral", "qwen3_moe")


@pytest.fixture(scope="module")
def autoawq_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("awq-moe")
    jobs: dict[int, list[dict]] = {1: [], 2: []}
    for fixture in MOE:
        src = awq_moe(BREADTH / fixture, tmp / "src" / fixture)
        forms = {"file": convert(src, tmp / fixture / "file")}
        for tp in (1, 2):
            forms[f"rank set {tp}"] = convert(src, tmp / fixture / f"tp{tp}", "--tp", str(tp))
        for tp in (1, 2):
            common = {"tp": tp, "ignore_eos": True, "record_errors": True}
            jobs[tp].append({"name": f"{fixture}/{tp}/stock", "model": str(src),
                             "quantization": None, **common})  # fmt: skip
            for form in ("file", f"rank set {tp}"):
                jobs[tp].append({"name": f"{fixture}/{tp}/{form}", "model": str(forms[form]),
                                 "quantization": "awq_v2", **common})  # fmt: skip
    results = {}
    for tp in (1, 2):
        env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"} if tp > 1 else {}
        run_dir = tmp / f"run{tp}"
        run_dir.mkdir()
        results.update(generate(jobs[tp], run_dir, env, timeout=1800)["results"])
    return results


@pytest.mark.parametrize("fixture", MOE)
@pytest.mark.parametrize("tp", [1, 2])
def test_autoawq_moe_is_served_with_stocks_tokens_and_logprobs(autoawq_runs, fixture, tp):
    stock = autoawq_runs[f"{fixture}/{tp}/stock"]
    assert "error" not in stock, stock.get("error", "")[-2000:]
    for form in ("file", f"rank set {tp}"):
        ours = autoawq_runs[f"{fixture}/{tp}/{form}"]
        assert "error" not in ours, ours.get("error", "")[-2000:]
        print(f"{fixture} TP {tp} {form}: tokens {ours['tokens'][0][:8]}...")
        assert ours["tokens"] == stock["tokens"] and len(ours["tokens"][0]) == 16
        assert ours["logprobs"] == stock["logprobs"]
        if tp == 1:  # what the kernels hold: every parameter's bytes
            assert ours["tensors"] == stock["tensors"]


def _asymmetric_ct_moe(fixture, out):
    """The symmetric MoE fixture made asymmetric as compressed-tensors writes it: ``symmetric:
    false`` and a ``weight_zero_point`` (``int32 [n // 8, G]``, packed along n) beside every
    packed weight, every zero point 8 but one of expert 0's gate."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    out.mkdir(parents=True)
    shutil.copy(fixture / "generation_config.json", out / "generation_config.json")
    config = json.loads((fixture / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = False
    (out / "config.json").write_text(json.dumps(config))
    tensors = load_file(str(fixture / "model.safetensors"))
    for name in [k for k in tensors if k.endswith(".weight_packed")]:
        prefix = name.removesuffix(".weight_packed")
        n, groups = tensors[f"{prefix}.weight_scale"].shape
        zeros = np.full((n // 8, groups), 0x88888888, dtype=np.uint32)
        if prefix.endswith("layers.0.mlp.experts.0.gate_proj"):
            zeros[0, 0] = 0x88888887
        tensors[f"{prefix}.weight_zero_point"] = zeros.view(np.int32)
    save_file(tensors, str(out / "model.safetensors"))
    return out


def test_compressed_tensors_moe_with_zero_points_is_served_where_stock_fails(tmp_path):
    """vLLM's CPU build has no WNA16 MoE backend for compressed-tensors experts with zero
    points (``CPUExpertsInt4`` takes the symmetric ``kInt4Static``: its compressed-tensors
    method asks with ``symmetric=False``); its AutoAWQ method serves the same quantiser
    (``(q - z) * s``), and the plugin uses it.  Stock cannot be compared here: the check is
    that it is served, and that one zero point off by one from the symmetric fixture moves
    no greedy token of it."""
    src = _asymmetric_ct_moe(BREADTH / "qwen3_moe", tmp_path / "src")
    served = convert(src, tmp_path / "served")
    jobs = [{"name": "stock", "model": str(src), "quantization": None, "record_errors": True},
            {"name": "symmetric", "model": str(BREADTH / "qwen3_moe"), "quantization": None},
            {"name": "awq_v2", "model": str(served), "quantization": "awq_v2",
             "record_errors": True}]  # fmt: skip
    results = generate(jobs, tmp_path)["results"]
    assert "No WNA16 MoE backend" in results["stock"].get("error", ""), results["stock"]
    assert "error" not in results["awq_v2"], results["awq_v2"]["error"][-2000:]
    assert results["awq_v2"]["tokens"] == results["symmetric"]["tokens"]
