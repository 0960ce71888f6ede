"""Resharding (issue 31, item 3): ``convert`` of an AWQ-v2 SRC (a file, a model folder, a split
set, a rank set) gives, byte for byte, what converting the original checkpoint gives.

For each model, every layout is written once from the checkpoint (the direct conversions);
then every layout is converted to every other, and each result is compared with the direct
conversion to that layout, file by file (the weights, the manifest, ``config.json`` and the
copied files).  ``pytest -s`` prints the table.
"""

from __future__ import annotations

import filecmp
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import reference
from reference.convert import convert, convert_folder
from reference.convert import main as convert_main
from reference.examples import LlamaShape, write_checkpoint
from reference.ground.errors import FormatError
from reference.sets.tpsplit import Cut, RankJoin, plan_for, recorded_plan, uncut
from spec.constants import SET_MANIFEST

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real"
#: T = 4 with 2 key/value heads (each on two ranks) and a vocabulary of 1000 rows padded to
#: 1024: every kind of cut the Llama table uses, padding and replication included.
WIDE = LlamaShape(hidden_size=512, intermediate_size=1024, num_attention_heads=8,
                  num_key_value_heads=2, vocab_size=1000, attention_bias=True)  # fmt: skip

#: model -> (checkpoint maker, the layouts written from it: name -> convert_folder options).
LLAMA_LAYOUTS: dict[str, dict[str, Any]] = {
    "file": {},
    "split": {"max_shard_size": 400_000},
    "tp2": {"tp_size": 2},
    "tp2split": {"tp_size": 2, "max_shard_size": 1_000_000},
}
WIDE_LAYOUTS: dict[str, dict[str, Any]] = {
    "file": {},
    "split": {"max_shard_size": 2_000_000},
    "tp2": {"tp_size": 2},
    "tp4": {"tp_size": 4},
}
#: The real checkpoints are too small for a rank set (k_proj's 64 columns over two ranks break
#: Marlin's shape rules: TP_BAD_SHARD, direct or not), so they go through file and split.
REAL_LAYOUTS: dict[str, dict[str, Any]] = {"file": {}, "split": {"max_shard_size": 300_000}}

ROWS: list[tuple[str, str, str, bool]] = []


def _folder_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def _identical(a: Path, b: Path) -> bool:
    """Every file of two folders (or two files) byte-identical, and the same names."""
    if a.is_file():
        return filecmp.cmp(a, b, shallow=False)
    names = _folder_files(a)
    if names != _folder_files(b):
        return False
    return all(filecmp.cmp(a / n, b / n, shallow=False) for n in names)


def _round_trip(name: str, src: Path, layouts: dict[str, dict[str, Any]], tmp: Path) -> None:
    direct = {}
    for layout, options in layouts.items():
        direct[layout] = tmp / f"direct-{layout}"
        convert_folder(src, direct[layout], jobs=2, **options)
    if "split" in layouts:  # the split layouts really are split sets
        assert (direct["split"] / SET_MANIFEST).is_file()
        assert len([p for p in direct["split"].iterdir() if p.suffix == ".awq2"]) >= 2
    results = []
    for source, source_path in direct.items():
        for target, options in layouts.items():
            out = tmp / f"{source}-to-{target}"
            convert_folder(source_path, out, jobs=2, **options)
            same = _identical(direct[target], out)
            results.append((name, source, target, same))
    # a lone file, to a lone file
    lone = tmp / "lone.awq2"
    convert(direct["file"] / "model.awq2", lone, jobs=1)
    results.append((name, "file (model.awq2 alone)", "file (.awq2)",
                    _identical(direct["file"] / "model.awq2", lone)))  # fmt: skip
    ROWS.extend(results)
    _print_table(results)
    assert all(same for *_, same in results), [r for r in results if not r[3]]


def _print_table(rows: list[tuple[str, str, str, bool]]) -> None:
    print("\n| model | from | to | byte-identical to a direct conversion |")
    print("|---|---|---|---|")
    for name, source, target, same in rows:
        print(f"| {name} | {source} | {target} | {'yes' if same else 'NO'} |")


def test_every_reshard_of_the_example_llama_is_a_direct_conversion(tmp_path: Path) -> None:
    src = write_checkpoint(tmp_path / "ckpt", LlamaShape())
    (src / "tokenizer.json").write_text('{"tiny": true}\n', encoding="utf-8")
    _round_trip("example Llama", src, LLAMA_LAYOUTS, tmp_path)


def test_every_reshard_of_a_wide_llama_with_padding_and_replicated_heads(tmp_path: Path) -> None:
    """T = 4 over 2 key/value heads (replicated) and a padded vocabulary, re-cut to T = 2 and
    assembled into one file; and back."""
    src = write_checkpoint(tmp_path / "ckpt", WIDE, shards=2)
    _round_trip("wide Llama (kv 2, vocab 1000)", src, WIDE_LAYOUTS, tmp_path)


@pytest.mark.parametrize("fixture", ["autoawq_gemm_g128", "ct_awq_w4a16_asym_g128"])
def test_every_reshard_of_a_real_checkpoint_is_a_direct_conversion(
    tmp_path: Path, fixture: str
) -> None:
    _round_trip(fixture, FIXTURES / fixture, REAL_LAYOUTS, tmp_path)


def test_every_reshard_of_layers_in_the_awq_layout_is_a_direct_conversion(tmp_path: Path) -> None:
    """[LAY-8] An MLP of 288 features breaks Marlin's shape rules: those layers are stored in
    the AWQ v1 layouts, and come back as they were."""
    shape = LlamaShape(intermediate_size=288, group_size=32)
    src = write_checkpoint(tmp_path / "ckpt", shape)
    with reference.open(src) as checkpoint:
        assert any(checkpoint.linear(p).layout == "AWQ" for p in checkpoint.layers())
    _round_trip("Llama, MLP in the AWQ layout", src, REAL_LAYOUTS, tmp_path)


