"""The seed's fallback: an AWQ v1 (AutoAWQ GEMM) or compressed-tensors W4A16 checkpoint, not
converted, served with ``quantization="awq_v2", load_format="awq_v2"``.  The plugin claims it
(``AWQv2Config.override_quantization_method``), reads it through the reference reader and
repacks each layer to the Marlin layout as it loads; the four real checkpoints then generate
what vLLM's stock path generates from them (tokens, and every logprob exactly) and the kernels
hold the same bytes as from the converted folder.  One log line says what was repacked and
names the ``awq2-convert`` command that avoids it.  Left without ``load_format``, vLLM's own
loader would put the AWQ tensors into Marlin-shaped parameters: refused, with the flag to add.

The runs are ``serving.make_runs``' (one vLLM process with ``test_generate.py``'s)."""

from __future__ import annotations

import pytest
from serving import REAL, needs_stock_4bit

from reference.sources.legacy import open_checkpoint

pytestmark = needs_stock_4bit


@pytest.mark.parametrize("name", list(REAL))
def test_the_checkpoint_itself_generates_the_stock_tokens(runs, name):
    stock, ours = runs["results"][f"{name}/stock"], runs["results"][f"{name}/fallback"]
    print(f"\nfallback {name} ({REAL[name]}): tokens {ours['tokens'][0]} "
          f"(stock {stock['tokens'][0]}), equal {ours['tokens'] == stock['tokens']}, "
          f"logprobs equal {ours['logprobs'] == stock['logprobs']}")  # fmt: skip
    assert all(len(t) == 16 for t in stock["tokens"])
    assert ours["tokens"] == stock["tokens"]
    assert ours["logprobs"] == stock["logprobs"]  # exactly


@pytest.mark.parametrize("name", list(REAL))
def test_the_kernels_hold_what_the_converted_folder_gives(runs, name):
    ours = runs["results"][f"{name}/fallback"]["tensors"]
    converted = runs["results"][f"{name}/awq_v2"]["tensors"]
    different = sorted(k for k in ours.keys() | converted.keys()
                       if ours.get(k) != converted.get(k))  # fmt: skip
    assert not different, different[:6]


@pytest.mark.parametrize("name", list(REAL))
def test_one_line_says_it_repacked_and_how_to_avoid_it(runs, name):
    src = runs["results"][f"{name}/fallback"]["model"]
    lines = [x for x in runs["log"].splitlines()
             if "were repacked to the Marlin layout" in x and f"{src} is" in x]  # fmt: skip
    assert len(lines) == 1, lines
    what = "an AWQ v1 checkpoint" if name.startswith("autoawq") else "a compressed-tensors"
    assert what in lines[0], lines[0]
    layers = len(open_checkpoint(src).layers())
    assert f"its {layers} quantised layers were repacked" in lines[0], lines[0]
    assert f"`awq2-convert {src} {src}-awq2`" in lines[0], lines[0]
    print(f"\n{lines[0].split('awq2_vllm: ', 1)[1]}")


def test_the_fallback_needs_its_load_format(runs):
    refused = runs["results"]["autoawq_gemm_g128/fallback, vLLM's loader"]
    assert "error" in refused, refused
    assert "[LOAD_FORMAT_REQUIRED]" in refused["error"], refused["error"]
    assert "--load-format awq_v2" in refused["error"], refused["error"]
