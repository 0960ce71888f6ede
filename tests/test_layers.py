"""Quantised layers through the writer and the reader: linear(), dequantize(), TP shards."""

from __future__ import annotations

import numpy as np
import pytest

import reference
from reference.quant import codec
from tools.vectors.surgery import FileEditor

GROUPS = [-1, 32, 64, 128]


def make_layer(rng, k, n, bits, group_size, scale_dtype=np.float16):
    g = 1 if group_size == -1 else k // group_size
    q = rng.integers(0, 2**bits, (k, n), dtype=np.uint8)
    z = rng.integers(0, 2**bits, (g, n), dtype=np.uint8)
    s = (rng.random((g, n)) * 0.1 + 0.01).astype(scale_dtype)
    return q, z, s


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [*GROUPS, 256])
def test_written_layer_reads_back_as_the_codec_computes(tmp_path, bits, group_size):
    """LAY-8: Marlin when the shape rules hold; linear() equals the codec applied directly."""
    rng = np.random.default_rng(bits * 1000 + group_size)
    k, n = 256, 192
    q, z, s = make_layer(rng, k, n, bits, group_size)
    bias = rng.standard_normal(n).astype(np.float16)
    path = tmp_path / "l.awq2"
    with reference.Writer(path) as w:
        family = w.add_linear("model.layers.0.mlp.up_proj", q=q, z=z, scales=s, bits=bits,
                              group_size=group_size, bias=bias)  # fmt: skip
    assert family == ("MARLIN" if group_size in GROUPS else "AWQ")
    with reference.open(path, validate=True) as f:
        f.verify()
        layer = f.linear("model.layers.0.mlp.up_proj")
        assert (layer.k, layer.n, layer.bits, layer.group_size) == (k, n, bits, group_size)
        assert layer.scale_dtype == "F16" and layer.layout == family
        if family == "MARLIN":
            np.testing.assert_array_equal(layer.qweight, codec.swizzle_qweight(q, bits))
            np.testing.assert_array_equal(layer.scales, codec.swizzle_scales(s, k, group_size))
            np.testing.assert_array_equal(layer.qzeros, codec.swizzle_zeros(z, bits))
        else:
            np.testing.assert_array_equal(layer.qweight, codec.awq_pack(q, bits))
            np.testing.assert_array_equal(layer.qzeros, codec.awq_pack(z, bits))
            np.testing.assert_array_equal(layer.scales, s)
        np.testing.assert_array_equal(layer.bias, bias)
        assert not layer.qweight.flags.owndata  # a view of the mapped file
        expected = codec.dequantize(q, z, s, group_size)
        np.testing.assert_array_equal(f.dequantize("model.layers.0.mlp.up_proj"), expected)
        assert f.layers() == ["model.layers.0.mlp.up_proj"]


def test_non_marlin_shapes_use_the_awq_layouts(tmp_path):
    """LAY-8: n % 64 != 0 or k % 128 != 0 -> AWQ_* layouts, logical shape kept."""
    rng = np.random.default_rng(5)
    path = tmp_path / "odd.awq2"
    shapes = {
        "n_not_64": (256, 72, 64),
        "k_not_128": (192, 128, 64),
        "group_size_k": (128, 64, 128),
    }
    layers = {}
    with reference.Writer(path) as w:
        for name, (k, n, g) in shapes.items():
            layers[name] = make_layer(rng, k, n, 4, g)
            w.add_linear(name, q=layers[name][0], z=layers[name][1], scales=layers[name][2],
                         bits=4, group_size=g)  # fmt: skip
    with reference.open(path, validate=True) as f:
        assert f.linear("n_not_64").layout == "AWQ"
        assert f.linear("k_not_128").layout == "AWQ"
        assert f.linear("group_size_k").layout == "MARLIN"  # group_size == k is Marlin-legal
        for name, (q, z, s) in layers.items():
            np.testing.assert_array_equal(
                f.dequantize(name), codec.dequantize(q, z, s, shapes[name][2])
            )


def test_awq_v1_input_gives_the_same_bytes_as_codes(tmp_path):
    rng = np.random.default_rng(9)
    q, z, s = make_layer(rng, 256, 128, 4, 128)
    a, b = tmp_path / "a.awq2", tmp_path / "b.awq2"
    with reference.Writer(a) as w:
        w.add_linear("x", q=q, z=z, scales=s, bits=4, group_size=128)
    with reference.Writer(b) as w:
        w.add_linear("x", qweight=codec.awq_pack(q, 4), qzeros=codec.awq_pack(z, 4), scales=s,
                     bits=4, group_size=128)  # fmt: skip
    assert a.read_bytes() == b.read_bytes()