def test_a_real_checkpoint_too_small_for_tp2_is_refused_the_same_way_resharded(
    tmp_path: Path,
) -> None:
    src = FIXTURES / "autoawq_gemm_g128"
    codes = []
    for source in (src, tmp_path / "file"):
        if source != src:
            convert_folder(src, source, jobs=1)
        with pytest.raises(FormatError) as caught:
            convert_folder(source, tmp_path / f"out-{len(codes)}", jobs=1, tp_size=2)
        codes.append(caught.value.code)
    assert codes == ["TP_BAD_SHARD", "TP_BAD_SHARD"]


def test_the_provenance_is_the_original_checkpoints(tmp_path: Path) -> None:
    """[META-3] The reshard describes the checkpoint it came from, not the AWQ-v2 copy."""
    src = write_checkpoint(tmp_path / "ckpt")
    convert_folder(src, tmp_path / "ranks", jobs=1, tp_size=2)
    convert_folder(tmp_path / "ranks", tmp_path / "back", jobs=1)
    with reference.open(tmp_path / "back") as back:
        provenance = back.metadata["provenance"]
        assert "tensor_parallel" not in back.metadata
        assert "awq2_rank" not in back.metadata
    assert [f["name"] for f in provenance["source_files"]] == ["model.safetensors"]
    assert provenance["source_format"].startswith("AWQ v1")
    config = json.loads((tmp_path / "back" / "config.json").read_text(encoding="utf-8"))
    assert config["quantization_config"]["source_format"] == "awq"


def test_a_file_without_provenance_is_described_as_itself(tmp_path: Path) -> None:
    """A file ``save`` wrote carries no provenance: the reshard's names its own file."""
    ckpt = write_checkpoint(tmp_path / "ckpt")
    convert(ckpt, tmp_path / "a.awq2", jobs=1)
    with reference.open(tmp_path / "a.awq2") as a:
        tensors = {name: np.array(a.tensor(name)) for name in a.names()}
        entries = {name: a.entry(name) for name in a.names()}
        metadata = {k: v for k, v in a.metadata.items() if k != "provenance"}
    with reference.Writer(tmp_path / "bare.awq2", metadata=metadata) as w:
        for name, array in tensors.items():
            e = entries[name]
            fields = (
                {}
                if e.layout == "DENSE"
                else dict(layout=e.layout, bits=e.bits, group_size=e.group_size, k=e.k, n=e.n)
            )
            w.add(name, array, dtype=e.dtype, **fields)
    convert(tmp_path / "bare.awq2", tmp_path / "b.awq2", jobs=1)
    with reference.open(tmp_path / "b.awq2") as b:
        provenance = b.metadata["provenance"]
        for name, array in tensors.items():
            assert np.array(b.tensor(name)).tobytes() == array.tobytes(), name
    assert provenance["source_format"] == "AWQ-v2 (file)"
    assert [f["name"] for f in provenance["source_files"]] == ["bare.awq2"]


def test_an_awq2_file_without_a_quantised_layer_is_still_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    v2 = tmp_path / "dense.awq2"
    reference.save(v2, {"w": np.zeros(2, np.float32)})
    assert convert_main([str(v2), str(tmp_path / "out.awq2")]) == 2
    assert "no quantised layer to reshard" in capsys.readouterr().err


# ------------------------------------------------------------ the inverse of the cuts


def _plan(t: int) -> Any:
    return plan_for(LlamaShape().config(), t)


def test_uncut_refuses_replicas_that_differ() -> None:
    """[SET-12] A key/value head held by two ranks must be the same bytes on both."""
    cuts = [Cut("column", r // 2, 2) for r in range(4)]
    a, b = np.zeros((2, 3), np.uint8), np.ones((2, 3), np.uint8)
    assert uncut("x", [a, a, b, b], cuts, 1).shape == (2, 6)
    with pytest.raises(FormatError) as caught:
        uncut("x", [a, b, b, b], cuts, 1)
    assert caught.value.code == "TP_BAD_SHARD"


def test_the_vocabulary_rows_come_from_vocab_size_or_are_refused() -> None:
    """The padding is cut off at config.json's vocab_size; a vocab_size that does not pad to
    the stored rows, or padding rows that are not zero, cannot be undone exactly."""
    join = RankJoin(_plan(2), {"vocab_size": 1000})
    parts = [np.ones((512, 4), np.float16), np.ones((512, 4), np.float16)]
    parts[1][1000 - 512 :] = 0
    assert join.whole_shape("lm_head.weight", (512, 4), layer=False) == (1000, 4)
    assert join.join_dense("lm_head.weight", parts, layer=False).shape == (1000, 4)
    with pytest.raises(FormatError) as caught:
        RankJoin(_plan(2), {"vocab_size": 900}).whole_shape("lm_head.weight", (512, 4),
                                                            layer=False)  # fmt: skip
    assert caught.value.code == "TP_BAD_CONFIG"
    parts[1][-1] = 1
    with pytest.raises(FormatError) as caught:
        join.join_dense("lm_head.weight", parts, layer=False)
    assert caught.value.code == "TP_BAD_SHARD"


def test_a_rank_set_without_its_tensor_parallel_record_is_refused() -> None:
    for record in (None, {"tp_size": 2}, {**_plan(2).description(), "vocab_padding": 128}):
        with pytest.raises(FormatError) as caught:
            recorded_plan(record)
        assert caught.value.code == "TP_BAD_CONFIG"
    again = recorded_plan(_plan(2).description())
    assert again.description() == _plan(2).description()
