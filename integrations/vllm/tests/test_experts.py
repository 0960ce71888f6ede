"""The plugin finds a MoE module's expert set in the file's layers, in either spelling, and
refuses, naming the module or layer, a set a fused engine tensor cannot be made of [LAY-12]."""

from __future__ import annotations

import pytest
from awq2_vllm.config import LayerFacts
from awq2_vllm.errors import PluginError
from awq2_vllm.moe import find_experts

GATE_UP = LayerFacts("MARLIN", 4, 128, 256, 512)
DOWN = LayerFacts("MARLIN", 4, 128, 512, 256)
MODULE = "model.layers.0.mlp.experts"


def _set(count: int, names=("gate_proj", "up_proj", "down_proj")) -> dict[str, LayerFacts]:
    facts = {}
    for e in range(count):
        for name, f in zip(names, (GATE_UP, GATE_UP, DOWN), strict=True):
            facts[f"{MODULE}.{e}.{name}"] = f
    return facts


@pytest.mark.parametrize("names", [("gate_proj", "up_proj", "down_proj"), ("w1", "w3", "w2")])
def test_an_expert_set_is_found_in_either_spelling(names):
    found = find_experts(MODULE, _set(4, names), 4)
    assert found.names == names and found.count == 4
    assert found.layer(3, 2) == f"{MODULE}.3.{names[2]}"


def test_a_missing_expert_is_refused_naming_it():
    facts = _set(4)
    del facts[f"{MODULE}.2.up_proj"]
    with pytest.raises(PluginError, match=r"EXPERT_MISSING.*experts\.2\.up_proj"):
        find_experts(MODULE, facts, 4)


def test_fewer_experts_than_the_module_has_are_refused():
    with pytest.raises(PluginError, match=r"EXPERT_MISSING.*experts\.4\.gate_proj"):
        find_experts(MODULE, _set(4), 8)


def test_no_expert_set_at_all_is_refused_naming_the_module():
    with pytest.raises(PluginError, match=rf"EXPERT_MISSING.*{MODULE}"):
        find_experts(MODULE, {}, 4)


def test_experts_of_one_role_that_differ_are_refused():
    facts = _set(4)
    facts[f"{MODULE}.1.down_proj"] = LayerFacts("MARLIN", 4, 64, 512, 256)
    with pytest.raises(PluginError, match=r"EXPERTS_MIXED.*experts\.1\.down_proj"):
        find_experts(MODULE, facts, 4)
