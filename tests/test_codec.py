"""Tests of reference/quant/codec.py: round trips, the codec chapter's check value, a slow loop reference,
vLLM golden hashes, tensor-parallel shards and the error rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import marlin_slow as slow
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.quant import codec
from reference.quant.codec import CodecError

GOLDEN = Path(__file__).parent / "data" / "vllm_marlin_golden.json"
GROUP_SIZES = (-1, 32, 64, 128)


# ---------------------------------------------------------------------------------------------
# Helpers.


def draw_layer(
    seed: int, k: int, n: int, bits: int, group_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The golden file's recipe: codes q, zeros z and float16 scales s."""
    rng = np.random.default_rng(seed)
    g = 1 if group_size == -1 else k // group_size
    q = rng.integers(0, 2**bits, size=(k, n), dtype=np.uint8)
    z = rng.integers(0, 2**bits, size=(g, n), dtype=np.uint8)
    s = rng.standard_normal(size=(g, n)).astype(np.float16)
    return q, z, s


def _unsigned(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"<u{a.dtype.itemsize}"))


def assert_marlin_equal(
    actual: np.ndarray, expected: np.ndarray, *, what: str, bits: int | None = None
) -> None:
    """Bit-exact comparison that names the first differing word and its differing bits.

    With ``bits`` the arrays are Marlin qweights and the report names the 16-row block, the
    64-column tile, the word inside the tile and the fields that differ.
    """
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape or a.dtype != e.dtype:
        raise AssertionError(f"{what}: got {a.dtype}{a.shape}, expected {e.dtype}{e.shape}")
    ua, ue = _unsigned(a), _unsigned(e)
    bad = np.flatnonzero(ua != ue)
    if bad.size == 0:
        return
    cols = a.shape[1] if a.ndim == 2 else 1
    row, col = divmod(int(bad[0]), cols)
    va, ve = int(ua.reshape(-1)[bad[0]]), int(ue.reshape(-1)[bad[0]])
    width = 2 * a.dtype.itemsize
    where = f"[{row}, {col}]"
    detail = ""
    if bits is not None:
        pf = 32 // bits
        per_tile = 1024 // pf
        tile, word = divmod(col, per_tile)
        diff = va ^ ve
        fields = [f for f in range(pf) if (diff >> (bits * f)) & ((1 << bits) - 1)]
        lane, sub = divmod(word, 4) if bits == 4 else divmod(word // 2, 4)
        where = (
            f"row {row} (k {16 * row}..{16 * row + 15}), tile {tile}, word {word} of the tile"
            f" (lane {lane}, sub-tile {sub})"
        )
        detail = f", differing bits 0x{diff:08x} (fields {fields})"
    raise AssertionError(
        f"{what}: {bad.size} of {ua.size} words differ; first at {where}: "
        f"got 0x{va:0{width}x}, expected 0x{ve:0{width}x}{detail}"
    )


def sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


@st.composite
def layers(draw: Any, k_step: int = 128) -> tuple[int, int, int, int, int]:
    bits = draw(st.sampled_from([4, 8]))
    k = k_step * draw(st.integers(1, 512 // k_step))
    n = 64 * draw(st.integers(1, 8))
    gs = draw(st.sampled_from([*GROUP_SIZES, k]))
    if gs != -1 and k % gs:
        gs = -1
    seed = draw(st.integers(0, 2**32 - 1))
    return bits, k, n, gs, seed


# ---------------------------------------------------------------------------------------------
# Round trips.


@settings(max_examples=60, deadline=None)
@given(layers(k_step=16))
def test_qweight_round_trip(layer: tuple[int, int, int, int, int]) -> None:
    bits, k, n, _, seed = layer
    q, _, _ = draw_layer(seed, k, n, bits, -1)
    mq = codec.swizzle_qweight(q, bits)
    assert mq.dtype == np.int32 and mq.shape == (k // 16, n * 16 * bits // 32)
    back = codec.unswizzle_qweight(mq, k, n, bits)
    assert back.dtype == np.uint8
    assert_marlin_equal(back, q, what="unswizzle(swizzle(q))")


@settings(max_examples=60, deadline=None)
@given(layers())
def test_scales_and_zeros_round_trip(layer: tuple[int, int, int, int, int]) -> None:
    bits, k, n, gs, seed = layer
    _, z, s = draw_layer(seed, k, n, bits, gs)
    for dtype in (np.float16, np.float32):
        ms = codec.swizzle_scales(s.astype(dtype), k, gs)
        assert ms.dtype == dtype and ms.shape == s.shape
        assert_marlin_equal(codec.unswizzle_scales(ms, k, gs), s.astype(dtype), what="scales")
    mz = codec.swizzle_zeros(z, bits)
    assert mz.dtype == np.int32 and mz.shape == (z.shape[0], n * bits // 32)
    assert_marlin_equal(codec.unswizzle_zeros(mz, n, bits), z, what="zeros")


@settings(max_examples=40, deadline=None)
@given(layers(k_step=1))
def test_awq_pack_round_trip(layer: tuple[int, int, int, int, int]) -> None:
    bits, k, n, _, seed = layer
    q, _, _ = draw_layer(seed, k, n, bits, -1)
    packed = codec.awq_pack(q, bits)
    assert packed.dtype == np.int32 and packed.shape == (k, n * bits // 32)
    assert_marlin_equal(codec.awq_unpack(packed, bits), q, what="awq_unpack(awq_pack(q))")


def test_out_parameter_writes_in_place() -> None:
    q, _, _ = draw_layer(5, 256, 128, 4, -1)
    out = np.full((16, 256), -1, dtype=np.int32)
    assert codec.swizzle_qweight(q, 4, out=out) is out
    assert_marlin_equal(out, codec.swizzle_qweight(q, 4), what="out=", bits=4)
    back = np.zeros_like(q)
    assert codec.unswizzle_qweight(out, 256, 128, 4, out=back) is back
    assert np.array_equal(back, q)


# ---------------------------------------------------------------------------------------------
# The codec chapter's check value (docs/spec/codec.md) and the slow loop reference.


def test_marlin_check_value_first_word() -> None:
    positions = [(0, 0), (8, 0), (0, 8), (8, 8), (1, 0), (9, 0), (1, 8), (9, 8)]
    q = np.zeros((128, 64), dtype=np.uint8)
    for field, (kk, nn) in enumerate(positions):
        q[kk, nn] = field + 8  # distinct codes 8..15, none zero
    word = int(codec.swizzle_qweight(q, 4).view(np.uint32)[0, 0])
    nibbles = [(word >> (4 * f)) & 0xF for f in range(8)]
    assert nibbles == [8, 9, 10, 11, 12, 13, 14, 15]
    # The 8-bit analogue: word 0 holds bytes (dk, hk) of lane 0, sub-tile 0, blk 0.
    q8 = np.zeros((128, 64), dtype=np.uint8)
    for byte, (kk, nn) in enumerate([(0, 0), (8, 0), (1, 0), (9, 0)]):
        q8[kk, nn] = 200 + byte
    word8 = int(codec.swizzle_qweight(q8, 8).view(np.uint32)[0, 0])
    assert [(word8 >> (8 * b)) & 0xFF for b in range(4)] == [200, 201, 202, 203]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("k", "n"), [(16, 64), (128, 128), (48, 192), (256, 256)])
def test_qweight_matches_slow_reference(bits: int, k: int, n: int) -> None:
    q, _, _ = draw_layer(k * 1000 + n + bits, k, n, bits, -1)
    want = np.array(slow.swizzle_qweight(q.tolist(), bits), dtype=np.uint32).view(np.int32)
    mq = codec.swizzle_qweight(q, bits)
    assert_marlin_equal(mq, want, what=f"swizzle_qweight {bits}-bit {k}x{n}", bits=bits)
    back = slow.unswizzle_qweight(mq.view(np.uint32).tolist(), k, n, bits)
    assert np.array_equal(np.array(back, dtype=np.uint8), q)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [-1, 32, 64, 128, 256])
def test_scales_zeros_pack_match_slow_reference(bits: int, group_size: int) -> None:
    k, n = 256, 192
    q, z, s = draw_layer(group_size + 7 * bits, k, n, bits, group_size)
    want_s = np.array(slow.swizzle_scales(s.tolist(), k, group_size), dtype=np.float16)
    assert_marlin_equal(codec.swizzle_scales(s, k, group_size), want_s, what="scales")
    want_z = np.array(slow.swizzle_zeros(z.tolist(), bits), dtype=np.uint32).view(np.int32)
    assert_marlin_equal(codec.swizzle_zeros(z, bits), want_z, what="zeros")
    want_q = np.array(slow.awq_pack(q.tolist(), bits), dtype=np.uint32).view(np.int32)
    assert_marlin_equal(codec.awq_pack(q, bits), want_q, what="awq_pack")


def test_channelwise_map_applies_when_group_size_equals_k() -> None:
    _, _, s = draw_layer(3, 128, 128, 4, 128)
    assert codec.is_channelwise(128, 128) and not codec.is_channelwise(256, 128)
    assert np.array_equal(codec.swizzle_scales(s, 128, 128), codec.swizzle_scales(s, 128, -1))
    assert not np.array_equal(
        codec.swizzle_scales(s, 128, 128), codec._transpose8x8(s)
    )  # the grouped map would differ


# ---------------------------------------------------------------------------------------------
# Dequantisation and the AWQ v1 -> Marlin repack.


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [-1, 32, 64, 128, 256])
def test_dequantize_v1_and_marlin_agree(bits: int, group_size: int) -> None:
    k, n = 256, 128
    q, z, s = draw_layer(11 + group_size, k, n, bits, group_size)
    qw, qz = codec.awq_pack(q, bits), codec.awq_pack(z, bits)
    w_v1 = codec.dequantize(codec.awq_unpack(qw, bits), codec.awq_unpack(qz, bits), s, group_size)
    mq, ms, mz = codec.awq_to_marlin(qw, qz, s, bits=bits, group_size=group_size)
    w_m = codec.dequantize(
        codec.unswizzle_qweight(mq, k, n, bits),
        codec.unswizzle_zeros(mz, n, bits),
        codec.unswizzle_scales(ms, k, group_size),
        group_size,
    )
    assert w_v1.dtype == np.float32 and w_v1.shape == (k, n)
    assert np.array_equal(w_v1, w_m)
    gs = k if group_size == -1 else group_size
    zz = np.repeat(z, gs, axis=0).astype(np.float32)
    ss = np.repeat(s, gs, axis=0).astype(np.float32)
    assert np.array_equal(w_v1, (q.astype(np.float32) - zz) * ss)


def test_dequantize_takes_any_awq_group_size() -> None:
    q, z, s = draw_layer(8, 512, 64, 4, 256)  # group 256: an AWQ-only layer, not Marlin
    w = codec.dequantize(q, z, s, 256)
    zz = np.repeat(z, 256, axis=0).astype(np.float32)
    assert np.array_equal(w, (q.astype(np.float32) - zz) * np.repeat(s, 256, 0).astype(np.float32))


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [-1, 64, 128])
def test_awq_to_marlin_equals_swizzle_of_codes(bits: int, group_size: int) -> None:
    k, n = 512, 256
    q, z, s = draw_layer(21 + bits, k, n, bits, group_size)
    mq, ms, mz = codec.awq_to_marlin(
        codec.awq_pack(q, bits), codec.awq_pack(z, bits), s, bits=bits, group_size=group_size
    )
    assert_marlin_equal(mq, codec.swizzle_qweight(q, bits), what="qweight", bits=bits)
    assert_marlin_equal(ms, codec.swizzle_scales(s, k, group_size), what="scales")
    assert_marlin_equal(mz, codec.swizzle_zeros(z, bits), what="zeros")


# ---------------------------------------------------------------------------------------------
# vLLM golden hashes (generated by vLLM's own functions; see the file's "about").


def _golden() -> dict[str, Any]:
    with GOLDEN.open() as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _golden_inputs(case: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q, z, s = draw_layer(case["seed"], case["k"], case["n"], case["bits"], case["group_size"])
    got = {"q": sha256(q), "z": sha256(z), "s": sha256(s.astype("<f2"))}
    assert got == case["inputs_sha256"], "numpy's random stream changed: inputs differ"
    return q, z, s


@pytest.mark.parametrize(
    "case", _golden()["cases"], ids=lambda c: "{bits}b-{k}x{n}-g{group_size}".format(**c)
)
def test_vllm_golden_bytes(case: dict[str, Any]) -> None:
    q, z, s = _golden_inputs(case)
    bits, k, gs = case["bits"], case["k"], case["group_size"]
    assert sha256(codec.swizzle_qweight(q, bits)) == case["qweight_sha256"]
    assert sha256(codec.swizzle_scales(s, k, gs)) == case["scales_sha256"]
    assert sha256(codec.swizzle_zeros(z, bits)) == case["qzeros_sha256"]


@pytest.mark.parametrize(
    "case",
    _golden()["shards"],
    ids=lambda c: "{bits}b-{k}x{n}-g{group_size}-{parallel}{tp_size}r{tp_rank}".format(**c),
)
def test_vllm_golden_shards(case: dict[str, Any]) -> None:
    q, z, s = _golden_inputs(case)
    bits, k, n, gs = case["bits"], case["k"], case["n"], case["group_size"]
    full = (
        codec.swizzle_qweight(q, bits),
        codec.swizzle_scales(s, k, gs),
        codec.swizzle_zeros(z, bits),
    )
    mq, ms, mz, ks, ns = codec.shard_marlin(
        *full, k=k, n=n, bits=bits, group_size=gs,
        tp_rank=case["tp_rank"], tp_size=case["tp_size"], parallel=case["parallel"],
    )  # fmt: skip
    assert (ks, ns) == (case["k_shard"], case["n_shard"])
    assert sha256(mq) == case["qweight_sha256"]
    assert sha256(ms) == case["scales_sha256"]
    assert sha256(mz) == case["qzeros_sha256"]


# ---------------------------------------------------------------------------------------------
# Tensor-parallel shards.


def _legal(k: int, n: int, gs: int, parallel: str, t: int, r: int) -> bool:
    if parallel == "column":
        if n % t:
            return False
        ks, ns = k, n // t
    else:
        if k % t:
            return False
        ks, ns = k // t, n
    return ns % 64 == 0 and ks % 128 == 0 and (gs == -1 or ks % gs == 0)


TP_LAYERS = [
    (1024, 512, 128),  # row tp=8: k_shard == group_size, the map changes
    (1024, 256, 64),
    (512, 256, -1),
    (256, 512, 128),  # row tp=2: k_shard == group_size again
    (2048, 384, 32),
    (128, 256, 128),  # group_size == k: channelwise for the full layer already
]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("k", "n", "gs"), TP_LAYERS)
def test_shard_marlin_equals_swizzled_shard(bits: int, k: int, n: int, gs: int) -> None:
    q, z, s = draw_layer(k + n + bits, k, n, bits, gs)
    full = (
        codec.swizzle_qweight(q, bits),
        codec.swizzle_scales(s, k, gs),
        codec.swizzle_zeros(z, bits),
    )
    legal = 0
    for parallel in ("column", "row"):
        for t in (1, 2, 3, 4, 8, 16):
            for r in range(t):
                args = dict(k=k, n=n, bits=bits, group_size=gs, tp_rank=r, tp_size=t)
                if not _legal(k, n, gs, parallel, t, r):
                    with pytest.raises(CodecError):
                        codec.shard_marlin(*full, **args, parallel=parallel)  # type: ignore[arg-type]
                    continue
                legal += 1
                mq, ms, mz, ks, ns = codec.shard_marlin(*full, **args, parallel=parallel)  # type: ignore[arg-type]
                if parallel == "column":
                    cols = slice(r * ns, (r + 1) * ns)
                    qs, zs, ss = q[:, cols], z[:, cols], s[:, cols]
                else:
                    qs = q[r * ks : (r + 1) * ks]
                    rows = slice(None) if gs == -1 else slice(r * ks // gs, (r + 1) * ks // gs)
                    zs, ss = z[rows], s[rows]
                tag = f"{parallel} tp={t} rank={r}"
                assert_marlin_equal(mq, codec.swizzle_qweight(qs, bits), what=tag, bits=bits)
                assert_marlin_equal(ms, codec.swizzle_scales(ss, ks, gs), what=f"{tag} scales")
                assert_marlin_equal(mz, codec.swizzle_zeros(zs, bits), what=f"{tag} zeros")
    assert legal >= 2


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("k", "n", "gs"), [(256, 448, 128), (128, 320, -1), (128, 192, 128)])
def test_columns_of_a_fused_layer_are_the_swizzled_part(bits: int, k: int, n: int, gs: int) -> None:
    """[LAY-11] Any 64-aligned column range of a stored Marlin layer (a part of a fused
    ``qkv_proj``, say) is exactly the Marlin form of that range of the plain codes, zero
    points and scales; channelwise scales (``gs`` -1, or ``gs == k``) included."""
    q, z, s = draw_layer(k * n + bits, k, n, bits, gs)
    full = (codec.swizzle_qweight(q, bits), codec.swizzle_scales(s, k, gs),
            codec.swizzle_zeros(z, bits))  # fmt: skip
    ranges = [(a, b) for a in range(0, n, 64) for b in range(a + 64, n + 1, 64)]
    for a, b in ranges:
        mq, ms, mz = codec.columns_marlin(*full, k=k, n=n, bits=bits, group_size=gs, start=a,
                                          stop=b)  # fmt: skip
        tag = f"columns {a}..{b}"
        assert_marlin_equal(mq, codec.swizzle_qweight(q[:, a:b], bits), what=tag, bits=bits)
        assert_marlin_equal(ms, codec.swizzle_scales(s[:, a:b], k, gs), what=f"{tag} scales")
        assert_marlin_equal(mz, codec.swizzle_zeros(z[:, a:b], bits), what=f"{tag} zeros")
    assert len(ranges) >= 6


@pytest.mark.parametrize(("start", "stop"), [(32, 128), (0, 96), (128, 128), (64, 0), (0, 512)])
def test_columns_off_the_64_column_grid_are_refused(start: int, stop: int) -> None:
    """[LAY-11] A part bound that is not a multiple of 64 would cut through a Marlin tile."""
    q, z, s = draw_layer(7, 128, 256, 4, 128)
    full = (codec.swizzle_qweight(q, 4), codec.swizzle_scales(s, 128, 128),
            codec.swizzle_zeros(z, 4))  # fmt: skip
    with pytest.raises(CodecError) as err:
        codec.columns_marlin(*full, k=128, n=256, bits=4, group_size=128, start=start,
                             stop=stop)  # fmt: skip
    assert err.value.rule == codec.RULE_COLUMNS


def test_row_shard_at_group_size_repermutes_scales() -> None:
    k, n, gs, bits = 1024, 512, 128, 4
    q, z, s = draw_layer(1, k, n, bits, gs)
    ms_full = codec.swizzle_scales(s, k, gs)
    for r in range(8):
        _, ms, _, ks, _ = codec.shard_marlin(
            codec.swizzle_qweight(q, bits), ms_full, codec.swizzle_zeros(z, bits),
            k=k, n=n, bits=bits, group_size=gs, tp_rank=r, tp_size=8, parallel="row",
        )  # fmt: skip
        assert ks == gs == 128
        assert not np.array_equal(ms, ms_full[r : r + 1])  # a plain slice would be wrong
        assert np.array_equal(ms, codec.swizzle_scales(s[r : r + 1], ks, gs))


@pytest.mark.parametrize(
    ("kwargs", "rule"),
    [
        (dict(tp_rank=2, tp_size=2, parallel="column"), "0 <= tp_rank < tp_size"),
        (dict(tp_rank=-1, tp_size=2, parallel="row"), "0 <= tp_rank < tp_size"),
        (dict(tp_rank=0, tp_size=0, parallel="row"), "tp_size >= 1"),
        (dict(tp_rank=0, tp_size=2, parallel="diagonal"), "parallel in {column, row}"),
        (dict(tp_rank=0, tp_size=3, parallel="column"), "tp_size divides n"),
        (dict(tp_rank=0, tp_size=3, parallel="row"), "tp_size divides k"),
        (dict(tp_rank=0, tp_size=16, parallel="column"), "n % 64 == 0"),  # n_shard = 32
        (dict(tp_rank=0, tp_size=8, parallel="row"), "k % 128 == 0"),  # k_shard = 64
    ],
)
def test_shard_marlin_rejects_bad_tp_args(kwargs: dict[str, Any], rule: str) -> None:
    k, n, gs, bits = 512, 512, 64, 4
    q, z, s = draw_layer(2, k, n, bits, gs)
    full = (
        codec.swizzle_qweight(q, bits),
        codec.swizzle_scales(s, k, gs),
        codec.swizzle_zeros(z, bits),
    )
    with pytest.raises(CodecError) as err:
        codec.shard_marlin(*full, k=k, n=n, bits=bits, group_size=gs, **kwargs)
    assert err.value.rule == rule


def test_shard_group_size_must_divide_shard_k() -> None:
    k, n, gs, bits = 384, 128, 128, 4  # row tp=3 -> k_shard 128 ok; here gs=128 divides
    q, z, s = draw_layer(4, k, n, bits, gs)
    full = (
        codec.swizzle_qweight(q, bits),
        codec.swizzle_scales(s, k, gs),
        codec.swizzle_zeros(z, bits),
    )
    codec.shard_marlin(
        *full, k=k, n=n, bits=bits, group_size=gs, tp_rank=2, tp_size=3, parallel="row"
    )
    k, gs = 256, 256  # group_size == k is not a Marlin GEMM group size
    q, z, s = draw_layer(4, k, n, bits, gs)
    full = (
        codec.swizzle_qweight(q, bits),
        codec.swizzle_scales(s, k, gs),
        codec.swizzle_zeros(z, bits),
    )
    with pytest.raises(CodecError) as err:
        codec.shard_marlin(
            *full, k=k, n=n, bits=bits, group_size=gs, tp_rank=0, tp_size=1, parallel="row"
        )
    assert err.value.rule == "group_size in {-1, 32, 64, 128, k}"


# ---------------------------------------------------------------------------------------------
# Errors: every bad shape or parameter names its rule.

Q4 = np.zeros((128, 128), dtype=np.uint8)
MQ4 = np.zeros((8, 256), dtype=np.int32)
S = np.ones((4, 128), dtype=np.float16)
BAD_CALLS = [
    ("bits 3", lambda: codec.swizzle_qweight(Q4, 3), "bits in {4, 8}"),
    ("bits 16 pack", lambda: codec.awq_pack(Q4, 16), "bits in {4, 8}"),
    ("k % 16", lambda: codec.swizzle_qweight(np.zeros((40, 64), np.uint8), 4), "k % 16 == 0"),
    ("n % 64", lambda: codec.swizzle_qweight(np.zeros((16, 96), np.uint8), 4), "n % 64 == 0"),
    ("n % pf", lambda: codec.awq_pack(np.zeros((4, 12), np.uint8), 4), "n % pf == 0"),
    ("code 16", lambda: codec.swizzle_qweight(Q4 + 16, 4), "code < 2**bits"),
    ("zero 16", lambda: codec.swizzle_zeros(np.full((1, 64), 16, np.uint8), 4), "code < 2**bits"),
    ("int32 codes", lambda: codec.swizzle_qweight(Q4.astype(np.int32), 4), "dtype"),
    ("list codes", lambda: codec.swizzle_qweight(Q4.tolist(), 4), "dtype"),  # type: ignore[arg-type]
    ("1-d codes", lambda: codec.swizzle_qweight(Q4.ravel(), 4), "shape"),
    ("mq shape", lambda: codec.unswizzle_qweight(MQ4[:, :128], 128, 128, 4), "shape"),
    ("mq dtype", lambda: codec.unswizzle_qweight(MQ4.astype(np.int64), 128, 128, 4), "dtype"),
    ("unswz k", lambda: codec.unswizzle_qweight(MQ4, 120, 128, 4), "k % 16 == 0"),
    ("group 48", lambda: codec.swizzle_scales(S, 192, 48), "group_size in {-1, 32, 64, 128, k}"),
    ("group div", lambda: codec.swizzle_scales(S, 160, 64), "group_size divides k"),
    ("scales G", lambda: codec.swizzle_scales(S, 128, 64), "shape"),
    ("scales int", lambda: codec.swizzle_scales(S.astype(np.int16), 128, 32), "dtype"),
    ("scales n", lambda: codec.swizzle_scales(S[:, :96], 128, 32), "n % 64 == 0"),
    ("zeros n", lambda: codec.unswizzle_zeros(np.zeros((1, 12), np.int32), 96, 4), "n % 64 == 0"),
    ("zeros shape", lambda: codec.unswizzle_zeros(np.zeros((1, 12), np.int32), 64, 4), "shape"),
    ("dequant z", lambda: codec.dequantize(Q4, Q4[:2], S, 32), "shape"),
    ("dequant gs", lambda: codec.dequantize(Q4, Q4[:4], S, 33), "group_size divides k"),
    ("dequant g0", lambda: codec.dequantize(Q4, Q4, S, 0), "group_size in {-1, 32, 64, 128, k}"),
    ("out dtype", lambda: codec.swizzle_qweight(Q4, 4, out=MQ4.astype(np.uint32)), "dtype"),  # type: ignore[arg-type]
    ("marlin k", lambda: codec.validate_marlin(64, 64, 4, -1), "k % 128 == 0"),
    (
        "marlin g",
        lambda: codec.validate_marlin(256, 64, 4, 256),
        "group_size in {-1, 32, 64, 128, k}",
    ),
]


@pytest.mark.parametrize(
    ("call", "rule"), [(c, r) for _, c, r in BAD_CALLS], ids=[i for i, _, _ in BAD_CALLS]
)
def test_bad_input_names_its_rule(call: Any, rule: str) -> None:
    with pytest.raises(CodecError) as err:
        call()
    assert err.value.rule == rule
    assert rule in str(err.value)
    assert err.value.rule in codec.RULES
    assert isinstance(err.value, ValueError)


def test_marlin_compatible() -> None:
    assert codec.marlin_compatible(4096, 4096, 4, 128)
    assert codec.marlin_compatible(128, 64, 8, -1)
    assert codec.marlin_compatible(128, 64, 4, 128)  # group_size == k
    assert not codec.marlin_compatible(4096, 4096 + 32, 4, 128)
    assert not codec.marlin_compatible(4096 + 64, 4096, 4, 128)
    assert not codec.marlin_compatible(4096, 4096, 3, 128)
    assert not codec.marlin_compatible(4096, 4096, 4, 256)
    assert not codec.marlin_compatible(192, 64, 4, 128)  # k % 128 fails first
    assert not codec.marlin_compatible(384, 64, 4, 256)
    assert codec.num_groups(4096, -1) == 1 and codec.num_groups(4096, 128) == 32
    assert codec.pack_factor(4) == 8 and codec.pack_factor(8) == 4


# ---------------------------------------------------------------------------------------------
# The mismatch report itself.


def test_mismatch_report_names_tile_word_and_bits() -> None:
    q, _, _ = draw_layer(9, 32, 128, 4, -1)
    good = codec.swizzle_qweight(q, 4)
    bad = good.copy()
    bad.view(np.uint32)[1, 128 + 5] ^= np.uint32(0x00F0_0000)  # row 1, tile 1, word 5, field 5
    with pytest.raises(AssertionError) as err:
        assert_marlin_equal(bad, good, what="qweight", bits=4)
    msg = str(err.value)
    assert "1 of 512 words differ" in msg
    assert "row 1 (k 16..31), tile 1, word 5 of the tile (lane 1, sub-tile 1)" in msg
    assert "differing bits 0x00f00000 (fields [5])" in msg
    with pytest.raises(AssertionError, match=r"first at \[0, 3\]"):
        s = np.ones((1, 64), np.float16)
        t = s.copy()
        t[0, 3] = 2.0
        assert_marlin_equal(t, s, what="scales")