def test_bf16_scales_are_recorded_and_widened_exactly(tmp_path):
    """LAY-6: the scales' dtype is recorded, never converted."""
    rng = np.random.default_rng(3)
    q, z, s32 = make_layer(rng, 128, 64, 4, 64, np.float32)
    bf16_bits = (s32.view(np.uint32) >> 16).astype(np.uint16)  # truncate to bfloat16
    with reference.Writer(tmp_path / "bf.awq2") as w:
        w.add_linear("x", q=q, z=z, scales=bf16_bits, bits=4, group_size=64, scale_dtype="BF16")
    with reference.open(tmp_path / "bf.awq2", validate=True) as f:
        layer = f.linear("x")
        assert layer.scale_dtype == "BF16" and f.entry("x.scales").dtype == "BF16"
        widened = (bf16_bits.astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(f.dequantize("x"), codec.dequantize(q, z, widened, 64))


def _legal(k, n, group_size, parallel):
    for t in (1, 2, 4, 8):
        if parallel == "column" and n % t == 0 and (n // t) % 64 == 0:
            yield t
        if (
            parallel == "row"
            and k % t == 0
            and (k // t) % 128 == 0
            and (group_size == -1 or (k // t) % group_size == 0)
        ):
            yield t


@pytest.mark.parametrize("parallel", ["column", "row"])
@pytest.mark.parametrize(
    ("k", "n", "group_size"), [(1024, 256, 128), (512, 512, 64), (256, 128, -1)]
)
def test_tp_shards_equal_swizzling_the_shard(tmp_path, parallel, k, n, group_size):
    """Slicing the stored Marlin tensors equals swizzling the unswizzled shard, for every
    legal (t, r), including row shards whose k equals the group size (scale map switch)."""
    rng = np.random.default_rng(k + n)
    q, z, s = make_layer(rng, k, n, 4, group_size)
    bias = np.arange(n, dtype=np.float16)
    path = tmp_path / "tp.awq2"
    with reference.Writer(path) as w:
        w.add_linear("x", q=q, z=z, scales=s, bits=4, group_size=group_size, bias=bias)
    with reference.open(path) as f:
        for t in _legal(k, n, group_size, parallel):
            for r in range(t):
                got = f.linear("x", tp_rank=r, tp_size=t, parallel=parallel)
                if parallel == "column":
                    cols = slice(r * n // t, (r + 1) * n // t)
                    qs, zs, ss, ks = q[:, cols], z[:, cols], s[:, cols], k
                    np.testing.assert_array_equal(got.bias, bias[cols])
                else:
                    rows = slice(r * k // t, (r + 1) * k // t)
                    groups = slice(None)  # channelwise: every rank has all of z and s
                    if group_size != -1:
                        groups = slice(rows.start // group_size, rows.stop // group_size)
                    qs, zs, ss, ks = q[rows], z[groups], s[groups], k // t
                np.testing.assert_array_equal(got.qweight, codec.swizzle_qweight(qs, 4))
                np.testing.assert_array_equal(got.qzeros, codec.swizzle_zeros(zs, 4))
                np.testing.assert_array_equal(got.scales, codec.swizzle_scales(ss, ks, group_size))
                assert (got.k, got.tp_rank, got.tp_size) == (ks, r, t)


def test_tp_edge_case_k_shard_equals_group_size(tmp_path):
    """Codec chapter, tensor parallelism: TP=8, k=1024, g=128 -> k_shard == group_size switches to the channelwise map."""
    rng = np.random.default_rng(11)
    q, z, s = make_layer(rng, 1024, 128, 4, 128)
    with reference.Writer(tmp_path / "e.awq2") as w:
        w.add_linear("x", q=q, z=z, scales=s, bits=4, group_size=128)
    with reference.open(tmp_path / "e.awq2") as f:
        full = f.linear("x").scales
        shard = f.linear("x", tp_rank=3, tp_size=8, parallel="row")
        assert not np.array_equal(shard.scales, full[3:4])  # naive slicing would be wrong
        np.testing.assert_array_equal(shard.scales, codec.swizzle_scales(s[3:4], 128, 128))


def test_illegal_tp_is_refused(tmp_path):
    rng = np.random.default_rng(1)
    q, z, s = make_layer(rng, 256, 128, 4, 128)
    with reference.Writer(tmp_path / "i.awq2") as w:
        w.add_linear("x", q=q, z=z, scales=s, bits=4, group_size=128)
    with reference.open(tmp_path / "i.awq2") as f:
        with pytest.raises(codec.CodecError):
            f.linear("x", tp_rank=0, tp_size=4, parallel="column")  # n shard 32 < 64
        with pytest.raises(codec.CodecError):
            f.linear("x", tp_rank=2, tp_size=2, parallel="row")  # rank out of range
        with pytest.raises(ValueError):
            f.linear("x", tp_rank=0, tp_size=2, parallel="diagonal")


@pytest.mark.parametrize(
    ("part", "fields", "what"),
    [
        ("qweight", {"k": 200}, "k not a multiple of 128 in a Marlin layout"),
        ("scales", {"group_size": 96}, "group size not dividing k"),
        ("qzeros", {"bits": 3}, "bits not 4 or 8"),
        ("scales", {"n": 64}, "scales shape wrong for n"),
        ("qweight", {"layout": 1}, "AWQ layout with a Marlin shape"),
    ],
)
def test_quant_fields_that_contradict_the_tensor_are_rejected(tmp_path, part, fields, what):
    """LAY-3..LAY-5: the entry's k, n, bits and group size must give its dtype and shape."""
    rng = np.random.default_rng(2)
    q, z, s = make_layer(rng, 256, 128, 4, 128)
    path = tmp_path / "q.awq2"
    with reference.Writer(path) as w:
        w.add_linear("x", q=q, z=z, scales=s, bits=4, group_size=128)
    ed = FileEditor(path.read_bytes())
    ed.set_entry(ed.entry_of(f"x.{part}"), **fields).refresh()
    path.write_bytes(ed.bytes())
    with reference.open(path) as f:
        with pytest.raises(reference.FormatError) as info:
            f.validate()
        assert info.value.code == "BAD_QUANT_FIELDS", (what, str(info.value))


def test_layer_parts_that_disagree_are_rejected(tmp_path):
    """LAY-7: one layer, one (k, n, bits, group size) and one layout family."""
    rng = np.random.default_rng(4)
    q, z, s = make_layer(rng, 256, 128, 4, 128)
    q2, z2, s2 = make_layer(rng, 256, 128, 4, 64)
    path = tmp_path / "d.awq2"
    with reference.Writer(path) as w:
        w.add_linear("x", q=q, z=z, scales=s, bits=4, group_size=128)
        w.add_linear("y", q=q2, z=z2, scales=s2, bits=4, group_size=64)
    # give layer x the zero points of layer y: each entry valid alone, the layer inconsistent
    ed = FileEditor(path.read_bytes())
    with reference.open(path) as f:
        good = f.entry("y.qzeros")
    zx = ed.entry_of("x.qzeros")
    e = ed.entries()[ed.entry_of("y.qzeros")]
    ed.set_entry(zx, data_offset=int(e["data_offset"]), data_length=int(e["data_length"]),
                 group_size=64, data_crc=int(e["data_crc"]))  # fmt: skip
    d = ed.entries()[zx]["dims_index"]
    ed.set_bytes(ed.dims_offset + 8 * int(d), int(good.shape[0]).to_bytes(8, "little")).refresh()
    path.write_bytes(ed.bytes())
    with reference.open(path) as f:
        with pytest.raises(reference.FormatError) as info:
            f.linear("x")
        assert info.value.code == "BAD_QUANT_FIELDS"
        assert "disagrees" in info.value.message


def test_bias_of_the_wrong_shape_is_refused_before_anything_is_written(tmp_path):
    """A layer's bias is [n]; a wrong one is refused before the layer's first entry."""
    rng = np.random.default_rng(3)
    q, z, s = make_layer(rng, 128, 64, 4, 64)
    path = tmp_path / "l.awq2"
    with reference.Writer(path) as w:
        with pytest.raises(ValueError, match=r"bias of shape \(63,\)"):
            w.add_linear("p", q=q, z=z, scales=s, bits=4, group_size=64,
                         bias=np.zeros(63, np.float16))  # fmt: skip
        w.add("other", np.arange(3))
    with reference.open(path, validate=True) as f:
        assert f.names() == ["other"]


def test_writer_refuses_quantised_entries_that_are_not_whole_layers(tmp_path):
    """LAY-7 at close: a lone MARLIN_QWEIGHT entry (no scales, no qzeros) is refused and
    nothing is published; the same entries completed into a layer are written."""
    rng = np.random.default_rng(5)
    q, z, s = make_layer(rng, 128, 64, 4, 64)
    qweight = codec.swizzle_qweight(q, 4)
    path = tmp_path / "lone.awq2"
    fields = dict(bits=4, group_size=64, k=128, n=64)
    with pytest.raises(ValueError, match="LAY-7"):
        with reference.Writer(path) as w:
            w.add("p.qweight", qweight, layout="MARLIN_QWEIGHT", **fields)
    assert not path.exists()
    with reference.Writer(path) as w:
        w.add("p.qweight", qweight, layout="MARLIN_QWEIGHT", **fields)
        w.add("p.scales", codec.swizzle_scales(s, 128, 64), layout="MARLIN_SCALES", **fields)
        w.add("p.qzeros", codec.swizzle_zeros(z, 4), layout="MARLIN_QZEROS", **fields)
    with reference.open(path, validate=True) as f:
        np.testing.assert_array_equal(f.dequantize("p"), codec.dequantize(q, z, s, 64))
