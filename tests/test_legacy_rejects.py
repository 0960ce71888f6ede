"""Every rejection of the legacy readers (AWQ v1, compressed-tensors, their safetensors files),
one test per rule, reached through the public entry points (issue 17, item 4).

Each test breaks one thing in a small checkpoint that is otherwise valid (the two bases are
opened by ``test_the_crafted_bases_open``), then checks that ``reference.open``, the converter
and ``dump --json`` all refuse it with the code the spec's legacy chapter gives (V1-2 .. V1-4,
CT-2 .. CT-5), and that the error names the field and what was expected.  Expected shapes are
worked out here from the layouts of docs/spec/format.md, not read back from the reader.
"""

from __future__ import annotations

import io
import json
import os
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ct_checkpoints import write_ct_checkpoint, write_safetensors
from safetensors import safe_open

import reference
from reference.convert import main as convert_main
from reference.dump import main as dump_main
from reference.ground.errors import TensorNotFoundError
from reference.sources.compressed import CompressedReader

# ------------------------------------------------------------------------------ the bases

#: The one layer of the AWQ v1 base: k = 128 inputs, n = 64 outputs, 4 bits, group size 128,
#: so (AWQ v1 packing, 8 fields a word) qweight I32 [128, 8], qzeros I32 [1, 8], scales [1, 64].
V1_PREFIX = "model.layers.0.self_attn.q_proj"
K, N, PF = 128, 64, 8
V1_QUANT = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
            "version": "gemm"}  # fmt: skip

#: The first layer of ``ct_checkpoints.LAYERS``: out = 256, in = 256, group size 128, so
#: weight_packed I32 [256, 32], weight_scale [256, 2], weight_zero_point I32 [32, 2].
CT_PREFIX = "model.layers.0.self_attn.q_proj"
CT_OUT, CT_IN = 256, 256


