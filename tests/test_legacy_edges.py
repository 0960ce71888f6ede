"""Edges of the legacy readers that line coverage does not show: hostile safetensors files
whose BF16 or FP8 tensors bypassed safetensors' own check, a shard cut short after opening,
and tensor names an AWQ-v2 file cannot hold.

Each was a traceback (a bare ``ValueError``) or an accepted file where the same checkpoint
with F16 tensors was refused; each is now refused with the code of the legacy chapter
(docs/spec/format.md, V1-2 .. V1-4, CT-2 .. CT-5).  The checkpoints are the small bases of
``test_legacy_rejects``, or single safetensors files written byte by byte.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from ct_checkpoints import write_ct_checkpoint, write_safetensors
from test_legacy_rejects import (
    PF,
    V1_PREFIX,
    V1_QUANT,
    K,
    N,
    _raw,
    _v1_tensors,
    base,
    ct_folder,
    refused,
    v1_folder,
)

import reference
from reference.convert import main as convert_main
from reference.dump import main as dump_main
from spec.constants import MAX_NAME_LENGTH

EMBED = "model.embed_tokens.weight"


def _bf16_base(tmp_path: Path, family: str) -> Path:
    """A base whose first stored tensor, ``model.embed_tokens.weight``, is BF16 (read through
    ``ml_dtypes``, not safetensors' NumPy backend)."""
    if family == "V1":
        return v1_folder(tmp_path, edit=lambda t: t.update({EMBED: np.ones((4, K), np.uint16)}))
    return write_ct_checkpoint(tmp_path / "ct", bf16=True).folder


def _converted(src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``awq2-convert SRC DST --quiet``: its exit status and stderr; a refusal leaves no DST."""
    dst = tmp_path / "out.awq2"
    status = convert_main([str(src), str(dst), "--quiet"])
    err = capsys.readouterr().err
    if status != 0:
        assert not dst.exists()
    return status, err


def _dense_only(tmp_path: Path, header: dict, data: bytes) -> Path:
    """An AWQ v1 folder whose second shard holds only plain tensors: one hand-made shard
    (``header`` and ``data``) beside a valid shard of one quantised layer (a checkpoint with
    no quantised layer at all is refused before any tensor is read, CONV-4)."""
    folder = tmp_path / "dense"
    folder.mkdir()
    doc = {"model_type": "llama", "hidden_size": K, "quantization_config": V1_QUANT}
    (folder / "config.json").write_text(json.dumps(doc))
    layer = _v1_tensors()
    write_safetensors(folder / "model-00001-of-00002.safetensors", layer)
    _raw(folder / "model-00002-of-00002.safetensors", json.dumps(header).encode(), data=data)
    weight_map = {name: "model-00001-of-00002.safetensors" for name in layer}
    weight_map.update({name: "model-00002-of-00002.safetensors" for name in header})
    index = {"metadata": {}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


# ------------------------------------------------------------------------------ cut short


@pytest.mark.parametrize("family", ["V1", "CT"])
def test_bf16_tensor_of_a_shard_cut_short_after_opening(tmp_path, family):
    """V1-3, CT-4 (a truncated safetensors file is *_INCOMPLETE): a shard cut short after it
    was opened and read once, inside a BF16 payload, is refused when that tensor is read, at
    the payload's offset, with the bytes that are left; before, the short read was a
    ValueError from reshape.  An F16 tensor in the same place gives the same code
    (test_legacy_rejects.test_shard_replaced_after_opening)."""
    folder = _bf16_base(tmp_path, family)
    shard = folder / "model.safetensors"
    with reference.open(folder) as src:
        info = src.entry(EMBED)
        assert info.dtype == "BF16"
        src.tensor(src.layers()[0] + ".scales")  # safetensors has opened and checked the shard
        with shard.open("r+b") as f:
            f.truncate(info.offset + 6)
        with pytest.raises(reference.LegacyError) as raised:
            src.tensor(EMBED)
    err = raised.value
    assert err.code == f"{family}_INCOMPLETE" and err.offset == info.offset
    assert err.expected == f"{info.length} bytes" and err.found == "6 bytes"
    assert err.path == str(shard) and repr(EMBED) in err.message


@pytest.mark.parametrize("keep", ["inside the payload", "before the payload"])
def test_bf16_tensor_read_first_from_a_shard_cut_short(tmp_path, keep):
    """V1-3: the same when the BF16 tensor is the first one read from the shard (the AWQ v1
    reader reads no tensor on opening; the compressed-tensors one reads weight_shape):
    safetensors' own check of the shard now runs for BF16 and FP8 tensors too and refuses the
    truncated file at offset 8, its header, for tensor() and verify() alike."""
    folder = _bf16_base(tmp_path, "V1")
    shard = folder / "model.safetensors"
    with reference.open(folder) as src:
        info = src.entry(EMBED)
        with shard.open("r+b") as f:
            f.truncate(info.offset + 6 if keep == "inside the payload" else info.offset - 1)
        for read in (lambda: src.tensor(EMBED), src.verify):
            with pytest.raises(reference.LegacyError) as raised:
                read()
            err = raised.value
            assert err.code == "V1_INCOMPLETE" and err.offset == 8
            assert err.expected == "a valid safetensors file" and err.path == str(shard)


# ------------------------------------------------------------------------------ safetensors' check

# Tensors of 4 elements at these payload starts (in units of one payload), in a data section
# of ``chunks`` payloads; each case breaks safetensors' layout rule (each payload starts where
# the previous one ends, the last ends the file) in one way.
LAYOUT_BROKEN = [
    ("overlap", [0, 0], 1),
    ("gap", [0, 2], 3),
    ("trailing bytes", [0], 2),
]


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F8_E4M3"])
@pytest.mark.parametrize(("case", "starts", "chunks"), LAYOUT_BROKEN,
                         ids=[c[0] for c in LAYOUT_BROKEN])  # fmt: skip
def test_safetensors_layout_checked_whatever_the_dtype(tmp_path, capsys, dtype, case, starts,
                                                       chunks):  # fmt: skip
    """V1-3 (the shard checked as safetensors checks it: contiguous payloads, the last ending
    the file; refused as *_INCOMPLETE): a shard of only BF16 or FP8 tensors was converted
    without that check (exit 0), while the same shard of F16 tensors was refused; now all
    three dtypes are refused alike, by tensor() and by the converter."""
    size = 4 * (1 if dtype == "F8_E4M3" else 2)
    header = {f"t{i}": {"dtype": dtype, "shape": [4],
                        "data_offsets": [start * size, (start + 1) * size]}
              for i, start in enumerate(starts)}  # fmt: skip
    folder = _dense_only(tmp_path, header, bytes(chunks * size))
    with reference.open(folder) as src:  # the header entries themselves are well formed
        assert set(header) <= set(src.names())
        with pytest.raises(reference.LegacyError) as raised:
            src.tensor("t0")
    assert raised.value.code == "V1_INCOMPLETE" and raised.value.offset == 8
    assert raised.value.expected == "a valid safetensors file"
    status, err = _converted(folder, tmp_path, capsys)
    assert status == 1 and "[V1_INCOMPLETE]" in err and "safetensors refuses it" in err


@pytest.mark.parametrize("dtype", ["F16", "BF16", "F8_E5M2"])
def test_a_valid_shard_converts_whatever_the_dtype(tmp_path, capsys, dtype):
    """V1-5 (other tensors unchanged): the check added for BF16 and FP8 refuses nothing
    valid: the same two tensors laid out contiguously convert, byte for byte."""
    size = 4 * (1 if dtype == "F8_E5M2" else 2)
    header = {"t0": {"dtype": dtype, "shape": [4], "data_offsets": [0, size]},
              "t1": {"dtype": dtype, "shape": [4], "data_offsets": [size, 2 * size]}}  # fmt: skip
    payload = bytes(range(1, 2 * size + 1))
    folder = _dense_only(tmp_path, header, payload)
    assert _converted(folder, tmp_path, capsys)[0] == 0
    with reference.open(tmp_path / "out.awq2") as out:
        got = b"".join(out.tensor(n).tobytes() for n in ("t0", "t1"))
        assert out.entry("t0").dtype == dtype
    assert got == payload


# ------------------------------------------------------------------------------ tensor names


def _with_dense(tmp_path: Path, family: str, name: str) -> Path:
    """A base with one more dense F16 tensor, named ``name``."""
    extra = {name: np.ones(4, np.float16)}
    if family == "V1":
        return v1_folder(tmp_path, edit=lambda t: t.update(extra))
    return ct_folder(tmp_path, edit=lambda t: t.update(extra))


BAD_NAMES = [
    ("empty", "", "0 bytes"),
    ("one byte too long", "x" * (MAX_NAME_LENGTH + 1), f"{MAX_NAME_LENGTH + 1} bytes"),
    ("two-byte characters too long", "é" * 513, "1026 bytes"),
]


@pytest.mark.parametrize("family", ["V1", "CT"])
@pytest.mark.parametrize(("case", "name", "found"), BAD_NAMES, ids=[c[0] for c in BAD_NAMES])
def test_converter_refuses_names_awq2_cannot_hold(tmp_path, capsys, family, case, name, found):
    """V1-2, CT-2 (a checkpoint the converter cannot represent exactly is *_UNSUPPORTED), by
    NAME-1 and LIM-3 (a name is 1 to max_name_length = 1024 bytes of UTF-8): the
    readers present such a name, but the converter refused it with a ValueError traceback
    from the writer; now exit 1, the code, nothing written."""
    folder = _with_dense(tmp_path, family, name)
    with reference.open(folder) as src:  # read as stored: only the conversion is refused
        assert name in src.names()
    status, err = _converted(folder, tmp_path, capsys)
    assert status == 1, err
    assert f"[{family}_UNSUPPORTED]" in err and "cannot be an AWQ-v2 tensor name" in err
    assert f"expected 1 to {MAX_NAME_LENGTH} bytes of UTF-8, found {found}" in err
    out = io.StringIO()
    assert dump_main([str(folder), "--json"], out=out) == 0  # dump reads it as it is


def test_converter_keeps_a_name_of_max_name_length(tmp_path, capsys):
    """LIM-3's boundary: a name of exactly 1024 bytes (here 512 two-byte characters) is kept
    unchanged."""
    name = "é" * (MAX_NAME_LENGTH // 2)
    assert _converted(_with_dense(tmp_path, "V1", name), tmp_path, capsys)[0] == 0
    with reference.open(tmp_path / "out.awq2") as out:
        assert name in out.names()
        assert out.tensor(name).tolist() == [1.0] * 4


def test_converter_checks_the_presented_layer_names(tmp_path, capsys):
    """V1-2 and LIM-3 for a layer: a prefix of 1010 + len(".q_proj") = 1017 bytes fits, but
    its presented part names (".qweight": 1025 bytes) do not."""
    prefix = "m" * 1010 + ".q_proj"

    def rename(tensors: dict[str, np.ndarray]) -> None:
        for part in ("qweight", "qzeros", "scales"):
            tensors[f"{prefix}.{part}"] = tensors.pop(f"{V1_PREFIX}.{part}")

    folder = v1_folder(tmp_path, edit=rename)
    with reference.open(folder) as src:
        assert src.layers() == [prefix]
        assert src.entry(f"{prefix}.qweight").shape == (K, N // PF)
    status, err = _converted(folder, tmp_path, capsys)
    assert status == 1 and "[V1_UNSUPPORTED]" in err and "found 1025 bytes" in err


UNPAIRED = [
    ("high surrogate in a name", '"a\\ud800"', "name"),
    ("low surrogate in a name", '"\\udc00b"', "name"),
    ("surrogate in __metadata__", '"\\ud800"', "metadata"),
]


@pytest.mark.parametrize("family", ["V1", "CT"])
@pytest.mark.parametrize(("case", "escaped", "where"), UNPAIRED, ids=[c[0] for c in UNPAIRED])
def test_safetensors_header_has_no_unpaired_surrogate(tmp_path, capsys, family, case, escaped,
                                                      where):  # fmt: skip
    """V1-3, CT-4 (a header that is not JSON is *_INCOMPLETE at offset 8, where the JSON
    starts), NAME-2: an escaped unpaired surrogate decodes to no UTF-8 text, and safetensors'
    parser refuses it as JSON; the reader presented it as a name, and a BF16 tensor of that
    name reached the AWQ-v2 writer's UnicodeEncodeError.  Now refused on opening."""
    folder = base(tmp_path, family)
    entry = '{"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}'
    if where == "name":
        header = f"{{{escaped}: {entry}}}"
    else:
        header = f'{{"__metadata__": {{"note": {escaped}}}, "x.weight": {entry}}}'
    _raw(folder / "model.safetensors", header.encode(), data=bytes(4))
    err = refused(folder, f"{family}_INCOMPLETE", tmp_path, capsys)
    assert err.offset == 8 and err.expected == "a JSON object" and "not JSON" in err.message
    assert "codec can't encode character" in str(err.found)  # the unpaired surrogate


@pytest.mark.parametrize("family", ["V1", "CT"])
def test_safetensors_header_paired_surrogates_are_text(tmp_path, family):
    """NAME-2's converse: a surrogate pair is one character outside the BMP (U+1F600 here),
    valid UTF-8, and read as such."""
    folder = base(tmp_path, family)
    entry = '{"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}'
    _raw(folder / "model.safetensors", f'{{"x\\ud83d\\ude00": {entry}}}'.encode(), data=bytes(4))
    with reference.open(folder) as src:
        assert "x\U0001f600" in src.names()
        assert src.tensor("x\U0001f600").view(np.uint16).tolist() == [0, 0]
