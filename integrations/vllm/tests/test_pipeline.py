"""Pipeline parallelism: a stage reads the tensors of the modules it builds and no others
(``awq2_vllm.loader.built``; vLLM marks the modules of other stages with ``PPMissingLayer``)."""

from __future__ import annotations

import torch


def _stage():
    from vllm.model_executor.models.utils import PPMissingLayer

    model = torch.nn.Module()
    model.model = torch.nn.Module()
    model.model.embed_tokens = torch.nn.Embedding(8, 4)
    model.model.layers = torch.nn.ModuleList([torch.nn.Module(), PPMissingLayer()])
    model.model.layers[0].self_attn = torch.nn.Module()
    model.model.norm = PPMissingLayer()
    model.lm_head = PPMissingLayer()
    return model


def test_a_stage_reads_only_what_it_builds():
    from awq2_vllm.loader import built

    model = _stage()
    assert built(model, "model.embed_tokens.weight")
    assert built(model, "model.layers.0.input_layernorm.weight")
    # a stored part vLLM merges (q_proj inside qkv_proj): no module of that name, built
    assert built(model, "model.layers.0.self_attn.q_proj.qweight")
    assert not built(model, "model.layers.1.self_attn.q_proj.qweight")
    assert not built(model, "model.layers.1.input_layernorm.weight")
    assert not built(model, "model.norm.weight")
    assert not built(model, "lm_head.weight")