def _v1_tensors() -> dict[str, np.ndarray]:
    return {
        "model.embed_tokens.weight": np.ones((4, K), np.float16),
        f"{V1_PREFIX}.qweight": np.zeros((K, N // PF), np.int32),
        f"{V1_PREFIX}.qzeros": np.zeros((1, N // PF), np.int32),
        f"{V1_PREFIX}.scales": np.ones((1, N), np.float16),
    }


def v1_folder(tmp_path: Path, *, quant: dict[str, Any] | None = None, config: bool = True,
              edit: Callable[[dict[str, np.ndarray]], None] | None = None) -> Path:  # fmt: skip
    """The AWQ v1 base: ``config.json`` (with ``quant`` merged into its quantization_config)
    and ``model.safetensors``; ``edit`` changes the tensors before they are written."""
    folder = tmp_path / "v1"
    folder.mkdir()
    if config:
        q = dict(V1_QUANT, **(quant or {}))
        doc = {"model_type": "llama", "hidden_size": K, "quantization_config": q}
        (folder / "config.json").write_text(json.dumps(doc))
    tensors = _v1_tensors()
    if edit is not None:
        edit(tensors)
    write_safetensors(folder / "model.safetensors", tensors)
    return folder


def ct_folder(tmp_path: Path, *, quant: dict[str, Any] | None = None,
              group: dict[str, Any] | None = None, weights: dict[str, Any] | None = None,
              edit: Callable[[dict[str, np.ndarray]], None] | None = None) -> Path:  # fmt: skip
    """The compressed-tensors base (``ct_checkpoints``, asymmetric, group size 128) with
    changes to its quantization_config, its group_0 scheme, its weights or its tensors."""
    folder = write_ct_checkpoint(tmp_path / "ct", group_size=128).folder
    doc = json.loads((folder / "config.json").read_text())
    q = doc["quantization_config"]
    q.update(quant or {})
    if group:
        q["config_groups"]["group_0"].update(group)
    if weights:
        q["config_groups"]["group_0"]["weights"].update(weights)
    (folder / "config.json").write_text(json.dumps(doc))
    if edit is not None:
        with safe_open(str(folder / "model.safetensors"), framework="numpy") as f:
            tensors = {name: f.get_tensor(name) for name in f.keys()}
        edit(tensors)
        write_safetensors(folder / "model.safetensors", tensors)
    return folder


def base(tmp_path: Path, family: str) -> Path:
    return v1_folder(tmp_path) if family == "V1" else ct_folder(tmp_path)


def refused(src: Path, code: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    """``src`` is refused with ``code`` by ``reference.open``, by the converter (exit 1,
    nothing written) and by ``dump --json`` (exit 1, the same code); the error is returned."""
    with pytest.raises(reference.LegacyError) as raised:
        reference.open(src)
    assert raised.value.code == code, str(raised.value)
    dst = tmp_path / "out.awq2"
    assert convert_main([str(src), str(dst), "--quiet"]) == 1
    assert f"[{code}]" in capsys.readouterr().err
    assert not dst.exists()
    out = io.StringIO()
    assert dump_main([str(src), "--json"], out=out) == 1
    assert json.loads(out.getvalue())["error"]["code"] == code
    return raised.value


def test_the_crafted_bases_open(tmp_path):
    """V1-1, CT-1: both bases are valid (dump validates and verifies them), so each test
    below refuses only what it breaks."""
    with reference.open(v1_folder(tmp_path)) as v1:
        assert v1.layers() == [V1_PREFIX]
        assert v1.entry(f"{V1_PREFIX}.qweight").shape == (K, N // PF)
    with reference.open(ct_folder(tmp_path)) as ct:
        assert isinstance(ct, CompressedReader)
        assert CT_PREFIX in ct.layers()
    for folder in (tmp_path / "v1", tmp_path / "ct"):
        assert dump_main([str(folder), "--json", "--verify"], out=io.StringIO()) == 0


# ------------------------------------------------------------------------------ AWQ v1


@pytest.mark.parametrize("group_size", [0, -2, "128", 1.5, None])
def test_v1_group_size_is_minus_one_or_positive(tmp_path, capsys, group_size):
    """V1-2: a group size that is not -1 or a positive integer cannot be read exactly."""
    err = refused(v1_folder(tmp_path, quant={"group_size": group_size}), "V1_UNSUPPORTED",
                  tmp_path, capsys)  # fmt: skip
    assert "group_size" in err.message and err.found == group_size
    assert "-1" in str(err.expected) and "positive" in str(err.expected)


def test_v1_quantised_tensors_need_a_config(tmp_path, capsys):
    """V1-2 (registry: V1_BAD_CONFIG, quantised tensors without a config): a qweight with
    neither config.json quantization_config nor quant_config.json."""
    err = refused(v1_folder(tmp_path, config=False), "V1_BAD_CONFIG", tmp_path, capsys)
    assert f"{V1_PREFIX}.qweight" in err.message and "quantization_config" in err.message
    assert err.found == "none"


def test_v1_config_without_quantization_config(tmp_path, capsys):
    """V1-2: a config.json with no quantization_config (and no quant_config.json) is no
    quantisation config either."""
    folder = v1_folder(tmp_path)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": K}))
    assert refused(folder, "V1_BAD_CONFIG", tmp_path, capsys).found == "none"


def test_v1_modules_to_not_convert_hold_no_qweight(tmp_path, capsys):
    """V1-4: a module the configuration leaves unquantised must not hold a qweight."""
    folder = v1_folder(tmp_path, quant={"modules_to_not_convert": ["q_proj"]})
    err = refused(folder, "V1_SHAPE_MISMATCH", tmp_path, capsys)
    assert V1_PREFIX in err.message and "modules_to_not_convert" in err.message
    assert err.found == "qweight"


@pytest.mark.parametrize("part", ["qzeros", "scales"])
def test_v1_layer_has_qzeros_and_scales(tmp_path, capsys, part):
    """V1-3: a layer missing its qzeros or scales is incomplete."""
    folder = v1_folder(tmp_path, edit=lambda t: t.pop(f"{V1_PREFIX}.{part}"))
    err = refused(folder, "V1_INCOMPLETE", tmp_path, capsys)
    assert err.expected == f"{V1_PREFIX}.{part}" and err.found == "absent"


QWEIGHT_NOT_INT32 = [
    ("qweight F32", "qweight", np.zeros((K, N // PF), np.float32)),
    ("qweight 1-D", "qweight", np.zeros(K * N // PF, np.int32)),
    ("qweight 3-D", "qweight", np.zeros((K, N // PF, 1), np.int32)),
    ("qzeros I64", "qzeros", np.zeros((1, N // PF), np.int64)),
]


@pytest.mark.parametrize(("case", "part", "value"), QWEIGHT_NOT_INT32,
                         ids=[c[0] for c in QWEIGHT_NOT_INT32])  # fmt: skip
def test_v1_qweight_and_qzeros_are_int32_matrices(tmp_path, capsys, case, part, value):
    """V1-4 (AWQ v1 packing: qweight I32 [k, n / pf], qzeros I32 [groups, n / pf])."""
    folder = v1_folder(tmp_path, edit=lambda t: t.update({f"{V1_PREFIX}.{part}": value}))
    err = refused(folder, "V1_SHAPE_MISMATCH", tmp_path, capsys)
    assert "qweight and qzeros" in err.message and "I32" in str(err.expected)


SCALES_WRONG = [
    ("scales I32", np.ones((1, N), np.int32), "I32 [1, 64]"),
    ("scales [2, 64]", np.ones((2, N), np.float16), "F16 [2, 64]"),
    ("scales [1, 32]", np.ones((1, N // 2), np.float16), "F16 [1, 32]"),
    ("scales 1-D", np.ones(N, np.float16), "F16 [64]"),
]


@pytest.mark.parametrize(("case", "value", "found"), SCALES_WRONG,
                         ids=[c[0] for c in SCALES_WRONG])  # fmt: skip
def test_v1_scales_are_float_groups_by_n(tmp_path, capsys, case, value, found):
    """V1-4: scales are F16, BF16 or F32 [groups, n]; here groups = 128 / 128 = 1, n = 64."""
    folder = v1_folder(tmp_path, edit=lambda t: t.update({f"{V1_PREFIX}.scales": value}))
    err = refused(folder, "V1_SHAPE_MISMATCH", tmp_path, capsys)
    assert "scales" in err.message and err.found == found
    assert "[1, 64]" in str(err.expected)


# ------------------------------------------------------------------------------ safetensors files


def _raw(path: Path, header: bytes, *, length: int | None = None, data: bytes = b"") -> None:
    """A safetensors file byte by byte: u64 length (``len(header)`` unless given), header, data."""
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)


@pytest.mark.parametrize("family", ["V1", "CT"])
@pytest.mark.parametrize("size", [0, 5])
def test_safetensors_file_holds_its_length_prefix(tmp_path, capsys, family, size):
    """V1-3, CT-4: a file shorter than the 8-byte header length is a truncated file."""
    folder = base(tmp_path, family)
    (folder / "model.safetensors").write_bytes(b"\x01" * size)
    err = refused(folder, f"{family}_INCOMPLETE", tmp_path, capsys)
    assert err.offset == 0 and "8 bytes" in str(err.expected) and err.found == size
    assert "truncated" in err.message


@pytest.mark.parametrize("family", ["V1", "CT"])
@pytest.mark.parametrize("past", ["by one byte", "the largest u64"])
def test_safetensors_header_lies_inside_the_file(tmp_path, capsys, family, past):
    """V1-3, CT-4: a header length that runs past the end of the file (by one byte, or the
    largest u64) is a truncated file; found is the length as stored."""
    folder = base(tmp_path, family)
    header = b'{"__metadata__": {}}'
    length = len(header) + 1 if past == "by one byte" else 2**64 - 1
    _raw(folder / "model.safetensors", header, length=length)
    err = refused(folder, f"{family}_INCOMPLETE", tmp_path, capsys)
    assert err.offset == 0 and err.found == length and "header length" in err.message


def test_safetensors_header_length_checked_for_a_lone_file(tmp_path, capsys):
    """V1-3: the same through a single file (it starts like safetensors: byte 8 is '{')."""
    (tmp_path / "lone").mkdir()
    path = tmp_path / "lone" / "weights.safetensors"
    _raw(path, b"{}", length=1000)
    assert refused(path, "V1_INCOMPLETE", tmp_path, capsys).found == 1000


@pytest.mark.parametrize("family", ["V1", "CT"])
@pytest.mark.parametrize("header", [b"{not json}", b'{"a": }', b'{"\xff": 1}'],
                         ids=["bare word", "no value", "not UTF-8"])  # fmt: skip
def test_safetensors_header_is_json(tmp_path, capsys, family, header):
    """V1-3, CT-4: a header that is not JSON (or not UTF-8) is refused at offset 8, where the
    JSON starts."""
    folder = base(tmp_path, family)
    _raw(folder / "model.safetensors", header)
    err = refused(folder, f"{family}_INCOMPLETE", tmp_path, capsys)
    assert err.offset == 8 and err.expected == "a JSON object" and "not JSON" in err.message


@pytest.mark.parametrize("family", ["V1", "CT"])
@pytest.mark.parametrize("dtype", ["C64", "F4", "f16", "I4"])
def test_safetensors_dtype_is_known(tmp_path, capsys, family, dtype):
    """V1-2, CT-2: a dtype outside safetensors' own list (or spelled otherwise) cannot be
    read exactly; the error names it and the known ones."""
    folder = base(tmp_path, family)
    entry = {"dtype": dtype, "shape": [2], "data_offsets": [0, 16]}
    _raw(folder / "model.safetensors", json.dumps({"x.weight": entry}).encode(), data=bytes(16))
    err = refused(folder, f"{family}_UNSUPPORTED", tmp_path, capsys)
    assert dtype in err.message and "'x.weight'" in err.message
    assert err.found == dtype and "F16" in err.expected and "BF16" in err.expected


def _unreadable(path: Path) -> None:
    """Make ``path`` a regular file whose read fails (EIO): a link to this process's own
    memory, whose page 0 is never mapped.  (A mode of 000 does not stop root.)"""
    path.unlink(missing_ok=True)
    path.symlink_to("/proc/self/mem")


needs_proc_mem = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.path.exists("/proc/self/mem"),
    reason="needs Linux's /proc/self/mem for a regular file that cannot be read",
)


@needs_proc_mem
@pytest.mark.parametrize("family", ["V1", "CT"])
def test_unreadable_config_json(tmp_path, capsys, family):
    """V1-2 (an unreadable configuration) and CT-3's note: a config.json that cannot be read
    does not say which reader applies, so both bases give V1_BAD_CONFIG."""
    folder = base(tmp_path, family)
    _unreadable(folder / "config.json")
    err = refused(folder, "V1_BAD_CONFIG", tmp_path, capsys)
    assert "config.json cannot be read" in err.message and err.found == "Input/output error"


@needs_proc_mem
def test_unreadable_quant_config_json(tmp_path, capsys):
    """V1-2: the legacy quant_config.json, unreadable, is refused the same way."""
    folder = v1_folder(tmp_path, config=False)
    _unreadable(folder / "quant_config.json")
    err = refused(folder, "V1_BAD_CONFIG", tmp_path, capsys)
    assert "quant_config.json cannot be read" in err.message


@needs_proc_mem
@pytest.mark.parametrize("family", ["V1", "CT"])
def test_unreadable_shard_index(tmp_path, capsys, family):
    """V1-2 (an unreadable configuration), CT-3: the shard index, unreadable, is refused
    before any shard is opened, as ``*_BAD_CONFIG`` like an index that is not an object of
    file names."""
    folder = base(tmp_path, family)
    _unreadable(folder / "model.safetensors.index.json")
    err = refused(folder, f"{family}_BAD_CONFIG", tmp_path, capsys)
    assert "model.safetensors.index.json cannot be read" in err.message


@needs_proc_mem
@pytest.mark.parametrize("family", ["V1", "CT"])
def test_unreadable_shard_is_an_input_error(tmp_path, capsys, family):
    """A shard that cannot be read is no format error but an unreadable input: an OSError that
    names the shard from ``reference.open``, exit status 3 (their I/O status) from convert,
    which names it too, and from dump."""
    folder = base(tmp_path, family)
    shard = folder / "model.safetensors"
    _unreadable(shard)
    with pytest.raises(OSError, match="Input/output error") as raised:
        reference.open(folder)
    assert raised.value.filename == str(shard)
    dst = tmp_path / "out.awq2"
    assert convert_main([str(folder), str(dst), "--quiet"]) == 3
    assert str(shard) in capsys.readouterr().err
    assert not dst.exists()
    assert dump_main([str(folder), "--json"], out=io.StringIO()) == 3


@pytest.mark.parametrize("family", ["V1", "CT"])
def test_tensor_not_in_the_checkpoint(tmp_path, family):
    """RD API: a name the checkpoint does not present (for compressed-tensors, a stored part
    such as weight_packed is not presented either) is TensorNotFoundError, a KeyError, from
    ``entry()`` and ``tensor()``; iteration gives exactly the presented names."""
    stored_part = f"{CT_PREFIX}.weight_packed" if family == "CT" else ""
    with reference.open(base(tmp_path, family)) as src:
        assert list(src) == src.names() and stored_part not in src.names()
        for name in ("model.layers.0.self_attn.q_proj.weight", stored_part):
            with pytest.raises(TensorNotFoundError):
                src.entry(name)
            with pytest.raises(KeyError):
                src.tensor(name)


@pytest.mark.parametrize("family", ["V1", "CT"])
def test_linear_of_a_prefix_that_is_no_layer(tmp_path, family):
    """RD API: ``linear()`` of a dense tensor's prefix, or of nothing stored, is
    TensorNotFoundError naming the qweight it looked for."""
    with reference.open(base(tmp_path, family)) as src:
        for prefix in ("model.embed_tokens", "model.layers.9.mlp.up_proj"):
            with pytest.raises(TensorNotFoundError, match=f"{prefix}.qweight"):
                src.linear(prefix)


def test_shard_replaced_after_opening(tmp_path):
    """V1-3: a shard rewritten after opening by a valid one that lacks a tensor its header had
    (the same file, shorter now), or replaced by another file renamed over it, is refused when
    the tensor is read (offset: where the payload was), not a traceback or a SIGBUS."""
    folder = v1_folder(tmp_path)
    with reference.open(folder) as v1:
        offset = v1.entry("model.embed_tokens.weight").offset
        write_safetensors(folder / "model.safetensors", {"other": np.zeros(4, np.float16)})
        with pytest.raises(reference.LegacyError) as raised:
            v1.tensor("model.embed_tokens.weight")
    err = raised.value
    assert err.code == "V1_INCOMPLETE" and err.offset == offset
    assert "model.safetensors: tensor 'model.embed_tokens.weight' runs past the end" in err.message
    assert err.expected == "1024 bytes" and err.found == "0 bytes"
    (tmp_path / "renamed").mkdir()
    folder = v1_folder(tmp_path / "renamed")
    with reference.open(folder) as v1:
        other = folder / "other.safetensors"
        write_safetensors(other, {"model.embed_tokens.weight": np.ones(512, np.float16)})
        other.replace(folder / "model.safetensors")
        with pytest.raises(reference.LegacyError) as raised:
            v1.tensor("model.embed_tokens.weight")
    err = raised.value
    assert err.code == "V1_INCOMPLETE" and "model.safetensors was replaced" in err.message
    assert err.expected == "the file whose header was read" and err.found == "another file"


# ------------------------------------------------------------------------------ compressed-tensors


@pytest.mark.parametrize("fmt", [5, ["pack-quantized"], {"f": 1}])
def test_ct_format_is_a_string(tmp_path, capsys, fmt):
    """CT-3: quantization_config.format has the compressed-tensors type, a string."""
    err = refused(ct_folder(tmp_path, quant={"format": fmt}), "CT_BAD_CONFIG", tmp_path, capsys)
    assert "quantization_config.format" in err.message and err.expected == "pack-quantized"


@pytest.mark.parametrize("scheme", [None, ["Linear"], "W4A16"])
def test_ct_config_group_is_an_object(tmp_path, capsys, scheme):
    """CT-3: config_groups is an object of groups, each an object."""
    folder = ct_folder(tmp_path, quant={"config_groups": {"group_0": scheme}})
    err = refused(folder, "CT_BAD_CONFIG", tmp_path, capsys)
    assert "config_groups.group_0" in err.message and err.expected == "an object"


def test_ct_scheme_has_no_unknown_fields(tmp_path, capsys):
    """CT-2 (what it does not know may change the arithmetic): a scheme field outside
    QuantizationScheme's targets, weights, input/output_activations and format."""
    folder = ct_folder(tmp_path, group={"codebook": "nf4"})
    err = refused(folder, "CT_UNSUPPORTED", tmp_path, capsys)
    assert "config_groups.group_0" in err.message and err.found == str(["codebook"])
    assert "weights" in str(err.expected) and "targets" in str(err.expected)


@pytest.mark.parametrize("targets", [None, "Linear", ["Linear", 3]])
def test_ct_targets_are_a_list_of_names(tmp_path, capsys, targets):
    """CT-3: every group has targets, a list of names."""
    folder = ct_folder(tmp_path, group={"targets": targets})
    err = refused(folder, "CT_BAD_CONFIG", tmp_path, capsys)
    assert "group_0.targets" in err.message and err.expected == "a list of str"


def test_ct_group_without_weights_is_not_w4a16(tmp_path, capsys):
    """CT-2: a scheme whose weights are null quantises no weight (QuantizationScheme allows
    it), so it is not W4A16."""
    folder = ct_folder(tmp_path, quant={"config_groups": {"group_0": {"targets": ["Linear"]}}})
    err = refused(folder, "CT_UNSUPPORTED", tmp_path, capsys)
    assert "group_0.weights" in err.message and err.found == "None"


@pytest.mark.parametrize("weights", ["int4", [4], 4])
def test_ct_weights_are_an_object(tmp_path, capsys, weights):
    """CT-3: a group's weights, when present, are an object (QuantizationArgs); another type
    is a bad configuration, not an unsupported one."""
    config = {"config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}
    err = refused(ct_folder(tmp_path, quant=config), "CT_BAD_CONFIG", tmp_path, capsys)
    assert "group_0.weights" in err.message and err.expected == "an object"


@pytest.mark.parametrize("group_size", ["128", 128.0, True, [128]])
def test_ct_group_size_is_an_integer(tmp_path, capsys, group_size):
    """CT-3: weights.group_size is an integer or null."""
    err = refused(ct_folder(tmp_path, weights={"group_size": group_size}), "CT_BAD_CONFIG",
                  tmp_path, capsys)  # fmt: skip
    assert "weights.group_size" in err.message and err.expected == "int or null"


def test_ct_strategy_inferred_from_group_size(tmp_path):
    """CT-2 with QuantizationArgs' inference: no strategy and group_size 128 is "group", read
    as the base is."""
    with reference.open(ct_folder(tmp_path, weights={"strategy": None})) as ct:
        assert ct.linear(CT_PREFIX).group_size == 128


def test_ct_no_strategy_and_no_group_size_is_tensor(tmp_path, capsys):
    """CT-2: no strategy and no group size is the "tensor" strategy (one scale for the whole
    tensor), which is neither group nor channel."""
    folder = ct_folder(tmp_path, weights={"strategy": None, "group_size": None})
    err = refused(folder, "CT_UNSUPPORTED", tmp_path, capsys)
    assert "weights.strategy" in err.message and "tensor" in str(err.found)


@pytest.mark.parametrize("strategy", [1, ["group"], {"s": "group"}])
def test_ct_strategy_is_a_string(tmp_path, capsys, strategy):
    """CT-3: weights.strategy, when given, is a string."""
    err = refused(ct_folder(tmp_path, weights={"strategy": strategy}), "CT_BAD_CONFIG",
                  tmp_path, capsys)  # fmt: skip
    assert "weights.strategy" in err.message and "group" in str(err.expected)


def test_ct_reader_needs_a_compressed_tensors_config(tmp_path):
    """CT-1, CT-3: CompressedReader itself refuses a checkpoint whose config.json does not
    name compressed-tensors (``reference.open`` sends such a folder to the AWQ v1 reader)."""
    folder = v1_folder(tmp_path)
    with reference.open(folder) as v1:
        assert not isinstance(v1, CompressedReader)
    with pytest.raises(reference.LegacyError) as raised:
        CompressedReader(folder)
    err = raised.value
    assert err.code == "CT_BAD_CONFIG" and "config.json" in err.message
    assert err.expected == "compressed-tensors"


WEIGHT_SHAPE_WRONG = [
    ("F32", np.array([CT_OUT, CT_IN], np.float32), "F32 [2]"),
    ("three values", np.array([CT_OUT, CT_IN, 1], np.int64), "I64 [3]"),
    ("a matrix", np.array([[CT_OUT, CT_IN]], np.int64), "I64 [1, 2]"),
]


@pytest.mark.parametrize(("case", "value", "found"), WEIGHT_SHAPE_WRONG,
                         ids=[c[0] for c in WEIGHT_SHAPE_WRONG])  # fmt: skip
def test_ct_weight_shape_is_two_integers(tmp_path, capsys, case, value, found):
    """CT-5: weight_shape is I32 or I64 [2] (format.md's table: ``[n, k]``)."""
    folder = ct_folder(tmp_path, edit=lambda t: t.update({f"{CT_PREFIX}.weight_shape": value}))
    err = refused(folder, "CT_SHAPE_MISMATCH", tmp_path, capsys)
    assert "weight_shape" in err.message and err.found == found
    assert "[2]" in str(err.expected)


@pytest.mark.parametrize("sizes", [[0, CT_IN], [CT_OUT, 0], [-CT_OUT, CT_IN], [CT_OUT, -1]])
def test_ct_weight_shape_sizes_are_positive(tmp_path, capsys, sizes):
    """CT-5: a layer of no (or negative) outputs or inputs disagrees with its weight_packed."""
    value = np.array(sizes, np.int64)
    folder = ct_folder(tmp_path, edit=lambda t: t.update({f"{CT_PREFIX}.weight_shape": value}))
    err = refused(folder, "CT_SHAPE_MISMATCH", tmp_path, capsys)
    assert "weight_shape" in err.message and err.found == sizes


G_IDX_WRONG = [
    ("F32", np.zeros(CT_IN, np.float32), f"F32 [{CT_IN}]"),
    ("one short", np.zeros(CT_IN - 1, np.int32), f"I32 [{CT_IN - 1}]"),
    ("a matrix", np.zeros((1, CT_IN), np.int32), f"I32 [1, {CT_IN}]"),
]


@pytest.mark.parametrize(("case", "value", "found"), G_IDX_WRONG,
                         ids=[c[0] for c in G_IDX_WRONG])  # fmt: skip
def test_ct_g_idx_is_one_integer_per_input(tmp_path, capsys, case, value, found):
    """CT-5 (format.md's table: weight_g_idx I32 [k], k = 256 here)."""
    folder = ct_folder(tmp_path, edit=lambda t: t.update({f"{CT_PREFIX}.weight_g_idx": value}))
    err = refused(folder, "CT_SHAPE_MISMATCH", tmp_path, capsys)
    assert "weight_g_idx" in err.message and err.found == found
    assert f"[{CT_IN}]" in str(err.expected)


@pytest.mark.parametrize("part", ["qweight", "qzeros", "scales"])
def test_ct_no_stored_tensor_has_a_presented_name(tmp_path, capsys, part):
    """CT-1, CT-5: a layer is presented as <prefix>.qweight, .qzeros and .scales; a stored
    tensor of one of those names beside it would be a second tensor of that name."""
    name = f"{CT_PREFIX}.{part}"
    folder = ct_folder(tmp_path, edit=lambda t: t.update({name: np.zeros(4, np.float16)}))
    err = refused(folder, "CT_SHAPE_MISMATCH", tmp_path, capsys)
    assert repr(name) in err.message and err.found == "two"
