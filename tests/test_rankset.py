"""Rank sets written by ``convert --tp T`` (SET-7, SET-11, SET-12; docs/spec/sets.md), and read
with a rank or without one (SET-13, SET-14).

The expected value of every rank's tensor is cut here from the single-file conversion of the
same checkpoint, with the cut the rules state, written out per module in :func:`expected_cut`
(not taken from reference.sets.tpsplit): column and row modules ``(r, T)``, query heads ``(r, T)``,
key/value heads ``(r // (T / kv), kv)`` when there are fewer of them than ranks, vocabulary
rows padded with zeros to a multiple of 64, everything else whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference
from reference.convert import convert_folder
from reference.convert import main as convert_main
from reference.examples import LlamaShape, write_checkpoint
from reference.format.layers import dequantize_layer
from reference.ground.errors import FormatError
from reference.sets.fileset import FileSet
from reference.sets.setmanifest import rank_record
from reference.sets.tpsplit import plan_for
from spec.constants import ALIGNMENT, SET_MANIFEST

CC = shlex.split(os.environ.get("CC") or "cc")

#: T = 4 with 8 query heads and 2 key/value heads of 64: each KV head on two ranks; a
#: vocabulary of 1000 rows, padded to 1024.  Every shard passes Marlin's shape rules.
WIDE = LlamaShape(hidden_size=512, intermediate_size=1024, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000, attention_bias=True)  # fmt: skip


def expected_cut(module: str, t: int, shape: LlamaShape) -> list[tuple[str | None, int, int]]:
    """(parallel, index, count) of each rank, from SET-11 and SET-12."""
    last = module.rsplit(".", 1)[-1]
    kv = shape.num_key_value_heads
    if last in ("q_proj", "gate_proj", "up_proj"):
        return [("column", r, t) for r in range(t)]
    if last in ("k_proj", "v_proj"):
        if kv % t == 0:
            return [("column", r, t) for r in range(t)]
        return [("column", r // (t // kv), kv) for r in range(t)]
    if last in ("o_proj", "down_proj"):
        return [("row", r, t) for r in range(t)]
    return [(None, 0, 1)] * t


def _source(tmp: Path, shape: LlamaShape) -> Path:
    return write_checkpoint(tmp / "src", shape)


@pytest.fixture(scope="module", params=[(2, LlamaShape()), (4, WIDE)], ids=["tp2", "tp4"])
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    t, shape = request.param
    tmp = tmp_path_factory.mktemp(f"tp{t}")
    src = _source(tmp, shape)
    convert_folder(src, tmp / "single", jobs=1)
    convert_folder(src, tmp / "ranks", jobs=2, tp_size=t)
    return t, shape, tmp / "single", tmp / "ranks"


def test_every_layer_of_every_rank_is_the_single_files_shard(converted: Any) -> None:
    """[SET-7, SET-11, SET-12]: each rank's layer equals the shard cut from the single file."""
    t, shape, single, ranks = converted
    with reference.open(single) as one, reference.open(ranks) as many:
        assert isinstance(many, FileSet) and many.kind == "rank" and many.tp_size == t
        layers = one.layers()
        assert len(layers) == 7 * shape.num_hidden_layers
        for prefix in layers:
            for r, (parallel, index, count) in enumerate(expected_cut(prefix, t, shape)):
                want = one.linear(prefix, tp_rank=index, tp_size=count, parallel=parallel)
                got = many.linear(prefix, tp_rank=r)
                assert (got.tp_rank, got.tp_size) == (r, t)
                assert (got.layout, got.k, got.n) == (want.layout, want.k, want.n), prefix
                for part in ("qweight", "scales", "qzeros"):
                    a, b = getattr(got, part), getattr(want, part)
                    assert a.dtype == b.dtype and np.array_equal(a, b), (prefix, r, part)
                if want.bias is None:
                    assert got.bias is None
                else:
                    assert np.array_equal(got.bias, want.bias), (prefix, r, "bias")


