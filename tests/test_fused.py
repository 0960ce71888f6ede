"""Fused stored layers [LAY-11]: a checkpoint that stores a merged module as one layer (Phi-3's
``qkv_proj`` ``[q | k | v]`` and ``gate_up_proj`` ``[gate | up]``) converts, and ``convert
--tp`` stores in rank ``r`` each part's shard side by side, ``[q_r | k_r | v_r]``.

The fused checkpoint is the example Llama with its q/k/v and gate/up layers joined along the
output features, AutoAWQ word by AutoAWQ word (a part's ``n`` is a multiple of 8, so its packed
words are whole), under Phi-3's architecture.  So every expectation comes from the unfused
example converted the same way, never from the code under test: rank ``r``'s fused layer must
be, byte for byte, rank ``r``'s q, k and v layers (or gate and up) side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import reference
from reference.convert import convert_folder
from reference.examples import LlamaShape, write_checkpoint
from reference.format.layers import LinearLayer, columns, side_by_side
from reference.ground.errors import FormatError
from reference.quant.codec import CodecError
from reference.sets.tpsplit import plan_for
from spec.constants import SET_MANIFEST

#: T = 4 over 2 key/value heads: each kv head whole on two ranks [SET-12].
WIDE = LlamaShape(hidden_size=512, intermediate_size=1024, num_attention_heads=8,
                  num_key_value_heads=2, attention_bias=True)  # fmt: skip
FUSED = {"self_attn.qkv_proj": ("q_proj", "k_proj", "v_proj"),
         "mlp.gate_up_proj": ("gate_proj", "up_proj")}  # fmt: skip


def fuse(src: Path, out: Path) -> Path:
    """``src`` (an example checkpoint) with its merged modules stored fused, as Phi-3's are."""
    tensors = load_file(str(src / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    fused: dict[str, np.ndarray] = {}
    for name, array in tensors.items():
        module, _, part = name.rpartition(".")  # model.layers.0.self_attn.q_proj, qweight
        block, _, proj = module.rpartition(".")  # model.layers.0.self_attn, q_proj
        layer, _, block_name = block.rpartition(".")
        owner = next((f for f, parts in FUSED.items()
                      if f.startswith(f"{block_name}.") and proj in parts), None)  # fmt: skip
        if owner is None:
            fused[name] = array
        elif proj == FUSED[owner][0]:
            members = [tensors[f"{block}.{p}.{part}"] for p in FUSED[owner]]
            fused[f"{layer}.{owner}.{part}"] = np.concatenate(members, axis=-1)
    out.mkdir()
    save_file(fused, str(out / "model.safetensors"), metadata={"format": "pt"})
    config.update(architectures=["Phi3ForCausalLM"], model_type="phi3")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def _layer(path: Path, prefix: str, rank: int | None = None) -> LinearLayer:
    kw = {} if rank is None else {"rank": rank}
    with reference.open(path, **kw) as f:
        layer = f.linear(prefix)
        return LinearLayer(layer.prefix, layer.layout, np.array(layer.qweight),
                           np.array(layer.scales), np.array(layer.qzeros),
                           None if layer.bias is None else np.array(layer.bias), layer.k,
                           layer.n, layer.bits, layer.group_size, layer.scale_dtype)  # fmt: skip


def _same(a: LinearLayer, b: LinearLayer) -> bool:
    arrays = ("qweight", "scales", "qzeros", "bias")
    return (a.k, a.n, a.layout) == (b.k, b.n, b.layout) and all(
        (getattr(a, x) is None and getattr(b, x) is None)
        or np.asarray(getattr(a, x)).tobytes() == np.asarray(getattr(b, x)).tobytes()
        for x in arrays
    )


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("fused")
    plain = write_checkpoint(tmp / "plain", WIDE)
    fused = fuse(plain, tmp / "fused")
    out = {}
    for name, src in (("plain", plain), ("fused", fused)):
        for layout, options in (("file", {}), ("tp2", {"tp_size": 2}), ("tp4", {"tp_size": 4})):
            out[f"{name}-{layout}"] = tmp / f"{name}-{layout}"
            convert_folder(src, out[f"{name}-{layout}"], jobs=2, **options)
    return out


def test_a_fused_layer_is_stored_as_the_checkpoint_has_it(models: dict[str, Path]) -> None:
    """[LAY-11] Converted, the fused layer is the parts' Marlin layers side by side, and
    ``columns`` gives each part back."""
    prefix = "model.layers.1"
    for owner, parts in FUSED.items():
        block = owner.split(".")[0]
        whole = _layer(models["fused-file"] / "model.awq2", f"{prefix}.{owner}")
        plain = [_layer(models["plain-file"] / "model.awq2", f"{prefix}.{block}.{p}")
                 for p in parts]  # fmt: skip
        assert _same(whole, side_by_side(plain))
        at = 0
        for part in plain:
            assert _same(columns(whole, at, at + part.n), part)
            at += part.n


@pytest.mark.parametrize("tp", [2, 4])
def test_each_rank_stores_its_share_of_every_part_side_by_side(
    models: dict[str, Path], tp: int
) -> None:
    """[LAY-11, SET-11, SET-12] rank r's fused layer is rank r's q, k, v (kv heads replicated
    at T = 4) or gate, up shards of the unfused conversion, side by side; every other tensor
    is the same bytes."""
    fused_set, plain_set = models[f"fused-tp{tp}"], models[f"plain-tp{tp}"]
    checked = 0
    for rank in range(tp):
        for i in range(WIDE.num_hidden_layers):
            for owner, parts in FUSED.items():
                block = owner.split(".")[0]
                got = _layer(fused_set, f"model.layers.{i}.{owner}", rank)
                want = side_by_side([_layer(plain_set, f"model.layers.{i}.{block}.{p}", rank)
                                     for p in parts])  # fmt: skip
                assert _same(got, want), (rank, i, owner)
                checked += 1
        with reference.open(fused_set, rank=rank) as f, reference.open(plain_set, rank=rank) as g:
            for name in ("model.embed_tokens.weight", "lm_head.weight",
                         "model.layers.0.self_attn.o_proj.qweight"):  # fmt: skip
                assert f.tensor(name).tobytes() == g.tensor(name).tobytes()
    assert checked == tp * WIDE.num_hidden_layers * len(FUSED)


def test_a_fused_rank_set_reshards_to_what_a_direct_conversion_writes(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """The inverse of the fused cut: the T = 4 set (replicated kv heads) joined into one file,
    and re-cut to T = 2, byte-identical to converting the fused checkpoint directly."""
    back = tmp_path / "back"
    convert_folder(models["fused-tp4"], back, jobs=2)
    assert (back / "model.awq2").read_bytes() == (models["fused-file"] / "model.awq2").read_bytes()
    recut = tmp_path / "recut"
    convert_folder(models["fused-tp4"], recut, jobs=2, tp_size=2)
    names = sorted(p.name for p in recut.iterdir())
    assert names == sorted(p.name for p in models["fused-tp2"].iterdir())
    assert SET_MANIFEST in names
    for name in names:
        assert (recut / name).read_bytes() == (models["fused-tp2"] / name).read_bytes(), name


def test_a_fused_part_that_is_not_whole_tiles_is_refused() -> None:
    """[LAY-11] 2 key/value heads of 32 columns each, cut over 4 ranks, would need pieces of
    32 columns, half a Marlin tile: refused, naming the layer and the part's columns (convert
    checks every step's cuts before it writes anything)."""
    config = {"architectures": ["Phi3ForCausalLM"], "hidden_size": 256,
              "num_attention_heads": 8, "num_key_value_heads": 2}  # fmt: skip
    split = plan_for(config, 4)
    layer = "model.layers.0.self_attn.qkv_proj"
    with pytest.raises(FormatError) as err:
        split.check_layer(layer, family="MARLIN", k=256, n=384, bits=4, group_size=128)
    assert err.value.code == "TP_BAD_SHARD"
    assert layer in str(err.value) and "columns 256..320" in str(err.value)
    # heads of 64 columns (hidden 512) cut over the same 4 ranks: whole tiles, accepted
    wide = plan_for({**config, "hidden_size": 512}, 4)
    cuts = wide.check_layer(layer, family="MARLIN", k=512, n=768, bits=4, group_size=128)
    assert [[(p.index, p.count) for p in c.pieces] for c in cuts] == [
        [(r, 4), (r // 2, 2), (r // 2, 2)] for r in range(4)]  # fmt: skip


def test_columns_off_the_tile_grid_are_refused(models: dict[str, Path]) -> None:
    whole = _layer(models["fused-file"] / "model.awq2", "model.layers.0.self_attn.qkv_proj")
    with pytest.raises(CodecError):
        columns(whole, 32, 96)
