"""Mixture-of-experts expert sets [LAY-12]: every expert's gate, up and down projections stored
as ordinary layers, ``<experts>.<e>.<role>``, and cut for tensor parallelism as a dense MLP
is (gate and up ``column``, down ``row``), rank ``r`` holding the ``r``-th piece of every
expert under the same names [SET-11].

The expectations never come from the code under test's own cut: the rank-set vector's pieces
were cut by the generator from the drawn codes, zero points and scales, and are compared with
the reference's shard of the whole stored layer (:func:`reference.format.layers.shard`); a
``--tp 2`` conversion of the two tiny MoE checkpoints of real quantisers is compared, layer by
layer, with the shard of the same checkpoint converted to a single file.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import reference
from reference.convert import main as convert
from reference.format.layers import LinearLayer, Parallel, encode_linear, shard
from reference.ground.errors import FormatError
from reference.sets.tpsplit import layer_of, plan_for
from tools.vectors.sets import MOE_COUNT, MOE_EXPERTS, whole_experts

ROOT = Path(__file__).resolve().parent.parent
VECTOR = ROOT / "conformance" / "vectors" / "y_set_rank_moe_experts"
BREADTH = ROOT / "tests" / "fixtures" / "breadth"
#: The copied files of a breadth checkpoint (its recipe is not the model's).
CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors")
#: ``<experts>.<e>.<role>`` with its parts [LAY-12]; the role decides the cut.
EXPERT = re.compile(r"(?P<experts>.+\.experts)\.(?P<e>0|[1-9][0-9]*)\.(?P<role>\w+)")
PARALLEL: dict[str, Parallel] = {"gate_proj": "column", "up_proj": "column", "w1": "column",
                                 "w3": "column", "down_proj": "row", "w2": "row"}  # fmt: skip
ARRAYS = ("qweight", "scales", "qzeros")


def _copy(layer: LinearLayer) -> LinearLayer:
    """The layer with its arrays copied out of the file's map (usable once it is closed)."""
    return LinearLayer(layer.prefix, layer.layout, np.array(layer.qweight),
                       np.array(layer.scales), np.array(layer.qzeros),
                       None if layer.bias is None else np.array(layer.bias), layer.k, layer.n,
                       layer.bits, layer.group_size, layer.scale_dtype)  # fmt: skip


def _assert_same(got: LinearLayer, want: LinearLayer, what: str) -> None:
    """Same layout, k, n, bits, group size and bytes; names the first differing word."""
    fields = ("layout", "k", "n", "bits", "group_size", "scale_dtype")
    assert [getattr(got, f) for f in fields] == [getattr(want, f) for f in fields], what
    for part in ARRAYS:
        a = np.ascontiguousarray(getattr(got, part))
        b = np.ascontiguousarray(getattr(want, part))
        assert a.shape == b.shape, f"{what}: {part} of shape {a.shape}, expected {b.shape}"
        differ = np.flatnonzero(a.view(np.uint8) != b.view(np.uint8))
        assert differ.size == 0, f"{what}: {part} differs first at byte {differ[0]}"
    assert (got.bias is None) == (want.bias is None), what


# ------------------------------------------------------------------------ the rank-set vector


def test_the_rank_set_vectors_pieces_are_the_references_shards_of_each_expert() -> None:
    """[LAY-12, SET-11] y_set_rank_moe_experts: rank r's w1 and w3 are the column shards, and
    its w2 the row shard, that ``reference.format.layers.shard`` cuts from each whole expert
    stored by the writer; every expert of every role is there, under its own name."""
    whole = whole_experts()
    assert len(whole) == 3 * MOE_COUNT
    for drawn in whole:
        _, stored = encode_linear(drawn.prefix, bits=drawn.bits, group_size=drawn.group_size,
                                  q=drawn.q, z=drawn.z, scales=drawn.s)  # fmt: skip
        layer = layer_of(stored)
        assert layer.layout == "MARLIN"
        match = EXPERT.fullmatch(drawn.prefix)
        assert match is not None and match["experts"] == MOE_EXPERTS
        parallel = PARALLEL[match["role"]]
        for rank in range(2):
            with reference.open(VECTOR, rank=rank) as f:
                got = _copy(f.linear(drawn.prefix))
            want = shard(layer, tp_rank=rank, tp_size=2, parallel=parallel)
            _assert_same(got, want, f"{drawn.prefix}, rank {rank}")