def test_dense_tensors_are_cut_as_the_engine_holds_them(converted: Any) -> None:
    """[SET-11]: vocabulary tables padded to a multiple of 64 rows and cut by rows; norms
    whole on every rank."""
    t, shape, single, ranks = converted
    padded = -(-shape.vocab_size // 64) * 64
    rows = padded // t
    with reference.open(single) as one, reference.open(ranks) as many:
        for name in ("model.embed_tokens.weight", "lm_head.weight"):
            table = one.tensor(name)
            full = np.zeros((padded, table.shape[1]), table.dtype)
            full[: table.shape[0]] = table
            for r in range(t):
                got = many.tensor(name, rank=r)
                assert got.shape == (rows, shape.hidden_size)
                assert np.array_equal(got, full[r * rows : (r + 1) * rows]), (name, r)
        for name in ("model.norm.weight", "model.layers.0.input_layernorm.weight"):
            for r in range(t):
                assert np.array_equal(many.tensor(name, rank=r), one.tensor(name))


def test_every_payload_of_every_rank_is_aligned(converted: Any) -> None:
    """The reason for rank sets: each rank's payloads start on 64 KiB boundaries."""
    t, _shape, _single, ranks = converted
    with reference.open(ranks) as many:
        for r in range(t):
            for info in many.entries(rank=r):
                assert info.offset % ALIGNMENT == 0, (r, info.name, info.offset)


def test_rank_set_validates_verifies_and_records_its_split(converted: Any) -> None:
    """[SET-8, SET-11]: the whole set passes full validation and verification; the manifest
    lists one file per rank; every member's metadata records the same split."""
    t, shape, _single, ranks = converted
    with reference.open(ranks, validate=True) as many:
        many.verify()
        split = [m.metadata["tensor_parallel"] for m in many.members]
    assert all(s == split[0] for s in split)
    assert split[0]["tp_size"] == t and split[0]["rule_family"] == "llama"
    assert split[0]["num_key_value_heads"] == shape.num_key_value_heads
    manifest = json.loads((ranks / SET_MANIFEST).read_text(encoding="utf-8"))
    assert manifest["kind"] == "rank" and manifest["tp_size"] == t
    assert [f["rank"] for f in manifest["files"]] == list(range(t))
    config = json.loads((ranks / "config.json").read_text(encoding="utf-8"))
    assert config["quantization_config"]["quant_method"] == "awq_v2"


def test_rank_set_bytes_do_not_depend_on_jobs(tmp_path: Path) -> None:
    """[CONV-3]: the members are byte-identical whatever the number of threads."""
    src = _source(tmp_path, LlamaShape())
    convert_folder(src, tmp_path / "a", jobs=1, tp_size=2)
    convert_folder(src, tmp_path / "b", jobs=3, tp_size=2)
    for name in ("model-tp2-rank0.awq2", "model-tp2-rank1.awq2", SET_MANIFEST):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_user_rules_come_first(tmp_path: Path) -> None:
    """[SET-11]: a rule given with --tp-rules overrides the table: here down_proj whole."""
    src = _source(tmp_path, LlamaShape())
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([[r".+\.mlp\.down_proj", "replicated"]]), encoding="utf-8")
    assert convert_main([str(src), str(tmp_path / "out") + "/", "--tp", "2", "--tp-rules",
                         str(rules), "--quiet"]) == 0  # fmt: skip
    convert_folder(src, tmp_path / "single", jobs=1)
    with reference.open(tmp_path / "single") as one, reference.open(tmp_path / "out") as many:
        prefix = "model.layers.1.mlp.down_proj"
        for r in range(2):
            assert np.array_equal(many.linear(prefix, tp_rank=r).qweight,
                                  one.linear(prefix).qweight)  # fmt: skip
        assert many.members[0].metadata["tensor_parallel"]["rules"][0] == [
            r".+\.mlp\.down_proj",
            "replicated",
        ]


# ------------------------------------------------------------------------------- refusals