def test_the_rule_tables_cut_each_expert_as_a_dense_mlp() -> None:
    """[LAY-12] The converter's tables give every expert of Mixtral (both spellings) and
    Qwen3-MoE gate and up ``column``, down ``row``; a name whose index has a leading zero is
    no expert, so no rule names it (``TP_NO_RULE``)."""
    families = {
        "MixtralForCausalLM": ("model.layers.3.block_sparse_moe.experts",
                               ("gate_proj", "up_proj", "down_proj", "w1", "w3", "w2")),
        "Qwen3MoeForCausalLM": ("model.layers.3.mlp.experts",
                                ("gate_proj", "up_proj", "down_proj")),
    }  # fmt: skip
    for architecture, (experts, roles) in families.items():
        plan = plan_for({"architectures": [architecture]}, 2)
        for e in (0, 7, 10, 127):
            for role in roles:
                assert plan.kind(f"{experts}.{e}.{role}") == PARALLEL[role], (experts, e, role)
        for bad in ("01", "00", "x", ""):
            module = f"{experts}.{bad}.{roles[0]}"
            assert plan.kind(module) is None, module
            with pytest.raises(FormatError) as err:
                plan.check_layer(module, family="MARLIN", k=256, n=256, bits=4, group_size=128)
            assert err.value.code == "TP_NO_RULE"


# -------------------------------------------------------------- awq2-convert --tp 2 of real MoE


@pytest.fixture(scope="module", params=["qwen3_moe", "mixtral"])
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> (
    tuple[Path, Path]
):  # fmt: skip
    """The breadth checkpoint converted to a single file and to a rank set for 2 ranks, as
    ``awq2-convert SRC DST/ [--tp 2] --quiet`` writes them."""
    tmp = tmp_path_factory.mktemp(request.param)
    src = tmp / "src"
    src.mkdir()
    for name in CHECKPOINT_FILES:
        shutil.copyfile(BREADTH / request.param / name, src / name)
    single, ranks = tmp / "single", tmp / "tp2"
    assert convert([str(src), f"{single}/", "--quiet"]) == 0
    assert convert([str(src), f"{ranks}/", "--tp", "2", "--quiet"]) == 0
    return single / "model.awq2", ranks


def test_convert_tp2_cuts_every_expert_of_a_real_moe_checkpoint(
    converted: tuple[Path, Path],
) -> None:
    """[LAY-12, SET-11] Every expert's gate and up are stored column-cut and its down row-cut
    on each rank of ``--tp 2``: byte for byte the reference's shard of the layer in the
    single-file conversion, under the same name; the expert set is whole (experts 0 .. E-1,
    each with its three roles)."""
    single, ranks = converted
    with reference.open(single) as f:
        experts = [p for p in f.layers() if EXPERT.fullmatch(p)]
        whole = {p: _copy(f.linear(p)) for p in experts}
    modules: dict[str, set[tuple[int, str]]] = {}
    for prefix in experts:
        match = EXPERT.fullmatch(prefix)
        assert match is not None
        modules.setdefault(match["experts"], set()).add((int(match["e"]), match["role"]))
    assert modules, "no expert layers in the conversion"
    for module, found in modules.items():
        count = max(e for e, _ in found) + 1
        roles = {role for _, role in found}
        assert len(roles) == 3 and found == {(e, r) for e in range(count) for r in roles}, module
    for rank in range(2):
        with reference.open(ranks, rank=rank) as f:
            assert sorted(p for p in f.layers() if EXPERT.fullmatch(p)) == sorted(experts)
            for prefix in experts:
                match = EXPERT.fullmatch(prefix)
                assert match is not None
                parallel = PARALLEL[match["role"]]
                want = shard(whole[prefix], tp_rank=rank, tp_size=2, parallel=parallel)
                _assert_same(_copy(f.linear(prefix)), want, f"{prefix}, rank {rank}")