def _refused(tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    dst = tmp_path / "out"
    assert convert_main([*argv[:1], str(dst) + "/", *argv[1:]]) == 1
    assert not dst.exists()  # nothing published
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    return capsys.readouterr().err


def test_a_shard_that_breaks_marlin_is_refused_with_the_layer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[SET-11]: at T = 4 the default example's o_proj shard would have k = 64."""
    src = _source(tmp_path / "s", LlamaShape())
    err = _refused(tmp_path, [str(src), "--tp", "4"], capsys)
    assert "[TP_BAD_SHARD]" in err and "model.layers.0.self_attn.o_proj" in err
    assert convert_main([str(src), "--dry-run", "--tp", "4"]) == 1  # refused by the plan too


def test_heads_that_do_not_split_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[SET-12]: 12 query heads split over 3 ranks, but 2 KV heads do not: neither of 2 and
    3 divides the other.  (576 vocabulary rows split over 3 ranks too.)"""
    src = _source(tmp_path / "s", LlamaShape(hidden_size=768, num_attention_heads=12,
                                             num_key_value_heads=2, vocab_size=576,
                                             intermediate_size=768))  # fmt: skip
    err = _refused(tmp_path, [str(src), "--tp", "3"], capsys)
    assert "[TP_BAD_SHARD]" in err and "k_proj" in err and "2 heads" in err


def test_an_unnamed_quantised_layer_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[SET-11]: an architecture without a table needs rules; a layer they miss: TP_NO_RULE."""
    src = _source(tmp_path / "s", LlamaShape())
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = ["SomethingNewForCausalLM"]
    (src / "config.json").write_text(json.dumps(config), encoding="utf-8")
    err = _refused(tmp_path, [str(src), "--tp", "2"], capsys)
    assert "[TP_BAD_CONFIG]" in err and "SomethingNewForCausalLM" in err
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([[r".+\.self_attn\.[qkvo]_proj", "column"]]), encoding="utf-8")
    err = _refused(tmp_path, [str(src), "--tp", "2", "--tp-rules", str(rules)], capsys)
    assert "[TP_NO_RULE]" in err and "mlp" in err


def test_heads_that_do_not_match_the_layer_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[SET-11]: config.json's head counts must describe the layer they cut."""
    src = _source(tmp_path / "s", LlamaShape())
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    config["head_dim"] = 32
    (src / "config.json").write_text(json.dumps(config), encoding="utf-8")
    err = _refused(tmp_path, [str(src), "--tp", "2"], capsys)
    assert "[TP_BAD_CONFIG]" in err and "k_proj" in err and "heads of 32" in err


@pytest.mark.parametrize(
    "extra",
    [
        ["--tp", "0"],
        ["--tp-rules", "rules.json"],
        ["--tp", "2", "--tp-rules", "missing.json"],
    ],
)
def test_usage_errors(tmp_path: Path, extra: list[str]) -> None:
    src = _source(tmp_path, LlamaShape())
    extra = [str(tmp_path / e) if e.endswith(".json") else e for e in extra]
    with pytest.raises(SystemExit) as exit_info:
        convert_main([str(src), str(tmp_path / "out") + "/", *extra])
    assert exit_info.value.code == 2
    assert not (tmp_path / "out").exists()


def test_a_file_destination_is_a_usage_error(tmp_path: Path) -> None:
    src = _source(tmp_path, LlamaShape())
    with pytest.raises(SystemExit) as exit_info:
        convert_main([str(src), str(tmp_path / "x.awq2"), "--tp", "2"])
    assert exit_info.value.code == 2


def test_bad_rules_files_are_usage_errors(tmp_path: Path) -> None:
    src = _source(tmp_path, LlamaShape())
    for text in ('{"rules": 3}', '[["(", "column"]]', '[["x", "diagonal"]]', "not json"):
        (tmp_path / "rules.json").write_text(text, encoding="utf-8")
        with pytest.raises(SystemExit) as exit_info:
            convert_main([str(src), str(tmp_path / "out") + "/", "--tp", "2",
                          "--tp-rules", str(tmp_path / "rules.json")])  # fmt: skip
        assert exit_info.value.code == 2


def test_a_rules_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO named as the rules file is a usage error at once (nobody ever writes to it)."""
    src = _source(tmp_path, LlamaShape())
    fifo = tmp_path / "rules.json"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as exit_info:
        convert_main([str(src), str(tmp_path / "out") + "/", "--tp", "2", "--tp-rules", str(fifo)])
    assert exit_info.value.code == 2


def test_rules_the_metadata_cannot_hold_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """[SET-11]: the rules go into every member's metadata; a pattern holding a lone surrogate
    (valid JSON, not UTF-8) is refused with a code, not a traceback."""
    src = _source(tmp_path / "s", LlamaShape())
    rules = tmp_path / "rules.json"
    rules.write_text('[["x\\ud800|nothing", "replicated"]]', encoding="utf-8")
    err = _refused(tmp_path, [str(src), "--tp", "2", "--tp-rules", str(rules)], capsys)
    assert "[TP_BAD_CONFIG]" in err and "metadata" in err


@pytest.mark.parametrize(
    ("key", "value"),
    [("num_attention_heads", "abc"), ("num_attention_heads", True),
     ("num_attention_heads", 0), ("hidden_size", None)],
)  # fmt: skip
def test_unusable_head_geometry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any
) -> None:
    """[SET-11]: head counts that are not positive integers (or, without head_dim, no
    hidden_size) leave no head geometry: TP_BAD_CONFIG naming the layer, not a traceback."""
    src = _source(tmp_path / "s", LlamaShape())
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    config[key] = value
    (src / "config.json").write_text(json.dumps(config), encoding="utf-8")
    err = _refused(tmp_path, [str(src), "--tp", "2"], capsys)
    assert "[TP_BAD_CONFIG]" in err and "self_attn" in err


# ------------------------------------------------------------------- the tables themselves


@pytest.mark.parametrize(
    ("architecture", "module", "kind"),
    [
        ("LlamaForCausalLM", "model.embed_tokens", "vocab"),
        ("LlamaForCausalLM", "lm_head", "vocab"),
        ("MistralForCausalLM", "model.layers.3.self_attn.q_proj", "heads"),
        ("Qwen2ForCausalLM", "model.layers.3.self_attn.k_proj", "kv_heads"),
        ("Qwen3ForCausalLM", "model.layers.3.self_attn.v_proj", "kv_heads"),
        ("Qwen3ForCausalLM", "model.layers.3.self_attn.q_norm", None),
        ("LlamaForCausalLM", "model.layers.3.self_attn.o_proj", "row"),
        ("LlamaForCausalLM", "model.layers.3.mlp.gate_proj", "column"),
        ("LlamaForCausalLM", "model.layers.3.mlp.up_proj", "column"),
        ("LlamaForCausalLM", "model.layers.3.mlp.down_proj", "row"),
        ("LlamaForCausalLM", "model.layers.3.input_layernorm", None),
        # vLLM's FusedMoE: w1/w3 split the intermediate size (column), w2 its input (row);
        # the router (GateLinear) is whole on every rank.
        ("MixtralForCausalLM", "model.layers.3.block_sparse_moe.experts.7.w1", "column"),
        ("MixtralForCausalLM", "model.layers.3.block_sparse_moe.experts.7.w3", "column"),
        ("MixtralForCausalLM", "model.layers.3.block_sparse_moe.experts.7.w2", "row"),
        ("MixtralForCausalLM", "model.layers.3.block_sparse_moe.gate", "replicated"),
    ],
)
def test_rule_tables(architecture: str, module: str, kind: str | None) -> None:
    """[SET-11]: the documented table of each supported architecture."""
    plan = plan_for({"architectures": [architecture], "num_attention_heads": 8}, 2)
    assert plan.kind(module) == kind


def test_rank_errors_are_format_errors() -> None:
    with pytest.raises(FormatError) as info:
        plan_for({"architectures": ["Nope"]}, 2)
    assert info.value.code == "TP_BAD_CONFIG"


# ------------------------------------------------------------------- reading without a rank


def _padded_rows(shape: LlamaShape, t: int) -> int:
    """Rows of one rank's vocabulary table: the vocabulary padded to a multiple of 64, cut in
    ``t`` [SET-11], from the example's shape, not from the reader."""
    return -(-shape.vocab_size // 64) * 64 // t


def test_a_whole_rank_set_refuses_what_one_rank_answers(converted: Any) -> None:
    """[SET-13]: opened without a rank, a rank set refuses every tensor, entry and layer
    (which would be rank 0's shard, not the whole tensor: lm_head of the tp2 set has 512
    rows in the source, 256 in each rank), naming the tensor and the rank argument."""
    t, shape, single, ranks = converted
    with reference.open(single) as one:
        assert one.tensor("lm_head.weight").shape == (shape.vocab_size, shape.hidden_size)
    prefix = "model.layers.0.mlp.down_proj"
    calls = {
        "tensor": lambda s: s.tensor("lm_head.weight"),
        "entry": lambda s: s.entry("lm_head.weight"),
        "view": lambda s: s.view(s.entry("lm_head.weight", rank=0)),
        "tensors": lambda s: next(s.tensors()),
        "linear": lambda s: s.linear(prefix),
        "dequantize": lambda s: s.dequantize(prefix),
        "read_into": lambda s: s.read_into("lm_head.weight", bytearray(1 << 20)),
        "read_many_into": lambda s: s.read_many_into([("lm_head.weight", bytearray(1 << 20))]),
    }
    with reference.open(ranks) as many:
        for call, access in calls.items():
            with pytest.raises(FormatError) as info:
                access(many)
            err = info.value
            assert err.code == "TP_RANK_REQUIRED", call
            assert f"tensor parallelism {t}" in err.message, call
            assert (
                f"rank=0..{t - 1}" in err.message and "reference.open(PATH, rank=R)" in err.message
            )
            name = {"linear": prefix, "dequantize": prefix, "tensors": "every tensor"}.get(
                call, "lm_head.weight"
            )
            assert name in err.message, call
        # names, layers, metadata and the whole-set checks need no rank
        assert "lm_head.weight" in many and many.names() == many.names(rank=t - 1)
        assert prefix in many.layers()
        assert many.metadata["tensor_parallel"]["tp_size"] == t
        many.validate()
        many.verify()
        # and a rank given on the call still answers
        assert many.tensor("lm_head.weight", rank=t - 1).shape == (
            _padded_rows(shape, t), shape.hidden_size)  # fmt: skip


def test_open_with_a_rank_reads_that_ranks_shards(converted: Any) -> None:
    """[SET-13]: ``reference.open(path, rank=r)`` opens rank r's members; every access answers
    with r's shard, equal to the cut made here from the single file."""
    t, shape, single, ranks = converted
    rows = _padded_rows(shape, t)
    prefix = "model.layers.0.self_attn.o_proj"
    with reference.open(single) as one:
        table = one.tensor("lm_head.weight")
        full = np.zeros((rows * t, table.shape[1]), table.dtype)
        full[: table.shape[0]] = table
        for r in range(t):
            with reference.open(ranks, rank=r) as mine:
                assert isinstance(mine, FileSet)
                assert [m.path.name for m in mine.members] == [f"model-tp{t}-rank{r}.awq2"]
                got = mine.tensor("lm_head.weight")
                assert np.array_equal(got, full[r * rows : (r + 1) * rows]), r
                assert mine.entry("lm_head.weight").shape == (rows, shape.hidden_size)
                _parallel, index, count = expected_cut(prefix, t, shape)[r]
                want = one.linear(prefix, tp_rank=index, tp_size=count, parallel="row")
                layer = mine.linear(prefix)
                assert (layer.tp_rank, layer.k, layer.n) == (r, want.k, want.n)
                assert np.array_equal(mine.dequantize(prefix), dequantize_layer(want))
                out = bytearray(got.nbytes)
                assert mine.read_into("lm_head.weight", out).tobytes() == got.tobytes()


def test_open_refuses_a_rank_it_cannot_give(converted: Any) -> None:
    """A rank outside 0..T-1, or a rank above 0 of what holds the whole model, is a
    ValueError; rank 0 of a single file is the file."""
    t, _shape, single, ranks = converted
    for bad in (t, -1):
        with pytest.raises(ValueError, match=f"rank {bad}"):
            reference.open(ranks, rank=bad)
    with pytest.raises(ValueError, match="not a rank set"):
        reference.open(single, rank=1)
    with reference.open(single, rank=0) as one:
        assert not isinstance(one, FileSet)


def _hand_rank_set(tmp_path: Path, metadata: tuple[dict[str, Any], dict[str, Any]]) -> Path:
    """A rank set of two members written by reference.save with the metadata given, its
    manifest measured here."""
    folder = tmp_path / "hand"
    folder.mkdir(parents=True)
    files = []
    for rank, meta in enumerate(metadata):
        path = folder / f"m-rank{rank}.awq2"
        meta = {**meta, **rank_record(rank, 2)}  # each member's own rank [SET-15]
        reference.save(path, {"w": np.full((4, 8), rank, np.float16)}, metadata=meta)
        data = path.read_bytes()
        files.append({"name": path.name, "size": len(data), "rank": rank,
                      "header_crc": f"{int.from_bytes(data[124:128], 'little'):08x}",
                      "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    manifest = {"awq2_set": 1, "kind": "rank", "tp_size": 2, "files": files}
    (folder / SET_MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def test_rank_set_metadata_must_agree(tmp_path: Path) -> None:
    """[SET-14]: members whose metadata differ are refused when the set's metadata is asked,
    naming both members; the same metadata is the set's."""
    same = _hand_rank_set(tmp_path / "a", ({"config": {"x": 1}}, {"config": {"x": 1}}))
    with reference.open(same, validate=True) as s:
        assert s.metadata == {"config": {"x": 1}, **rank_record(0, 2)}  # the first's [SET-14]
    differ = _hand_rank_set(tmp_path / "b", ({"config": {"x": 1}}, {"config": {"x": 2}}))
    with reference.open(differ, validate=True) as s:  # valid: the format allows it
        with pytest.raises(FormatError) as info:
            s.metadata  # noqa: B018
    err = info.value
    assert err.code == "TP_METADATA_MISMATCH"
    assert "m-rank0.awq2" in str(err) and "m-rank1.awq2" in str(err) and "'config'" in str(err)
    with reference.open(differ, rank=1) as one_rank:  # one rank open: nothing to compare
        assert one_rank.metadata == {"config": {"x": 2}, **rank_record(1, 2)}


# ------------------------------------------------------------------ --tp with --max-shard-size

#: Under the example Llama's rank files (about 3.4 MB each), over its largest layer.
RANK_LIMIT = 1_000_000


@pytest.fixture(scope="module")
def split_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """The example Llama as a plain rank set for 2 ranks, and split by size (jobs=1 and 3)."""
    tmp = tmp_path_factory.mktemp("tp2-split")
    src = _source(tmp, LlamaShape())
    convert_folder(src, tmp / "plain", jobs=1, tp_size=2)
    convert_folder(src, tmp / "a", jobs=1, tp_size=2, max_shard_size=RANK_LIMIT)
    convert_folder(src, tmp / "b", jobs=3, tp_size=2, max_shard_size=RANK_LIMIT)
    return tmp / "plain", tmp / "a", tmp / "b"


def test_split_ranks_are_named_listed_and_bounded(split_ranks: tuple[Path, Path, Path]) -> None:
    """[SET-2, SET-10]: each rank in several members of at most the limit, named
    ``model-tp2-rank{r}-0000i-of-0000n.awq2``, listed rank by rank with their rank."""
    _plain, ranks, _b = split_ranks
    files = json.loads((ranks / SET_MANIFEST).read_text(encoding="utf-8"))["files"]
    per_rank = [[f for f in files if f["rank"] == r] for r in range(2)]
    n = len(per_rank[0])
    assert n > 1 and len(per_rank[1]) == n
    assert [f["rank"] for f in files] == [0] * n + [1] * n
    for r, listed in enumerate(per_rank):
        assert [f["name"] for f in listed] == [
            f"model-tp2-rank{r}-{i:05d}-of-{n:05d}.awq2" for i in range(1, n + 1)
        ]
    assert sorted(p.name for p in ranks.glob("*.awq2")) == sorted(f["name"] for f in files)
    assert all(f["size"] <= RANK_LIMIT for f in files)


def test_split_ranks_validate_verify_and_record_their_rank(
    split_ranks: tuple[Path, Path, Path],
) -> None:
    """[SET-8, SET-14, SET-15]: the set passes full validation and verification; every member
    records its own rank, and the metadata is otherwise the plain rank set's."""
    plain, ranks, _b = split_ranks
    with reference.open(plain) as p:
        want = {k: v for k, v in p.members[0].metadata.items() if k != "awq2_rank"}
    with reference.open(ranks, validate=True) as many:
        many.verify()
        assert isinstance(many, FileSet) and many.kind == "rank" and many.tp_size == 2
        files = json.loads((ranks / SET_MANIFEST).read_text(encoding="utf-8"))["files"]
        assert len(many.members) == len(files)
        for member, listed in zip(many.members, files, strict=True):
            meta = dict(member.metadata)
            assert meta.pop("awq2_rank") == rank_record(listed["rank"], 2)["awq2_rank"]
            assert meta == want


def _fields(e: Any) -> tuple[Any, ...]:
    return (e.dtype, e.shape, e.layout, e.length, e.data_crc, e.bits, e.group_size, e.k, e.n)


def test_split_ranks_hold_the_plain_rank_sets_tensors(
    split_ranks: tuple[Path, Path, Path],
) -> None:
    """[SET-11]: each rank's tensors are the plain rank set's, byte for byte, and no tensor
    or layer is cut between members [SET-10]."""
    plain, ranks, _b = split_ranks
    for r in range(2):
        with reference.open(plain, rank=r) as want, reference.open(ranks, rank=r) as got:
            assert sorted(got.names()) == sorted(want.names())
            for name in want.names():
                assert _fields(got.entry(name)) == _fields(want.entry(name)), name
                assert got.tensor(name).tobytes() == want.tensor(name).tobytes(), name
            holder = {n: i for i, m in enumerate(got.members) for n in m.names()}
            for prefix in got.layers():
                parts = {holder[n] for n in holder if n.startswith(prefix + ".")}
                assert len(parts) == 1, prefix


def test_split_rank_bytes_do_not_depend_on_jobs(split_ranks: tuple[Path, Path, Path]) -> None:
    """[CONV-3]: every member and the manifest byte-identical for --jobs 1 and 3."""
    _plain, a, b = split_ranks
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_split_ranks_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--tp 2 --max-shard-size`` is no longer a usage error; the summary lists every member."""
    src = _source(tmp_path, LlamaShape())
    out = tmp_path / "out"
    argv = [str(src), str(out) + "/", "--tp", "2", "--max-shard-size", "1MB", "--jobs", "1"]
    assert convert_main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tp_size"] == 2 and doc["max_shard_size"] == 1_000_000
    listed = json.loads((out / SET_MANIFEST).read_text(encoding="utf-8"))["files"]
    assert [m["name"] for m in doc["members"]] == [f["name"] for f in listed]
    assert convert_main([*argv, "--overwrite"]) == 0
    text = capsys.readouterr().out
    assert "each rank in files of at most 1,000,000 bytes" in text
    assert all(f["name"] in text for f in listed)


@pytest.mark.skipif(shutil.which(CC[0]) is None, reason=f"no C compiler ({CC[0]})")
def test_the_c_loader_accepts_split_ranks(
    split_ranks: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The independent C loader reads and verifies the set whole."""
    from conformance import run

    binary = run.build_c_loader(tmp_path / "awq2c", extra_flags=("-Werror",))
    proc = subprocess.run([str(binary), str(split_ranks[1])], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
